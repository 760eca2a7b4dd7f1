package envs

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

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
