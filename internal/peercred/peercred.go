// Package peercred identifies who is on the other end of a Unix socket
// (SO_PEERCRED) and decides whether that caller may use a cellblock
// socket: root, the uids named, and members of one group. It is the one
// access check of every cellblock socket, and it makes a socket file's
// permissions let in the uids it names (AllowUIDsOnSocket), so that the
// kernel's check before it does not keep them out; it does not listen or
// serve.
package peercred

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/user"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Peer is the caller on the other end of a socket, from SO_PEERCRED: the
// credentials it had when it connected.
type Peer struct {
	UID, GID uint32
	PID      int32
}

// Get reads the peer credentials of a Unix socket connection. Anything
// else, or a connection whose credentials cannot be read, is an error: a
// caller whose credentials are unknown is refused.
func Get(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("peer credentials: %T is not a Unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", credErr)
	}
	if cred == nil {
		return Peer{}, errors.New("peer credentials: none")
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// AllowList decides who may use a socket: root, the uids given, and
// members (primary or supplementary) of group when it is not empty. A
// group that does not exist admits nobody by group.
func AllowList(group string, uids []int, log *slog.Logger) func(Peer) bool {
	members := GroupMembers(group, log)
	uids = slices.Clone(uids)
	return func(p Peer) bool {
		return slices.Contains(uids, int(p.UID)) || members(p)
	}
}

// GroupMembers decides whether a caller is root or a member (primary or
// supplementary) of group: AllowList without the uids given one by one. An
// empty group, or one that does not exist, admits root alone.
func GroupMembers(group string, log *slog.Logger) func(Peer) bool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	groupID := -1
	if group != "" {
		if g, err := user.LookupGroup(group); err == nil {
			groupID, _ = strconv.Atoi(g.Gid)
		}
	}
	return func(p Peer) bool {
		if p.UID == 0 {
			return true
		}
		if groupID < 0 {
			return false
		}
		if int(p.GID) == groupID {
			return true
		}
		u, err := user.LookupId(strconv.Itoa(int(p.UID)))
		if err != nil {
			return false
		}
		gids, err := u.GroupIds()
		if err != nil {
			log.Warn("look up caller's groups", "uid", p.UID, "err", err)
			return false
		}
		return slices.Contains(gids, strconv.Itoa(groupID))
	}
}

type peerKey struct{}

// NewContext returns ctx carrying p: the caller a request is served for.
func NewContext(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// FromContext returns the peer NewContext stored in ctx.
func FromContext(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}
