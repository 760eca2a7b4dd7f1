package rootfs

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// elfObject is what the library closure needs to know about one ELF file.
type elfObject struct {
	path    string // the path the object was found under (not symlink-resolved)
	class   elf.Class
	machine elf.Machine
	interp  string   // PT_INTERP, empty for libraries
	needed  []string // DT_NEEDED, in order
	rpath   []string // DT_RPATH with $ORIGIN expanded; ignored by ld.so when runpath is set
	runpath []string // DT_RUNPATH with $ORIGIN expanded

	visited bool
	missing []string // unresolved needs in this object's subtree, "name (needed by path)"
}

// readELF reads the dynamic-linking facts of the ELF file at path.
func readELF(path string) (*elfObject, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	o := &elfObject{path: path, class: f.Class, machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return nil, fmt.Errorf("read PT_INTERP of %s: %w", path, err)
		}
		o.interp = strings.TrimRight(string(b), "\x00")
	}
	if f.Section(".dynamic") == nil {
		return o, nil // statically linked
	}
	if o.needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return nil, fmt.Errorf("read DT_NEEDED of %s: %w", path, err)
	}
	origin := filepath.Dir(path)
	rpath, err := f.DynString(elf.DT_RPATH)
	if err != nil {
		return nil, fmt.Errorf("read DT_RPATH of %s: %w", path, err)
	}
	runpath, err := f.DynString(elf.DT_RUNPATH)
	if err != nil {
		return nil, fmt.Errorf("read DT_RUNPATH of %s: %w", path, err)
	}
	o.rpath = expandSearchPath(rpath, origin)
	o.runpath = expandSearchPath(runpath, origin)
	return o, nil
}

