package vm

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// guestModules are the modules the guest loads, in this order (there is no
// modules.dep to resolve them): virtio over MMIO, 9p for the shares, and
// overlay, which Debian's generic kernel builds as modules.
var guestModules = []string{
	"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
	"virtio_mmio", "netfs", "fscache", "9pnet", "9pnet_virtio", "9p", "overlay",
}

// foldedModules were modules of their own in older kernels and are part of
// another in newer ones (fscache is in netfs.ko in 6.12).
var foldedModules = map[string]string{"fscache": "netfs"}

// vmKernels are the kernels the test boots, as apt meta-packages of
// Debian's generic amd64 kernel (the cloud flavour has no 9p). The
// distribution's default one must be had. 6.12 is the first whose
// memory.peak can be reset (per descriptor), which cgroup.StartAccounting
// uses where it can; it is booted too where apt offers it (Debian 12 does,
// from its security updates), so that both ways are proven.
var vmKernels = []vmKernel{
	{"linux-image-amd64", true},
	{"linux-image-6.12-amd64", false},
}

// vmKernel is a kernel to boot: an apt meta-package (or a kernel package)
// and whether the test fails without it.
type vmKernel struct {
	meta     string
	required bool
}

// kernel is a Debian kernel unpacked for a PVH boot.
type kernel struct {
	pkg     string // e.g. linux-image-6.1.0-56-amd64
	vmlinux string // the uncompressed ELF image, booted through its PVH note
	modules string // a directory holding guestModules as <name>.ko
}

// errSetup marks failures to get the VM's ingredients (packages, network),
// as opposed to failures of the code under test.
var errSetup = errors.New("VM setup")

// ensureKernel returns the cached kernel that meta (a meta-package, or a
// kernel package itself) points at, downloading and unpacking it first if
// needed. cacheDir/<package>/ holds vmlinux and modules/; it appears whole
// (renamed into place) or not at all.
func ensureKernel(cacheDir, meta string, logf func(string, ...any)) (*kernel, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: kernel cache: %w", errSetup, err)
	}
	pkg, resolveErr := kernelPackage(meta)
	if resolveErr != nil {
		// apt's lists may never have been fetched on this machine.
		if aptUpdate() == nil {
			pkg, resolveErr = kernelPackage(meta)
		}
	}
	if resolveErr != nil {
		// Offline, or apt's lists are gone: a kernel cached earlier will do.
		if k, ok := anyCachedKernel(cacheDir, meta); ok {
			logf("cannot resolve %s (%v); using the cached %s", meta, resolveErr, k.pkg)
			return k, nil
		}
		return nil, fmt.Errorf("%w: %w", errSetup, resolveErr)
	}
	k := cachedKernel(cacheDir, pkg)
	if _, err := os.Stat(k.vmlinux); err == nil {
		return k, nil
	}
	logf("downloading and unpacking %s into %s", pkg, cacheDir)
	if err := fetchKernel(cacheDir, pkg); err != nil {
		return nil, err
	}
	return k, nil
}

func cachedKernel(cacheDir, pkg string) *kernel {
	dir := filepath.Join(cacheDir, pkg)
	return &kernel{pkg: pkg, vmlinux: filepath.Join(dir, "vmlinux"), modules: filepath.Join(dir, "modules")}
}

// anyCachedKernel finds a cached kernel for meta: one whose version the
// meta-package names (linux-image-6.12-amd64: a 6.12 kernel), or any for
// the unversioned linux-image-amd64.
func anyCachedKernel(cacheDir, meta string) (*kernel, bool) {
	series := strings.TrimSuffix(strings.TrimPrefix(meta, "linux-image-"), "-amd64")
	entries, _ := os.ReadDir(cacheDir)
	for i := len(entries) - 1; i >= 0; i-- {
		k := cachedKernel(cacheDir, entries[i].Name())
		if _, err := os.Stat(k.vmlinux); err != nil || !strings.HasPrefix(k.pkg, "linux-image-") {
			continue
		}
		if series == "amd64" || strings.HasPrefix(k.pkg, "linux-image-"+series+".") || k.pkg == meta {
			return k, true
		}
	}
	return nil, false
}

