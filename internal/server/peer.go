package server

import (
	"context"
	"net"

	"github.com/cellblock/cellblock/internal/peercred"
)

// withPeer stores the connection's peer credentials in its context. A
// connection whose credentials cannot be read gets none, and is refused.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		// Read as it was accepted.
		return peercred.NewContext(ctx, pc.Peer())
	}
	p, err := peercred.Get(c)
	if err != nil {
		return ctx
	}
	return peercred.NewContext(ctx, p)
}

// PeerFrom returns the peer stored by withPeer.
func PeerFrom(ctx context.Context) (peercred.Peer, bool) {
	return peercred.FromContext(ctx)
}
