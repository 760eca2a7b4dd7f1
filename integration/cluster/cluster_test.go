// Package cluster is `make clustertest`: cellblock as deploy/kubernetes
// runs it, on one machine. Two nodes, each in a network namespace of its
// own, run the node image under podman as the DaemonSet runs it (the
// manifest's commands, arguments and security settings, translated);
// HAProxy runs the shipped router configuration in a third namespace; an
// MCP client (mcp-go's) drives 40 sessions through the router while one
// node is powered off.
//
// It needs root, podman, haproxy, debootstrap and iproute2
// (scripts/install-deps.sh cluster) and the binaries of `make build`; it
// skips without root.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

var repoRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}()

const (
	// sessions MCP sessions are opened through the router, calls calls
	// each; node a is powered off once every session has made killAfter.
	sessions  = 40
	calls     = 10
	killAfter = 5
	// nodesName is what the test's DNS answers with the nodes' addresses
	// (the headless Service's name in a cluster).
	nodesName = "nodes.cluster.test"
	// callTimeout bounds every call: a call that hangs fails the test.
	callTimeout = 90 * time.Second
	// sleepSeconds is how long the calls in flight when node a dies would
	// run: longer than callTimeout, so that only the router's cut can end
	// them in time.
	sleepSeconds = 120
)

// phase of the test, read when a request is sent: before node a dies, while
// the router has not yet found it down, after.
const (
	phaseBefore int32 = iota
	phaseDying
	phaseAfter
)

// sent is one HTTP request the client made.
type sent struct {
	session string
	phase   int32
}

// countingTransport sends the bearer token with every request and records
// each request's MCP session (the header it carried, or for an initialize
// the one the answer named) and the phase it was sent in.
type countingTransport struct {
	rt    http.RoundTripper
	token string
	phase *atomic.Int32

	mu   sync.Mutex
	sent []sent
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ph := c.phase.Load()
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+c.token)
	sid := r.Header.Get("Mcp-Session-Id")
	resp, err := c.rt.RoundTrip(r)
	if sid == "" && resp != nil {
		sid = resp.Header.Get("Mcp-Session-Id")
	}
	c.mu.Lock()
	c.sent = append(c.sent, sent{session: sid, phase: ph})
	c.mu.Unlock()
	return resp, err
}

