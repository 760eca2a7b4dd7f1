package peercred

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// The kernel's gate before ours: connect(2) on a Unix socket needs write
// permission on its file. A socket made 0660 for its group keeps out a uid
// given with --allow-uid that is not in the group, before the daemon sees
// it; AllowUIDsOnSocket lets exactly those uids in with a POSIX access ACL
// on the socket's inode (tmpfs, ext4, xfs and btrfs have them on every
// common distribution's kernel: CONFIG_TMPFS_POSIX_ACL and the like).
//
// The ACL is written as the system.posix_acl_access extended attribute in
// the kernel's own format (include/uapi/linux/posix_acl_xattr.h): a
// little-endian version 2, then entries of tag, permissions and id, sorted
// by tag and then id. No library is needed for that, and the ones there are
// wrap libacl with cgo.

// ACL tags and the id of entries that have none (posix_acl_xattr.h).
const (
	aclXattr       = "system.posix_acl_access"
	aclVersion     = 2
	aclUserObj     = 0x01
	aclUser        = 0x02
	aclGroupObj    = 0x04
	aclMask        = 0x10
	aclOther       = 0x20
	aclUndefinedID = 0xffffffff
	aclRW          = 4 | 2
)

// ErrNoACL is AllowUIDsOnSocket's error when the socket's filesystem has
// no POSIX ACLs.
var ErrNoACL = errors.New("the filesystem has no POSIX ACLs")

// AllowUIDsOnSocket lets uids connect to the Unix socket file at path
// besides its owner and group: an access ACL that gives each of them read
// and write, keeps the owner's, group's and others' permissions as the
// file's mode has them, and masks nothing of the group's. With no uids it
// removes any access ACL the file has (a daemon started again without
// --allow-uid). Call it on a socket whose mode is already what the owner
// and group should have.
func AllowUIDsOnSocket(path string, uids []int) error {
	if len(uids) == 0 {
		err := unix.Removexattr(path, aclXattr)
		if err == nil || errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil
		}
		return fmt.Errorf("remove the ACL of %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("socket ACL: %w", err)
	}
	if err := unix.Setxattr(path, aclXattr, socketACL(uint32(st.Mode().Perm()), uids), 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("let --allow-uid %v reach %s: %w (mount it with ACLs, put the socket elsewhere, or add the uids to the socket group instead)", uids, path, ErrNoACL)
		}
		return fmt.Errorf("let --allow-uid %v reach %s: %w", uids, path, err)
	}
	return nil
}

// socketACL encodes the access ACL of a file of permissions perm (0660)
// that also gives each of uids read and write.
func socketACL(perm uint32, uids []int) []byte {
	ids := slices.Clone(uids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	group := uint16(perm>>3) & 7
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	entry := func(tag, perm uint16, id uint32) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	entry(aclUserObj, uint16(perm>>6)&7, aclUndefinedID)
	for _, id := range ids {
		entry(aclUser, aclRW, uint32(id))
	}
	entry(aclGroupObj, group, aclUndefinedID)
	// The mask bounds the named users' and the group's entries; it must
	// let both through.
	entry(aclMask, group|aclRW, aclUndefinedID)
	entry(aclOther, uint16(perm)&7, aclUndefinedID)
	return b
}
