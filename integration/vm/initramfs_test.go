package vm

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"syscall"
)

// cpioWriter writes a cpio archive in the "newc" format the kernel unpacks
// as an initramfs.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr + name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(p []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(p)
	}
}

// pad aligns to 4 bytes after n bytes.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) dir(name string) { c.entry(name, syscall.S_IFDIR|0o755, 0, 0, nil) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, syscall.S_IFREG|perm, 0, 0, data)
}

func (c *cpioWriter) charDev(name string, major, minor int) {
	c.entry(name, syscall.S_IFCHR|0o600, major, minor, nil)
}

func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

// initramfsFile is one regular file of the initramfs.
type initramfsFile struct {
	name string // path in the initramfs, without a leading slash
	perm uint32
	data []byte
}

// writeInitramfs writes a gzip'd cpio with /dev/console, the directories
// the files need, and the files.
func writeInitramfs(dst string, files []initramfsFile) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	c := &cpioWriter{w: gz}
	dirs := map[string]bool{"dev": true}
	c.dir("dev")
	c.charDev("dev/console", 5, 1)
	for _, d := range []string{"proc", "sys"} {
		c.dir(d)
		dirs[d] = true
	}
	for _, file := range files {
		var parents []string
		for d := path.Dir(file.name); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			c.dir(d)
		}
		c.file(file.name, file.perm, file.data)
	}
	if err := c.close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}
