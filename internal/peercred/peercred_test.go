package peercred

import (
	"net"
	"os"
	"path/filepath"
	"testing"
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
