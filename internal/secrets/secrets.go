// Package secrets holds the credentials the operator declared
// (cellblockd --secret NAME=FILE, --secret-host NAME=PATTERN,
// --secret-allow-uid NAME=UID): each one's name, the hosts it belongs to,
// the uids it is granted to, and its value, read from its file at start
// and again on Reload (SIGHUP).
//
// It hands values to one reader only, the egress proxy, which puts them in
// requests to the secrets' hosts. It must not put a value in an error, a
// log line, a String or a JSON form of anything it returns, and must not
// write one anywhere: the errors it makes name the secret and its file,
// never what the file holds. It knows nothing of runs or jails.
package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cellblock/cellblock/internal/api"
)

// Bounds of a value.
const (
	// MinValueBytes is the shortest value accepted: a shorter one would
	// be found by chance in responses, where it is replaced.
	MinValueBytes = 8
	// MaxValueBytes is the longest: a credential, not a document.
	MaxValueBytes = 8 << 10
)

// Decl is one declared secret: plain data, checked by the daemon's
// configuration.
type Decl struct {
	// Name is the secret's name, the variable its placeholder is in.
	Name string
	// File holds the value (a systemd credential:
	// ${CREDENTIALS_DIRECTORY}/NAME).
	File string
	// Hosts are where the value may go: the network allowlist's patterns.
	Hosts []api.NetPattern
	// UIDs may ask for it besides root.
	UIDs []uint32
}

// Store is the declared secrets and their current values. Its methods are
// safe for concurrent use.
type Store struct {
	decls []Decl // sorted by name
	// values maps a name to its values, the current one first, then
	// those it replaced (at most MaxPast of them, the newest first); a
	// Reload replaces the map.
	values atomic.Pointer[map[string][]string]
	reload sync.Mutex
}

// MaxPast is how many values a secret remembers after a rotation, for
// taking them out of responses: a rotated token may stay valid a while,
// and a host may hand back one it stored.
const MaxPast = 8

// Open reads the value of every declaration. A file that cannot be read,
// or whose content is no valid value, fails it, naming the secret and the
// file.
func Open(decls []Decl) (*Store, error) {
	s := &Store{decls: slices.Clone(decls)}
	sort.Slice(s.decls, func(i, j int) bool { return s.decls[i].Name < s.decls[j].Name })
	values := make(map[string][]string, len(decls))
	var errs []error
	for i, d := range s.decls {
		if i > 0 && s.decls[i-1].Name == d.Name {
			errs = append(errs, fmt.Errorf("secret %s is declared twice", d.Name))
			continue
		}
		if len(d.Hosts) == 0 {
			errs = append(errs, fmt.Errorf("secret %s has no host (--secret-host %s=HOST:PORT): a secret goes only to its hosts", d.Name, d.Name))
			continue
		}
		v, err := ReadValue(d.File)
		if err != nil {
			errs = append(errs, fmt.Errorf("secret %s: %w", d.Name, err))
			continue
		}
		values[d.Name] = []string{v}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.values.Store(&values)
	return s, nil
}

// Len is how many secrets are declared; a nil Store has none.
func (s *Store) Len() int {
	if s == nil {
		return 0
	}
	return len(s.decls)
}

// Decl returns the declaration of name.
func (s *Store) Decl(name string) (Decl, bool) {
	if s == nil {
		return Decl{}, false
	}
	i, ok := slices.BinarySearchFunc(s.decls, name, func(d Decl, n string) int {
		switch {
		case d.Name < n:
			return -1
		case d.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return Decl{}, false
	}
	return s.decls[i], true
}

// Granted reports whether uid may ask for name: root always, others when
// the operator granted it (--secret-allow-uid).
func (d Decl) Granted(uid uint32) bool {
	return uid == 0 || slices.Contains(d.UIDs, uid)
}

// Value is name's current value, "" for an unknown name. Its one caller
// is the proxy that puts it in requests.
func (s *Store) Value(name string) string {
	if s == nil {
		return ""
	}
	if vs := (*s.values.Load())[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Values are name's current value and those it replaced, newest first:
// what the proxy takes out of responses.
func (s *Store) Values(name string) []string {
	if s == nil {
		return nil
	}
	return slices.Clone((*s.values.Load())[name])
}

// Reload reads every file again. A secret whose file fails keeps its
// value, and the error names it; the others take their new values at
// once. It returns the names whose value changed.
func (s *Store) Reload() (changed []string, err error) {
	if s == nil {
		return nil, nil
	}
	s.reload.Lock()
	defer s.reload.Unlock()
	old := *s.values.Load()
	values := make(map[string][]string, len(old))
	var errs []error
	for _, d := range s.decls {
		vs := old[d.Name]
		v, err := ReadValue(d.File)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("secret %s keeps its value: %w", d.Name, err))
		case v != vs[0]:
			changed = append(changed, d.Name)
			past := slices.DeleteFunc(slices.Clone(vs), func(x string) bool { return x == v })
			vs = append([]string{v}, past[:min(len(past), MaxPast)]...)
		}
		values[d.Name] = vs
	}
	s.values.Store(&values)
	return changed, errors.Join(errs...)
}

// Info lists the secrets for the daemon's info: names, hosts and grants.
func (s *Store) Info() []api.SecretInfo {
	if s == nil {
		return nil
	}
	out := make([]api.SecretInfo, 0, len(s.decls))
	for _, d := range s.decls {
		si := api.SecretInfo{Name: d.Name, Hosts: []string{}, AllowUIDs: slices.Clone(d.UIDs)}
		if si.AllowUIDs == nil {
			si.AllowUIDs = []uint32{}
		}
		for _, h := range d.Hosts {
			si.Hosts = append(si.Hosts, h.String())
		}
		out = append(out, si)
	}
	return out
}

// ReadValue reads a value from file: its content less one final line
// ending, between MinValueBytes and MaxValueBytes, with no control
// characters (a value goes in HTTP headers). Its errors never quote the
// content.
func ReadValue(file string) (string, error) {
	// Non-blocking, so that a FIFO (or a device) in the file's place is
	// refused below rather than waited on; a regular file reads as ever.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", err // names the file, and nothing it holds
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", file)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxValueBytes+3))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	switch {
	case len(b) < MinValueBytes:
		return "", fmt.Errorf("%s holds %d bytes; a secret's value is at least %d", file, len(b), MinValueBytes)
	case len(b) > MaxValueBytes:
		return "", fmt.Errorf("%s holds more than %d bytes; a secret's value is at most that", file, MaxValueBytes)
	}
	for i, c := range b {
		if c < ' ' || c == 0x7f {
			return "", fmt.Errorf("%s holds a control character at byte %d; a secret's value is one line of printable text", file, i)
		}
	}
	return string(b), nil
}