func TestTwoNodesBehindTheRouter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, podman and privileged containers (run `sudo make clustertest`)")
	}
	for _, tool := range []string{"ip", "haproxy", "podman", "debootstrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/install-deps.sh cluster (make clustertest does)", tool)
		}
	}
	began := time.Now()
	image := buildImage(t)
	t.Logf("node image %s built in %v", image, time.Since(began).Round(time.Second))
	ds := daemonSet(t)

	// The network.
	rns := netnsName("r")
	addNetns(t, rns)
	nodes := []*node{{name: "a", addr: "10.27.1.2"}, {name: "b", addr: "10.27.2.2"}}
	var addrs []string
	for i, n := range nodes {
		n.netns = netnsName(n.name)
		addNetns(t, n.netns)
		link(t, rns, "rt-"+n.name, fmt.Sprintf("10.27.%d.1", i+1), n.netns, n.addr)
		n.dir = hostDir(t, "cb27-"+n.name+"-")
		n.daemon = fmt.Sprintf("cb27-%d-%s-cellblockd", os.Getpid(), n.name)
		n.mcp = fmt.Sprintf("cb27-%d-%s-cellblock-mcp", os.Getpid(), n.name)
		addrs = append(addrs, n.addr)
	}
	serveDNS(t, rns, nodesName, addrs)

	// The nodes and the router.
	token := rand.Text()
	for _, n := range nodes {
		startNode(t, ds, image, n, token)
	}
	t.Logf("nodes up %v after the image", time.Since(nodes[0].started).Round(time.Second))
	r := startRouter(t, rns, nodesName)
	for _, n := range nodes {
		r.waitStatus(t, n.addr, "UP", 2*time.Minute)
	}
	a, b := nodes[0], nodes[1]

	var phase atomic.Int32
	ct := &countingTransport{
		rt:    &http.Transport{DialContext: dialIn(rns), MaxIdleConnsPerHost: sessions},
		token: token,
		phase: &phase,
	}
	hc := &http.Client{Transport: ct}
	const url = "http://127.0.0.1:8080/mcp"

	// Open the sessions and make the first calls.
	type session struct {
		c    *mcpclient.Client
		id   string
		node *node
		done int // calls that returned the right count
	}
	ss := make([]*session, sessions)
	parallel(t, sessions, func(i int) error {
		tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(hc))
		if err != nil {
			return err
		}
		c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := c.Start(ctx); err != nil {
			return err
		}
		req := mcp.InitializeRequest{}
		req.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
		req.Params.ClientInfo = mcp.Implementation{Name: "clustertest", Version: "1"}
		if _, err := c.Initialize(ctx, req); err != nil {
			return fmt.Errorf("initialize: %w", err)
		}
		ss[i] = &session{c: c, id: c.GetSessionId()}
		for k := 1; k <= killAfter; k++ {
			if err := count(c, k); err != nil {
				return err
			}
			ss[i].done = k
		}
		return nil
	})
	t.Cleanup(func() {
		for _, s := range ss {
			if s != nil {
				s.c.Close()
			}
		}
	})

	// Which node holds which session: the router's table.
	table := r.table(t)
	byAddr := r.serverAddrs(t)
	perNode := map[*node][]*session{}
	for _, s := range ss {
		addr := byAddr[table[s.id]]
		i := slices.Index(addrs, addr)
		if i < 0 {
			t.Fatalf("session %s: the router's table has server %q (%q), not a node", s.id, table[s.id], addr)
		}
		s.node = nodes[i]
		perNode[s.node] = append(perNode[s.node], s)
	}
	t.Logf("sessions per node after %d calls each: a %d, b %d", killAfter, len(perNode[a]), len(perNode[b]))
	if len(perNode[a]) == 0 || len(perNode[b]) == 0 {
		t.Fatalf("the router did not spread the sessions: a %d, b %d", len(perNode[a]), len(perNode[b]))
	}

	// Node b's sessions go on to the end while node a dies.
	var bwg sync.WaitGroup
	berrs := make([]error, len(perNode[b]))
	for i, s := range perNode[b] {
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			for k := killAfter + 1; k <= calls; k++ {
				if err := count(s.c, k); err != nil {
					berrs[i] = fmt.Errorf("session %s on node b, call %d: %w", s.id, k, err)
					return
				}
				s.done = k
			}
		}()
	}

	// Half of node a's sessions have a call in flight when it dies.
	inflight, idle := perNode[a][:len(perNode[a])/2], perNode[a][len(perNode[a])/2:]
	type outcome struct {
		err   error
		after time.Duration // from the power-off to the error
	}
	results := make([]outcome, len(inflight))
	var killed atomic.Pointer[time.Time]
	var awg sync.WaitGroup
	for i, s := range inflight {
		awg.Add(1)
		go func() {
			defer awg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			_, err := runPython(ctx, s.c, fmt.Sprintf("import time\ntime.sleep(%d)", sleepSeconds))
			at := time.Now()
			if k := killed.Load(); k != nil {
				results[i] = outcome{err: err, after: at.Sub(*k)}
			} else {
				results[i] = outcome{err: fmt.Errorf("returned before the node died: %v", err)}
			}
		}()
	}
	waitInFlight(t, a, len(inflight))

	phase.Store(phaseDying)
	now := time.Now()
	killed.Store(&now)
	powerOff(t, a)
	detect := r.waitStatus(t, a.addr, "DOWN", 30*time.Second)
	phase.Store(phaseAfter)
	t.Logf("node a powered off; the router found it down after %v", detect.Round(time.Millisecond))

	// A call in flight is cut when the router finds its node down: its
	// client gets the lost session (404) or, when HAProxy closes the
	// connection before it could answer (shutdown-sessions closes both
	// sides), the connection's end. Either way at once, not at a timeout;
	// and the session's next call is told it is lost.
	awg.Wait()
	lost, closed := 0, 0
	for i, res := range results {
		switch {
		case errors.Is(res.err, transport.ErrSessionTerminated):
			lost++
		case res.err != nil && strings.Contains(res.err.Error(), "EOF") && !errors.Is(res.err, context.DeadlineExceeded):
			closed++
		default:
			t.Errorf("node a's session %s, call in flight: %v, want the session lost (404) or the connection cut\nthe router's log:\n%s", inflight[i].id, res.err, r.log)
		}
	}
	t.Logf("node a's %d calls in flight were cut %v after the power-off: %d answered the lost session, %d by the connection's end",
		len(inflight), spread(results, func(o outcome) time.Duration { return o.after }), lost, closed)
	for _, s := range inflight {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := runPython(ctx, s.c, "counter")
		cancel()
		if !errors.Is(err, transport.ErrSessionTerminated) {
			t.Errorf("node a's session %s, the call after the one cut: %v, want the session lost (404)", s.id, err)
		}
	}

	// The idle ones find out at their next call.
	idleAfter := make([]time.Duration, len(idle))
	for i, s := range idle {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := runPython(ctx, s.c, "counter")
		cancel()
		idleAfter[i] = time.Since(start)
		if !errors.Is(err, transport.ErrSessionTerminated) {
			t.Errorf("node a's session %s, next call: %v, want the session lost (404)", s.id, err)
		}
	}
	t.Logf("node a's %d idle sessions: their next call failed with the lost session in %v", len(idle), spread(idleAfter, func(d time.Duration) time.Duration { return d }))

	// What a client that reads the answer sees.
	st, body := rawPost(t, hc, url, idle[0].id)
	if st != http.StatusNotFound || !strings.Contains(body, "session lost") || !strings.Contains(body, `"code":-32001`) {
		t.Errorf("a request of node a's session after its end: %d %q, want 404 with the lost-session error", st, body)
	}

	bwg.Wait()
	for _, err := range berrs {
		if err != nil {
			t.Error(err)
		}
	}
	finished := 0
	for _, s := range perNode[b] {
		if s.done == calls {
			finished++
		}
	}
	t.Logf("node b's sessions: %d of %d made all %d calls, each keeping its variables", finished, len(perNode[b]), calls)
	if finished != len(perNode[b]) {
		t.Errorf("only %d of node b's %d sessions finished", finished, len(perNode[b]))
	}

	// Node b drains, as in an upgrade: the kubelet's SIGTERM to its
	// cellblock-mcp. The router must stop giving it new sessions but keep
	// sending it its own; they go on with their variables; once their
	// clients have closed them it exits by itself, long before its drain
	// time.
	podman(t, "kill", "--signal", "TERM", b.mcp)
	drainSeen := r.waitStatus(t, b.addr, "NOLB", 30*time.Second)
	t.Logf("node b draining: the router stopped giving it new sessions after %v", drainSeen.Round(time.Millisecond))
	uncounted := &http.Client{Transport: &countingTransport{rt: ct.rt, token: token, phase: new(atomic.Int32)}}
	if st, body := rawInitialize(t, uncounted, url); st != http.StatusServiceUnavailable {
		t.Errorf("a new session while node a is down and node b drains: %d %q, want 503 (no node takes it)", st, body)
	}
	parallel(t, len(perNode[b]), func(i int) error {
		if err := count(perNode[b][i].c, calls+1); err != nil {
			return fmt.Errorf("session %s on draining node b: %w", perNode[b][i].id, err)
		}
		return nil
	})
	closing := time.Now()
	for _, s := range perNode[b] {
		if err := s.c.Close(); err != nil {
			t.Errorf("close session %s: %v", s.id, err)
		}
	}
	waitExit(t, b.mcp, time.Minute)
	t.Logf("node b's %d sessions made one more call each while it drained; its cellblock-mcp exited %v after the last was closed",
		len(perNode[b]), time.Since(closing).Round(time.Millisecond))

	// The router's own figures against what the client sent.
	want := map[string]int{}
	onA := map[string]bool{}
	for _, s := range perNode[a] {
		onA[s.id] = true
	}
	ct.mu.Lock()
	for _, q := range ct.sent {
		switch {
		case q.session == "":
			t.Errorf("a request the test cannot place: %+v", q)
		case onA[q.session] && q.phase == phaseBefore:
			want[a.addr]++
		case onA[q.session] && q.phase == phaseDying:
			t.Errorf("a request of node a's session sent before the router found it down: %+v", q)
		default:
			// Node b's, and node a's sessions' once a was down: the router
			// sends them to b, which answers the session lost.
			want[b.addr]++
		}
	}
	total := len(ct.sent)
	ct.mu.Unlock()
	// stot is HAProxy's count of streams given to the server, one per HTTP
	// request; req_tot counts only those it got an answer to, eresp those
	// cut (node a's calls in flight).
	stats := r.servers(t)
	for _, n := range nodes {
		s := stats[n.addr]
		t.Logf("router, node %s (%s): %d requests (the client: %d); answered 2xx %d, 4xx %d, 5xx %d; cut %d; new sessions %d; status %s",
			n.name, s["svname"], s.int("stot"), want[n.addr], s.int("hrsp_2xx"), s.int("hrsp_4xx"), s.int("hrsp_5xx"),
			s.int("eresp"), s.int("lbtot"), s["status"])
		if s.int("stot") != want[n.addr] {
			t.Errorf("node %s: the router counts %d requests, the client sent it %d", n.name, s.int("stot"), want[n.addr])
		}
	}
	if got, want := stats[b.addr].int("hrsp_4xx"), len(idle)+closed+1; got != want {
		t.Errorf("node b answered %d requests with 4xx, want %d: node a's idle sessions' next calls, those of the sessions whose cut call saw the connection's end, and the raw one", got, want)
	}
	t.Logf("%d requests in all", total)

	// Then its cellblockd, as the kubelet stops a native sidecar once the
	// pod's main container has ended.
	stopGracefully(t, b.daemon, 60*time.Second)
	t.Logf("clustertest took %v", time.Since(began).Round(time.Second))
}

