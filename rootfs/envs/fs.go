package envs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Modes of a sealed environment.
const (
	dirMode  = 0o555
	fileMode = 0o444
	execMode = 0o555
)

// seal makes a built tree read-only and, when the daemon runs as root,
// root-owned: directories 0555, files 0444 (0555 when any execute bit was
// set), symbolic links owned but untouched (chmod would follow them),
// anything else (fifos, sockets) removed. It walks without following
// symbolic links, since a jail wrote the tree.
func seal(root string) error {
	asRoot := os.Geteuid() == 0
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if asRoot {
			if err := os.Lchown(p, 0, 0); err != nil {
				return fmt.Errorf("seal %s: %w", p, err)
			}
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			return nil
		case d.IsDir():
			return os.Chmod(p, dirMode)
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			mode := os.FileMode(fileMode)
			if fi.Mode()&0o111 != 0 {
				mode = execMode
			}
			return os.Chmod(p, mode)
		default:
			return os.Remove(p)
		}
	})
}

// chownTree gives a tree to uid:gid without following symbolic links.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// treeSize is the disk space a tree takes (allocated blocks, not apparent
// sizes), counting each inode once.
func treeSize(root string) (int64, error) {
	var total int64
	seen := make(map[uint64]bool)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			total += st.Blocks * 512
			return nil
		}
		total += fi.Size()
		return nil
	})
	return total, err
}
