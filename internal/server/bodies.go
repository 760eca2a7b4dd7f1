package server

import (
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// Request bodies: a run or session request may carry files, up to tens of
// MiB of JSON, which the daemon reads whole, before it admits the request,
// and holds, decoded, while the request waits and runs. Every request
// that has a body (a run, a session, a tool's answer, a file put into a
// session, anything) is therefore bounded before its handler reads a
// byte of it:
//
//   - in time: its body must have arrived within fileAnswerBase plus a
//     second per fileAnswerRate bytes of its Content-Length (of the
//     largest body when it does not say), or reading it fails and the
//     request is refused; a client that sends slowly holds nothing
//     longer;
//   - in bytes: the bodies of one uid's requests in progress may hold at
//     most bodyBufferShare times the largest body a request may carry,
//     and those of all uids but root bodyBufferTotal times: past that a
//     request is refused busy (429) before its body is read. A body
//     counts from the request's start to its end, since the decoded
//     request lives that long.
//
// Root's bodies count against root's own share alone, not the total: the
// operator's requests are never refused for others' bodies.
const (
	bodyBufferShare = 2
	bodyBufferTotal = 4
)

// byteBudget counts the bytes request bodies hold, in all and by uid. The
// zero value is ready.
type byteBudget struct {
	mu    sync.Mutex
	total int64
	byUID map[uint32]int64
}

// take reserves n bytes for uid within its share and, for any uid but
// root, within the total of all but root's; false when they would go
// past.
func (b *byteBudget) take(uid uint32, n, share, total int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byUID[uid]+n > share || uid != 0 && b.total+n > total {
		return false
	}
	if b.byUID == nil {
		b.byUID = map[uint32]int64{}
	}
	if uid != 0 {
		b.total += n
	}
	b.byUID[uid] += n
	return true
}

// give returns what take reserved.
func (b *byteBudget) give(uid uint32, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if uid != 0 {
		b.total -= n
	}
	if b.byUID[uid] -= n; b.byUID[uid] == 0 {
		delete(b.byUID, uid)
	}
}

// bodyTime is how long a body of n bytes may take to arrive.
func bodyTime(n int64) time.Duration {
	return fileAnswerBase + time.Duration(float64(n)/float64(fileAnswerRate)*float64(time.Second))
}

// bodyTooSlow is the error of a body that did not arrive in time.
func bodyTooSlow() *api.Error {
	return api.Errorf(api.ErrBadRequest, "", "the request body did not arrive in time (%v, and a second per %d KiB)", fileAnswerBase, fileAnswerRate>>10)
}

// boundBody bounds r's body as the comment above says, before the
// handler runs, and returns the request the handler gets. When it
// refuses the request it has answered it and reports false; else release
// ends the body's count once the request is over.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) (_ *http.Request, release func(), ok bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return r, func() {}, true
	}
	largest := s.requestBytes()
	n := r.ContentLength // -1: not said (chunked)
	if n > largest {
		writeError(w, api.Errorf(api.ErrTooLarge, "", "request body is %d bytes, larger than %d bytes, the most any request may carry", n, largest))
		return nil, nil, false
	}
	if n < 0 {
		n = largest
	}
	peer, _ := PeerFrom(r.Context())
	if !s.bodies.take(peer.UID, n, bodyBufferShare*largest, bodyBufferTotal*largest) {
		s.log.Warn("refused a request: the bodies of requests in progress hold all cellblockd gives them", "uid", peer.UID, "bytes", n)
		writeError(w, api.Errorf(api.ErrBusy, "", "the bodies of requests in progress (uid %d's, or everyone's) hold all the memory cellblockd gives them; retry when one has ended", peer.UID))
		return nil, nil, false
	}
	release = func() { s.bodies.give(peer.UID, n) }
	rc := http.NewResponseController(w)
	// Without a connection's deadlines (a test's recorder) there is
	// nothing to bound.
	if rc.SetReadDeadline(time.Now().Add(bodyTime(n))) == nil {
		// On a copy: net/http looks at the request it made, body and
		// all, to decide what to do with a body the handler left unread
		// (read on, within the deadline, or close the connection).
		r = r.WithContext(r.Context())
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, left: r.ContentLength}
	}
	return r, release, true
}

// deadlineBody lifts the connection's read deadline once the body has
// been read whole (its end, or its Content-Length): the deadline would
// otherwise end the request's context during the run, which reads on to
// see whether its caller went away. A body that failed (out of time, over
// its limit) keeps it: net/http then gives up on the rest of the body at
// once, instead of reading on for the connection's next request.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	left   int64 // bytes still to come; -1: not said
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if !b.lifted && (err == io.EOF || err == nil && b.left == 0) {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