// pruneKernels removes cached kernels other than keep.
func pruneKernels(cacheDir string, keep []string) {
	entries, _ := os.ReadDir(cacheDir)
	for _, e := range entries {
		if !slices.Contains(keep, e.Name()) && strings.HasPrefix(e.Name(), "linux-image-") {
			_ = os.RemoveAll(filepath.Join(cacheDir, e.Name()))
		}
	}
}

var (
	kernelDepRE = regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*-amd64)\b`)
	kernelPkgRE = regexp.MustCompile(`^linux-image-[0-9]+\.[0-9]+\.[0-9]+[-+][^\s]*-amd64$`)
)

// kernelPackage asks apt which kernel package meta points at; a kernel
// package (its name has a version with an ABI number) is its own answer.
func kernelPackage(meta string) (string, error) {
	if kernelPkgRE.MatchString(meta) {
		return meta, nil
	}
	out, err := exec.Command("apt-cache", "depends", meta).CombinedOutput()
	if m := kernelDepRE.FindSubmatch(out); err == nil && m != nil {
		return string(m[1]), nil
	}
	return "", fmt.Errorf("apt-cache depends %s: %v: %s", meta, err, bytes.TrimSpace(out))
}

func aptUpdate() error {
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// fetchKernel downloads pkg with apt-get, unpacks it with dpkg -x, and
// moves vmlinux and the modules into cacheDir/pkg.
func fetchKernel(cacheDir, pkg string) error {
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-")
	if err != nil {
		return fmt.Errorf("%w: %w", errSetup, err)
	}
	defer os.RemoveAll(tmp)
	download := func() error {
		cmd := exec.Command("apt-get", "download", "-qq", pkg)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get download %s: %v: %s", pkg, err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := download(); err != nil {
		// Stale lists point at a version the mirror no longer has.
		if uerr := aptUpdate(); uerr != nil {
			return fmt.Errorf("%w: %v; %v", errSetup, err, uerr)
		}
		if err := download(); err != nil {
			return fmt.Errorf("%w: %w", errSetup, err)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("%w: apt-get download %s left %v", errSetup, pkg, debs)
	}
	root := filepath.Join(tmp, "root")
	if out, err := exec.Command("dpkg", "-x", debs[0], root).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: dpkg -x: %v: %s", errSetup, err, bytes.TrimSpace(out))
	}
	bz, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(bz) != 1 {
		return fmt.Errorf("%w: %s has no single boot/vmlinuz-*: %v", errSetup, pkg, bz)
	}
	release := strings.TrimPrefix(filepath.Base(bz[0]), "vmlinuz-")

	out := filepath.Join(tmp, "out")
	if err := os.MkdirAll(filepath.Join(out, "modules"), 0o755); err != nil {
		return err
	}
	if err := extractVmlinux(bz[0], filepath.Join(out, "vmlinux")); err != nil {
		return err
	}
	if err := copyModules(filepath.Join(root, "lib", "modules", release), filepath.Join(out, "modules")); err != nil {
		return err
	}
	dst := filepath.Join(cacheDir, pkg)
	_ = os.RemoveAll(dst)
	return os.Rename(out, dst)
}

// payloads are the compressions a Debian bzImage carries vmlinux in, after
// the real-mode and decompressor code: xz up to 6.1, zstd from 6.12. Each
// command stops at the end of its stream or frame; what follows (the
// kernel's appended size) is ignored, and only an ELF result counts.
var payloads = []struct {
	magic []byte
	cmd   []string
	pkg   string
}{
	{[]byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, []string{"xz", "--decompress", "--stdout", "--single-stream"}, "xz-utils"},
	{[]byte{0x28, 0xb5, 0x2f, 0xfd}, []string{"zstd", "--decompress", "--stdout", "--quiet"}, "zstd"},
}

// extractVmlinux finds the compressed vmlinux in a bzImage and
// decompresses it to dst, an ELF file.
func extractVmlinux(bzImage, dst string) error {
	data, err := os.ReadFile(bzImage)
	if err != nil {
		return err
	}
	var tried []string
	for _, p := range payloads {
		for off := 0; ; off++ {
			i := bytes.Index(data[off:], p.magic)
			if i < 0 {
				break
			}
			off += i
			f, err := os.Create(dst)
			if err != nil {
				return err
			}
			cmd := exec.Command(p.cmd[0], p.cmd[1:]...)
			cmd.Stdin = bytes.NewReader(data[off:])
			cmd.Stdout = f
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err = cmd.Run()
			f.Close()
			if errors.Is(err, exec.ErrNotFound) {
				return fmt.Errorf("%w: %s is missing (install %s): %w", errSetup, p.cmd[0], p.pkg, err)
			}
			// zstd complains about the bytes after the frame, but has
			// written the whole frame by then.
			if isELF(dst) {
				return nil
			}
			tried = append(tried, fmt.Sprintf("%s at offset %d: %v %s", p.cmd[0], off, err, bytes.TrimSpace(stderr.Bytes())))
		}
	}
	os.Remove(dst)
	return fmt.Errorf("%w: no xz- or zstd-compressed ELF in %s (tried %v)", errSetup, bzImage, tried)
}

// isELF reports whether path is a whole ELF file: it parses, and every
// loadable segment lies inside it (a decompression cut short does not).
func isELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	loads := 0
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		loads++
		if p.Off+p.Filesz > uint64(fi.Size()) {
			return false
		}
	}
	return loads > 0
}

// copyModules copies guestModules out of a module tree as <name>.ko,
// decompressing .ko.xz ones.
func copyModules(tree, dst string) error {
	found := make(map[string]string)
	err := filepath.WalkDir(tree, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		name := e.Name()
		for _, suffix := range []string{".ko", ".ko.xz"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if _, dup := found[base]; !dup {
					found[base] = p
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: read modules: %w", errSetup, err)
	}
	builtin, _ := os.ReadFile(filepath.Join(tree, "modules.builtin"))
	for _, m := range guestModules {
		src, ok := found[m]
		if !ok {
			// Newer kernels build some of them in (virtio in 6.12) or
			// fold them into another: the guest loads what there is.
			if _, folded := found[foldedModules[m]]; folded || isBuiltin(builtin, m) {
				continue
			}
			return fmt.Errorf("%w: module %s not found in %s", errSetup, m, tree)
		}
		var data []byte
		if strings.HasSuffix(src, ".xz") {
			data, err = exec.Command("xz", "--decompress", "--stdout", src).Output()
		} else {
			data, err = os.ReadFile(src)
		}
		if err != nil {
			return fmt.Errorf("%w: read module %s: %w", errSetup, src, err)
		}
		if err := os.WriteFile(filepath.Join(dst, m+".ko"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// isBuiltin reports whether modules.builtin lists the module name.
func isBuiltin(list []byte, name string) bool {
	for line := range strings.Lines(string(list)) {
		if strings.TrimSuffix(filepath.Base(strings.TrimSpace(line)), ".ko") == name {
			return true
		}
	}
	return false
}

// hostTSCkHz is the host CPU's clock in kHz, which the microvm guest needs
// as tsc_early_khz: without it, it hangs calibrating the TSC.
func hostTSCkHz() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 2_000_000
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		var mhz float64
		if _, err := fmt.Sscan(strings.TrimSpace(v), &mhz); err == nil && mhz > 0 {
			return int(mhz * 1000)
		}
	}
	return 2_000_000
}
