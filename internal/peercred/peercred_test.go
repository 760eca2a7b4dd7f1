package peercred

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Get reads the credentials of the process on the other end: here, this
// one.
func TestGetOnAUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	defer server.Close()
	p, err := Get(server)
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) || p.PID != int32(os.Getpid()) {
		t.Errorf("peer %+v, want this process", p)
	}
}

func TestGetRefusesOtherConnections(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := Get(a); err == nil {
		t.Error("Get on a pipe gave credentials")
	}
}

func TestAllowList(t *testing.T) {
	allowed := AllowList("", []int{4242}, nil)
	for _, c := range []struct {
		p    Peer
		want bool
	}{
		{Peer{UID: 0}, true},
		{Peer{UID: 4242, GID: 9}, true},
		{Peer{UID: 65534, GID: 65534}, false},
	} {
		if got := allowed(c.p); got != c.want {
			t.Errorf("allowed(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
	// A group that does not exist admits nobody by group.
	if AllowList("cellblock-no-such-group", nil, nil)(Peer{UID: 65534, GID: 65534}) {
		t.Error("an unknown group admitted a caller")
	}
}

// The ACL gives each uid read and write and keeps the mode's owner, group
// and others; the kernel takes it (a malformed one is EINVAL), reads it
// back as written, and the mode's group bits become its mask. Without uids
// it is removed again.
func TestAllowUIDsOnSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	err = AllowUIDsOnSocket(path, []int{65534, 1000, 65534})
	if errors.Is(err, ErrNoACL) {
		t.Skipf("the temporary directory's filesystem has no ACLs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{2, 0, 0, 0}
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 6, aclUndefinedID}, {2, 6, 1000}, {2, 6, 65534}, {4, 4, aclUndefinedID}, {0x10, 6, aclUndefinedID}, {0x20, 0, aclUndefinedID}} {
		want = binary.LittleEndian.AppendUint16(want, e.tag)
		want = binary.LittleEndian.AppendUint16(want, e.perm)
		want = binary.LittleEndian.AppendUint32(want, e.id)
	}
	got := make([]byte, 256)
	n, err := unix.Getxattr(path, aclXattr, got)
	if err != nil || !bytes.Equal(got[:n], want) {
		t.Errorf("ACL %x (%v), want %x", got[:max(n, 0)], err, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o660 {
		t.Errorf("mode with the ACL: %v %v, want 0660 (the mask)", st.Mode(), err)
	}
	if err := AllowUIDsOnSocket(path, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(path, aclXattr, got); !errors.Is(err, unix.ENODATA) {
		t.Errorf("ACL after removal: %v, want ENODATA", err)
	}
	if err := AllowUIDsOnSocket(path, nil); err != nil {
		t.Errorf("removing no ACL: %v", err)
	}
}
