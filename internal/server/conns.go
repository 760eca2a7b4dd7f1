package server

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
)

// Connections: every connection costs the daemon a descriptor and a
// goroutine for as long as its client keeps it open, and a client that
// opens many and sends slowly (a request's headers, and no body) could
// take every descriptor the daemon has, and with them root's next
// connection and the jails' pipes. So the listener counts the open
// connections of each uid, from the peer credentials it reads as it
// accepts one, and closes at once, with an answer saying why, a
// connection past MaxConnsPerUID for its uid or past MaxConns for all
// uids but root together. No other uid's connections count against
// root's, and the callers Config.Uncounted names (the daemon: root) are
// not counted at all: the operator always gets in.

// connRefusalDeadline bounds writing the answer to a connection refused
// as it is accepted: a new connection's buffer takes it at once, and a
// client that does not read it loses it.
const connRefusalDeadline = 100 * time.Millisecond

// connCounter counts the open connections of each uid, and of all but
// root's together.
type connCounter struct {
	perUID, total int // 0: no cap

	mu    sync.Mutex
	all   int
	byUID map[uint32]int
}

// take counts a connection of uid, unless that would go past a cap.
func (c *connCounter) take(uid uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perUID > 0 && c.byUID[uid] >= c.perUID || uid != 0 && c.total > 0 && c.all >= c.total {
		return false
	}
	if c.byUID == nil {
		c.byUID = map[uint32]int{}
	}
	c.byUID[uid]++
	if uid != 0 {
		c.all++
	}
	return true
}

// give counts a connection of uid closed.
func (c *connCounter) give(uid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if uid != 0 {
		c.all--
	}
	if c.byUID[uid]--; c.byUID[uid] <= 0 {
		delete(c.byUID, uid)
	}
}

// limitListener is a listener whose connections carry their peer and
// count against their uid's caps.
type limitListener struct {
	net.Listener
	count     *connCounter
	uncounted func(peercred.Peer) bool // nil: none
	s         *Server
	logged    time.Time // the last refusal logged; Accept's alone
}

// Accept returns the next connection within the caps; those past them
// are answered busy and closed here.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := peercred.Get(c)
		if err != nil {
			// Refused by the API's own check (withPeer finds no peer).
			return c, nil
		}
		if l.uncounted != nil && l.uncounted(p) {
			return &peerConn{Conn: c, peer: p}, nil
		}
		if !l.count.take(p.UID) {
			l.refuse(c, p)
			continue
		}
		return &peerConn{Conn: c, peer: p, count: l.count}, nil
	}
}

// refuse answers c busy, without reading its request, and closes it.
// The log says so at most once a second: a flood of connections is one
// line a second, not one each.
func (l *limitListener) refuse(c net.Conn, p peercred.Peer) {
	what := l.count.what(p.UID)
	if now := time.Now(); now.Sub(l.logged) >= time.Second {
		l.logged = now
		l.s.log.Warn("refused connections past the caps", "uid", p.UID, "pid", p.PID, "cap", what)
	}
	e := api.Errorf(api.ErrBusy, "", "uid %d has %s open; close some, or retry when they have ended", p.UID, what)
	body, _ := json.Marshal(&api.Result{Error: e})
	_ = c.SetWriteDeadline(time.Now().Add(connRefusalDeadline))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		StatusOf(e.Type), len(body), body)
	c.Close()
}

// what says which cap a connection of uid meets, for its refusal.
func (c *connCounter) what(uid uint32) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perUID > 0 && c.byUID[uid] >= c.perUID {
		return fmt.Sprintf("the most connections cellblockd takes from one uid (%d)", c.perUID)
	}
	return fmt.Sprintf("some of the most connections cellblockd takes from all users but root together (%d)", c.total)
}

// peerConn is an accepted connection with its peer's credentials, read
// once as it was accepted; closing it counts it closed, if it was counted.
type peerConn struct {
	net.Conn
	peer  peercred.Peer
	count *connCounter // nil: not counted
	once  sync.Once
}

func (c *peerConn) Close() error {
	if c.count != nil {
		c.once.Do(func() { c.count.give(c.peer.UID) })
	}
	return c.Conn.Close()
}

// Peer is the connection's caller.
func (c *peerConn) Peer() peercred.Peer { return c.peer }