// count makes session call k, which must see the k-1 calls before it.
func count(c *mcpclient.Client, k int) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := runPython(ctx, c, "counter = globals().get('counter', 0) + 1\nprint(counter)")
	if err != nil {
		return err
	}
	// The result object, as structured content.
	var out struct {
		Stdout string `json:"stdout"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	if res.IsError || strings.TrimSpace(out.Stdout) != fmt.Sprint(k) {
		return fmt.Errorf("call %d: isError %v, stdout %q, want %d: the session did not keep its variables", k, res.IsError, out.Stdout, k)
	}
	return nil
}

// runPython calls run_python in the connection's session "s".
func runPython(ctx context.Context, c *mcpclient.Client, code string) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = map[string]any{"code": code, "session": "s"}
	return c.CallTool(ctx, req)
}

// parallel runs fn(0..n-1) at most 8 at a time and fails the test with
// the first error.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// waitInFlight waits until node n's daemon has want runs running or
// queued.
func waitInFlight(t *testing.T, n *node, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, _ := exec.Command("podman", "exec", n.daemon, "/usr/local/bin/cellblock", "info", "--json",
			"--socket", "/run/cellblock/cellblockd.sock").Output()
		var running, queued int
		if i := strings.Index(string(out), `"running":`); i >= 0 {
			fmt.Sscanf(string(out[i:]), `"running":%d,"queued":%d`, &running, &queued)
		}
		if running+queued >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: %d runs in flight, want %d", n.name, running+queued, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rawPost sends a tools/list of session id through the router.
func rawPost(t *testing.T, hc *http.Client, url, id string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rawInitialize sends an initialize through the router and returns the
// status and body.
func rawInitialize(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"clustertest","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// spread is "min to max" of the durations of xs.
func spread[T any](xs []T, d func(T) time.Duration) string {
	if len(xs) == 0 {
		return "(none)"
	}
	lo, hi := d(xs[0]), d(xs[0])
	for _, x := range xs[1:] {
		lo, hi = min(lo, d(x)), max(hi, d(x))
	}
	return fmt.Sprintf("%v to %v", lo.Round(time.Millisecond), hi.Round(time.Millisecond))
}

// hostDir is a directory removed when the test ends.
func hostDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildImage builds the node image with deploy/kubernetes/image/build-local.sh
// from the binaries in bin/.
func buildImage(t *testing.T) string {
	t.Helper()
	const image = "localhost/cellblock-node:clustertest"
	cmd := exec.Command(filepath.Join(repoRoot, "deploy/kubernetes/image/build-local.sh"), image)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the node image: %v\n%s", err, out)
	}
	return image
}
