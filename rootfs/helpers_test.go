package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The store changes below are the tests' own: the daemon never removes a
// rootfs or picks another default, but the tests need stores in those
// states. They take the store's locks like its real methods.

// SetDefault makes the rootfs with the given ID the default.
func (s *Store) SetDefault(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.checkID(id); err != nil {
		return err
	}
	return s.setDefault(id)
}

// Remove takes the rootfs with the given ID out of the store at once; its
// files are deleted by the next Open (a running jail may still have it
// mounted). When it was the default, the highest remaining version becomes
// the default.
func (s *Store) Remove(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.checkID(id); err != nil {
		return err
	}
	wasDefault := s.defaultID() == id
	if err := s.retire(id); err != nil {
		return err
	}
	if !wasDefault {
		return nil
	}
	ps, err := s.list()
	if err != nil {
		return err
	}
	if p, ok := best(ps); ok {
		return s.setDefault(p.ID)
	}
	if err := os.Remove(filepath.Join(s.dir, defaultLink)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove rootfs %s: clear default: %w", id, err)
	}
	return nil
}

// checkID fails unless id names a rootfs in the store.
func (s *Store) checkID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") || id == defaultLink {
		return fmt.Errorf("rootfs id %q: %w", id, fs.ErrInvalid)
	}
	if _, err := os.Stat(filepath.Join(s.dir, id, metaFileName)); err != nil {
		return fmt.Errorf("rootfs %s: %w", id, err)
	}
	return nil
}