// expandSearchPath splits DT_RPATH/DT_RUNPATH strings on ':' and expands
// $ORIGIN and ${ORIGIN}. Entries using other dynamic string tokens ($LIB,
// $PLATFORM) or relative paths are dropped: ld.so would resolve those against
// facts of the running process we cannot reproduce, and no CPython build we
// support uses them.
func expandSearchPath(values []string, origin string) []string {
	var dirs []string
	for _, v := range values {
		for _, d := range strings.Split(v, ":") {
			d = strings.ReplaceAll(d, "${ORIGIN}", origin)
			d = strings.ReplaceAll(d, "$ORIGIN", origin)
			if d == "" || strings.Contains(d, "$") || !filepath.IsAbs(d) {
				continue
			}
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	return dirs
}

// libResolver computes the shared-library closure of ELF objects the way
// glibc's dynamic loader would on this host, without running anything.
type libResolver struct {
	class   elf.Class
	machine elf.Machine
	// dirs are searched after DT_RPATH/DT_RUNPATH: ld.so.conf directories
	// first, then the loader's built-in defaults.
	dirs []string

	objs map[string]*elfObject // by path as found
	// libs maps each DT_NEEDED name to the file it resolved to. The dynamic
	// loader loads one object per name, so the first resolution wins, as it
	// does at run time.
	libs map[string]string
}

// newLibResolver returns a resolver for objects of the class and machine of
// the executable at exe, searching the host's ld.so.conf directories.
func newLibResolver(exe string) (*libResolver, error) {
	o, err := readELF(exe)
	if err != nil {
		return nil, err
	}
	r := &libResolver{
		class:   o.class,
		machine: o.machine,
		objs:    map[string]*elfObject{},
		libs:    map[string]string{},
	}
	conf, err := ldSoConfDirs("/etc/ld.so.conf")
	if err != nil {
		return nil, err
	}
	r.dirs = appendUnique(conf, defaultLibDirs(o.class, o.machine)...)
	return r, nil
}

// defaultLibDirs are the directories glibc's loader searches when nothing
// else finds a library: the multiarch directories Debian adds, then the
// traditional ones.
func defaultLibDirs(class elf.Class, machine elf.Machine) []string {
	var dirs []string
	if t := multiarchTriplet(machine); t != "" {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	if class == elf.ELFCLASS64 {
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	return append(dirs, "/lib", "/usr/lib")
}

// multiarchTriplet is Debian's multiarch name for a machine, "" if unknown.
func multiarchTriplet(machine elf.Machine) string {
	switch machine {
	case elf.EM_X86_64:
		return "x86_64-linux-gnu"
	case elf.EM_AARCH64:
		return "aarch64-linux-gnu"
	case elf.EM_386:
		return "i386-linux-gnu"
	case elf.EM_PPC64:
		return "powerpc64le-linux-gnu"
	case elf.EM_S390:
		return "s390x-linux-gnu"
	case elf.EM_RISCV:
		return "riscv64-linux-gnu"
	}
	return ""
}

// ldSoConfDirs reads the directories listed in an ld.so.conf file,
// following "include" lines (with globs, relative to the including file's
// directory) and ignoring comments and "hwcap" lines.
func ldSoConfDirs(path string) ([]string, error) {
	var dirs []string
	seen := map[string]bool{}
	var read func(string) error
	read = func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			switch fields[0] {
			case "include":
				for _, pat := range fields[1:] {
					if !filepath.IsAbs(pat) {
						pat = filepath.Join(filepath.Dir(p), pat)
					}
					matches, err := filepath.Glob(pat)
					if err != nil {
						return fmt.Errorf("%s: include %q: %w", p, pat, err)
					}
					sort.Strings(matches)
					for _, m := range matches {
						if err := read(m); err != nil {
							return err
						}
					}
				}
			case "hwcap":
			default:
				for _, d := range fields {
					// Old syntax allowed "dir=TYPE" and comma separators.
					for _, d := range strings.Split(d, ",") {
						d, _, _ = strings.Cut(d, "=")
						if filepath.IsAbs(d) {
							dirs = appendUnique(dirs, filepath.Clean(d))
						}
					}
				}
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		return nil
	}
	if err := read(path); err != nil {
		return nil, err
	}
	return dirs, nil
}

func appendUnique(list []string, items ...string) []string {
	for _, it := range items {
		found := false
		for _, l := range list {
			if l == it {
				found = true
				break
			}
		}
		if !found {
			list = append(list, it)
		}
	}
	return list
}

// object returns the (cached) ELF facts for path.
func (r *libResolver) object(path string) (*elfObject, error) {
	if o, ok := r.objs[path]; ok {
		return o, nil
	}
	o, err := readELF(path)
	if err != nil {
		return nil, err
	}
	r.objs[path] = o
	return o, nil
}

// walk adds the closure of the object at path to r.libs. inherited holds
// the DT_RPATH directories of the objects that caused this one to be loaded
// (up to and including the executable), which glibc also searches for
// objects without DT_RUNPATH. It returns the object, whose missing field
// lists the needs that could not be resolved in its subtree.
func (r *libResolver) walk(path string, inherited []string) (*elfObject, error) {
	o, err := r.object(path)
	if err != nil {
		return nil, err
	}
	if o.visited {
		return o, nil
	}
	o.visited = true
	if o.class != r.class || o.machine != r.machine {
		return nil, fmt.Errorf("%s is %v/%v, want %v/%v", path, o.class, o.machine, r.class, r.machine)
	}
	// DT_RPATH applies to this object's needs and, when it has no
	// DT_RUNPATH, is inherited by what it loads.
	chain := inherited
	if len(o.runpath) == 0 && len(o.rpath) > 0 {
		chain = append(append([]string{}, o.rpath...), inherited...)
	}
	for _, name := range o.needed {
		if p, ok := r.libs[name]; ok {
			dep, err := r.object(p)
			if err != nil {
				return nil, err
			}
			o.missing = append(o.missing, dep.missing...)
			continue
		}
		p := r.find(name, o, chain)
		if p == "" {
			o.missing = append(o.missing, fmt.Sprintf("%s (needed by %s)", name, path))
			continue
		}
		r.libs[name] = p
		dep, err := r.walk(p, chain)
		if err != nil {
			return nil, err
		}
		o.missing = append(o.missing, dep.missing...)
	}
	return o, nil
}

// find resolves one DT_NEEDED name for object o like ld.so: a name with a
// slash is a path; otherwise DT_RPATH of o and its loaders (only when o has
// no DT_RUNPATH), then o's DT_RUNPATH, then the system directories. A
// candidate must be a regular file of the right ELF class and machine,
// otherwise the search goes on, as ld.so skips incompatible libraries.
func (r *libResolver) find(name string, o *elfObject, chain []string) string {
	if strings.Contains(name, "/") {
		if r.compatible(name) {
			return name
		}
		return ""
	}
	var dirs []string
	if len(o.runpath) == 0 {
		dirs = append(dirs, chain...)
	}
	dirs = append(dirs, o.runpath...)
	dirs = append(dirs, r.dirs...)
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if r.compatible(p) {
			return p
		}
	}
	return ""
}

func (r *libResolver) compatible(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Class == r.class && f.Machine == r.machine
}
