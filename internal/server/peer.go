package server

import (
	"context"
	"net"

	"golang.org/x/sys/unix"
)

// Peer is the caller on the other end of the socket, from SO_PEERCRED.
type Peer struct {
	UID, GID uint32
	PID      int32
}

type peerKey struct{}

// withPeer stores the connection's peer credentials in its context. A
// connection whose credentials cannot be read gets none, and is refused.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid})
}

// PeerFrom returns the peer stored by withPeer.
func PeerFrom(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}
