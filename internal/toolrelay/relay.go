// Package toolrelay relays the tool calls of a run's code (see
// nsjail/runner/PROTOCOL.md, "Tools") to the run's caller, and the
// caller's answers back: a Relay per run that declares tools, and a
// Registry in which the answers (POST api.ToolCallPath) find their call.
//
// Everything a jail sends is untrusted: before a call reaches the caller
// the relay checks that its tool was declared, that its arguments are
// within the run's cap and pass the tool's input schema, and that the run
// has calls left; otherwise the code gets a ToolError and the caller never
// hears of it. Each call has a random id of its own, answered once, by the
// uid that started the run (or root): ids the jail chose never leave the
// run. The relay times every call, gives up on it after the run's
// per-call timeout, and keeps a record of each for the result, the audit
// log and the metrics.
//
// It runs no tool, holds no kernel object and does not listen: the server
// creates relays and routes answers; the jail moves the frames.
package toolrelay

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
	"github.com/cellblock/cellblock/internal/toolschema"
	"github.com/cellblock/cellblock/nsjail/runner"
	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

// Defaults and bounds of the caps on a run's tool calls (cellblockd's
// --default-tool-* and --max-tool-* flags).
const (
	DefaultCalls         = 256
	DefaultArgumentBytes = 1 << 20
	DefaultResultBytes   = 1 << 20
	DefaultTimeout       = 30 * time.Second

	MaxCalls         = 100000
	MaxArgumentBytes = 8 << 20
	MaxResultBytes   = 8 << 20
	MaxTimeout       = time.Hour

	// unsentBytes bounds the arguments a run's calls hold in the daemon
	// while they wait to be written to its caller (one that does not
	// read its stream holds them): past it, calls are refused. At least
	// one call of the largest arguments allowed always fits.
	unsentBytes = 32 << 20
	// contentBytes bounds the arguments and answers a record keeps with
	// KeepContent; larger ones keep only their size and hash. A run's
	// records keep at most contentBudget of them in all, and none of a
	// call the daemon refused before its caller heard of it.
	contentBytes  = 64 << 10
	contentBudget = 4 << 20
)

// Config is the daemon's side of tool calls.
type Config struct {
	// Defaults apply to a run that asks for no tool_limits; Maxima bound
	// what one may ask for.
	Defaults, Maxima api.ToolLimits
	// KeepContent keeps each call's arguments and answer in its record
	// (the audit log's --audit-tool-content); else only sizes and hashes.
	KeepContent bool
}

// DefaultConfig is the daemon's default Config.
func DefaultConfig() Config {
	return Config{
		Defaults: api.ToolLimits{Calls: DefaultCalls, ArgumentBytes: DefaultArgumentBytes, ResultBytes: DefaultResultBytes,
			TimeoutMs: DefaultTimeout.Milliseconds()},
		Maxima: api.ToolLimits{Calls: 10000, ArgumentBytes: MaxArgumentBytes, ResultBytes: MaxResultBytes,
			TimeoutMs: (10 * time.Minute).Milliseconds()},
	}
}

// Validate checks that every default is positive and within its maximum,
// and every maximum within the bounds above.
func (c Config) Validate() error {
	d, m := c.Defaults, c.Maxima
	for _, f := range []struct {
		name        string
		def, max, n int64
	}{
		{"tool-calls", d.Calls, m.Calls, MaxCalls},
		{"tool-argument-bytes", d.ArgumentBytes, m.ArgumentBytes, MaxArgumentBytes},
		{"tool-result-bytes", d.ResultBytes, m.ResultBytes, MaxResultBytes},
		{"tool-timeout", d.TimeoutMs, m.TimeoutMs, MaxTimeout.Milliseconds()},
	} {
		if f.def <= 0 || f.def > f.max || f.max > f.n {
			return fmt.Errorf("--default-%s %d and --max-%s %d: want 0 < default <= maximum <= %d", f.name, f.def, f.name, f.max, f.n)
		}
	}
	return nil
}

// Tools are a run's declared tools, checked and compiled, with the caps
// that apply to its calls. Make them with Prepare.
type Tools struct {
	declared []wire.Tool
	schemas  map[string]*toolschema.Schema // nil for a tool that takes any object
	caps     api.ToolLimits
	keep     bool
}

// Prepare checks req's tools and tool_limits against cfg: nil when it
// declares none; an *api.Error naming the field for a cap over its
// maximum or an input schema that does not compile
// (tools[i].input_schema). req must have passed Validate.
func Prepare(req *api.RunRequest, cfg Config) (*Tools, *api.Error) {
	if len(req.Tools) == 0 {
		return nil, nil
	}
	caps, aerr := req.ToolLimits.Resolve(cfg.Defaults, cfg.Maxima)
	if aerr != nil {
		return nil, aerr
	}
	t := &Tools{caps: caps, keep: cfg.KeepContent, schemas: map[string]*toolschema.Schema{}}
	for i, tool := range req.Tools {
		t.declared = append(t.declared, tool)
		if len(tool.InputSchema) == 0 || string(tool.InputSchema) == "null" {
			t.schemas[tool.Name] = nil
			continue
		}
		field := fmt.Sprintf("tools[%d].input_schema", i)
		s, err := toolschema.Compile(tool.InputSchema)
		if errors.Is(err, toolschema.ErrRefused) {
			return nil, api.Errorf(api.ErrBadRequest, field, "%v", err)
		}
		if err != nil {
			return nil, api.Errorf(api.ErrBadRequest, field, "is not a JSON Schema the daemon can check arguments with: %v", err)
		}
		t.schemas[tool.Name] = s
	}
	return t, nil
}

// Caps are the caps that apply to the run's calls.
func (t *Tools) Caps() api.ToolLimits { return t.caps }

// Relay carries out one run's tool calls. It implements nsjail.ToolRelay
// (which this package does not import, to keep the server light);
// the server answers its calls through the Registry.
type Relay struct {
	tools *Tools
	runID string
	owner uint32
	emit  func(context.Context, api.ToolCall) error
	log   *slog.Logger
	reg   *Registry

	ctx    context.Context // ends when the relay stops
	cancel context.CancelFunc
	wg     sync.WaitGroup // the calls being served

	mu        sync.Mutex
	reply     func([]byte)
	started   bool
	stopped   bool
	count     int64 // calls taken, refused ones included
	overCap   int64
	pending   map[string]*call // by the caller's id
	jailIDs   map[string]bool  // the runner's ids of the calls pending
	records   []record.ToolCall
	active    int // calls waiting for the caller
	busySince time.Time
	busy      time.Duration
	unsent    int64 // the arguments of calls not yet written to the caller
	kept      int   // the content the records keep (KeepContent)
}

// call is one call that passed the checks Call makes at once: its
// arguments are checked against its schema (if any), then it goes to
// the caller.
type call struct {
	id, jailID, name string
	arguments        json.RawMessage // until written to the caller
	schema           *toolschema.Schema
	index            int // in records
	start            time.Time
	answer           chan answer // gets the caller's answer, once
	finished         bool        // answered or given up: under the relay's mu
}

// answer is how a call ended.
type answer struct {
	outcome string // api.Tool*
	result  json.RawMessage
	errText string // the error the code gets
	reason  string // the daemon's reason, for the record
	size    int    // the answer's size as the caller sent it
	sum     string
	frame   []byte // the tool_result frame of a result (deliver makes it)
}

// maxReplyFrame is the largest tool_result frame the code can get (the
// runner's bound on the daemon's frames and their header); smaller in
// tests.
var maxReplyFrame = runner.MaxDaemonFrame + 4

// Declared implements nsjail.ToolRelay.
func (r *Relay) Declared() ([]wire.Tool, runner.ToolLimits) {
	return r.tools.declared, runner.ToolLimits{ArgumentBytes: r.tools.caps.ArgumentBytes, TimeoutMs: r.tools.caps.TimeoutMs}
}

// Start implements nsjail.ToolRelay.
func (r *Relay) Start(reply func([]byte)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.reply, r.started = reply, true
	}
}

// Call implements nsjail.ToolRelay: it checks the call, refuses it at once
// (the code gets a ToolError) or hands it to serve, without waiting: the
// check against the tool's schema is serve's too.
func (r *Relay) Call(payload []byte) {
	now := time.Now()
	c, perr := runner.ParseToolCall(payload)

	r.mu.Lock()
	if r.stopped || !r.started {
		r.mu.Unlock()
		return
	}
	if r.count >= r.tools.caps.Calls {
		r.overCap++
		reply := r.reply
		r.mu.Unlock()
		if c.ID != "" {
			r.refuse(reply, c.ID, fmt.Sprintf("this run has made %d tool calls, the most it may (tool_limits.calls)", r.tools.caps.Calls))
		}
		return
	}
	r.count++
	index := len(r.records)
	sum := sha256.Sum256(c.Arguments)
	rec := record.ToolCall{Name: boundName(c.Name), Started: now, Outcome: api.ToolRefused,
		ArgumentBytes: len(c.Arguments), ArgumentSHA256: hex.EncodeToString(sum[:])}
	_, rec.Declared = r.tools.schemas[c.Name]
	r.records = append(r.records, rec)
	inUse := r.jailIDs[c.ID]
	r.mu.Unlock()

	// The checks that cost time run without the lock.
	why := ""
	schema := r.tools.schemas[c.Name]
	switch {
	case c.ID == "":
		why = fmt.Sprintf("malformed tool_call frame (%v)", perr)
	case perr != nil:
		why = fmt.Sprintf("malformed tool call: %v", perr)
	case !rec.Declared:
		why = fmt.Sprintf("no tool %q in this run: its caller declared %s", c.Name, r.names())
	case int64(len(c.Arguments)) > r.tools.caps.ArgumentBytes:
		why = fmt.Sprintf("the arguments of %s are %d bytes; a call may pass at most %d (tool_limits.argument_bytes)", c.Name, len(c.Arguments), r.tools.caps.ArgumentBytes)
	case inUse:
		why = fmt.Sprintf("call id %q is already waiting for an answer", c.ID)
	case r.unsentOver(int64(len(c.Arguments))):
		why = fmt.Sprintf("the caller has not yet taken %d bytes of this run's earlier calls: too many waiting to be sent", unsentBytes)
	default:
		// What the jail sent is measured before the schema library
		// sees it (which serve does, off this goroutine).
		if err := toolschema.Admit(schema, c.Arguments); err != nil {
			why = fmt.Sprintf("the arguments of %s: %v", c.Name, err)
		}
	}

	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	reply := r.reply
	if why != "" || r.jailIDs[c.ID] {
		if why == "" {
			why = fmt.Sprintf("call id %q is already waiting for an answer", c.ID)
		}
		r.records[index].Reason = why
		r.records[index].Duration = time.Since(now)
		r.mu.Unlock()
		if c.ID != "" {
			r.refuse(reply, c.ID, why)
		}
		return
	}
	cl := &call{id: newID(), jailID: c.ID, name: c.Name, arguments: c.Arguments, schema: schema, index: index, start: now, answer: make(chan answer, 1)}
	r.unsent += int64(len(cl.arguments))
	r.jailIDs[c.ID] = true
	if r.active == 0 {
		r.busySince = now
	}
	r.active++
	r.wg.Add(1)
	r.mu.Unlock()
	go r.serve(cl)
}

// refuse answers call id with an error the code raises as ToolError.
func (r *Relay) refuse(reply func([]byte), id, why string) {
	frame, err := runner.EncodeToolResult(id, false, nil, why)
	if err != nil {
		r.log.Warn("encode a tool result", "run", r.runID, "err", err)
		return
	}
	reply(frame)
}

// serve checks cl's arguments against its schema, sends it to the
// caller and waits for its answer, its timeout or the end of the run,
// then answers the code.
func (r *Relay) serve(cl *call) {
	defer r.wg.Done()
	timeout := time.Duration(r.tools.caps.TimeoutMs) * time.Millisecond
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	a, ok := r.check(cl, timer.C)
	if ok {
		a = r.send(cl, timer.C, timeout)
	}
	r.mu.Lock()
	if cl.arguments != nil { // never written
		r.unsent -= int64(len(cl.arguments))
		cl.arguments = nil
	}
	delete(r.pending, cl.id)
	delete(r.jailIDs, cl.jailID)
	r.active--
	if r.active == 0 {
		r.busy += time.Since(r.busySince)
	}
	rec := &r.records[cl.index]
	rec.Outcome, rec.Reason, rec.Duration = a.outcome, a.reason, time.Since(cl.start)
	rec.ResultBytes, rec.ResultSHA256 = a.size, a.sum
	if a.outcome == api.ToolErrored {
		rec.Error = a.errText
	}
	if r.keepContent(len(a.result)) {
		rec.Result = a.result
	}
	stopped, reply := r.stopped, r.reply
	r.mu.Unlock()
	if stopped || a.outcome == api.ToolCanceled && r.ctx.Err() != nil {
		return
	}
	frame, err := a.frame, error(nil)
	if frame == nil {
		frame, err = runner.EncodeToolResult(cl.jailID, false, nil, a.errText)
	}
	if err != nil {
		r.log.Warn("encode a tool result", "run", r.runID, "err", err)
		return
	}
	reply(frame)
}

// checkers bounds the checks of arguments that run at once in the
// daemon.
var checkers = make(chan struct{}, min(max(runtime.GOMAXPROCS(0), 2), 8))

// validateArgs checks arguments against a schema; tests stall it.
var validateArgs = (*toolschema.Schema).Validate

// check checks cl's arguments against its tool's schema, on one of the
// daemon's checkers: ok when they pass, else how the call ends. Neither
// the call's timeout nor the run's end waits for a check under way,
// which goes on alone (Admit bounded its work) and frees its checker.
func (r *Relay) check(cl *call, timeout <-chan time.Time) (a answer, ok bool) {
	if cl.schema == nil {
		return answer{}, true
	}
	const slow = "checking its arguments against the tool's input schema took longer than the call may take (tool_limits.timeout_ms)"
	canceled := answer{outcome: api.ToolCanceled, reason: "the run ended before the arguments were checked"}
	select {
	case checkers <- struct{}{}:
	case <-timeout:
		return answer{outcome: api.ToolRefused, errText: "tool " + cl.name + ": " + slow, reason: slow}, false
	case <-r.ctx.Done():
		return canceled, false
	}
	verdict := make(chan error, 1)
	go func(schema *toolschema.Schema, arguments []byte) {
		defer func() { <-checkers }()
		verdict <- validateArgs(schema, arguments)
	}(cl.schema, cl.arguments)
	select {
	case err := <-verdict:
		if err != nil {
			why := fmt.Sprintf("the arguments of %s do not match its input schema: %v", cl.name, err)
			return answer{outcome: api.ToolRefused, errText: why, reason: why}, false
		}
		return answer{}, true
	case <-timeout:
		return answer{outcome: api.ToolRefused, errText: "tool " + cl.name + ": " + slow, reason: slow}, false
	case <-r.ctx.Done():
		return canceled, false
	}
}

// send sends cl to the caller and waits for its answer, its timeout or
// the end of the run. The write to the caller is not waited for once the
// call ends otherwise: the stream bounds it, and the relay's end does
// not wait for a caller that does not read.
func (r *Relay) send(cl *call, timeout <-chan time.Time, limit time.Duration) answer {
	r.mu.Lock()
	r.records[cl.index].ID = cl.id
	if r.keepContent(len(cl.arguments)) {
		r.records[cl.index].Arguments = cl.arguments
	}
	r.pending[cl.id] = cl
	arguments := cl.arguments
	cl.arguments = nil // the writer's from here
	r.mu.Unlock()
	sent := make(chan error, 1)
	go func() {
		err := r.emit(r.ctx, api.ToolCall{ID: cl.id, Name: cl.name, Arguments: arguments, TimeoutMs: r.tools.caps.TimeoutMs})
		r.mu.Lock()
		r.unsent -= int64(len(arguments)) // written, or never to be
		r.mu.Unlock()
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			return r.end(cl, answer{outcome: api.ToolCanceled, errText: "the run's caller went away", reason: "the call could not be sent to the caller: " + err.Error()})
		}
	case <-timeout:
		why := fmt.Sprintf("the run's caller did not take the call within %v (tool_limits.timeout_ms): it does not read its stream", limit)
		return r.end(cl, answer{outcome: api.ToolTimeout, errText: "tool " + cl.name + ": " + why, reason: why})
	case <-r.ctx.Done():
		return r.end(cl, answer{outcome: api.ToolCanceled, reason: "the run ended before the call was sent"})
	}
	select {
	case a := <-cl.answer:
		return a
	case <-timeout:
		if testHookTimedOut != nil {
			testHookTimedOut(cl.id)
		}
		why := fmt.Sprintf("no answer from the run's caller within %v (tool_limits.timeout_ms)", limit)
		return r.end(cl, answer{outcome: api.ToolTimeout, errText: "tool " + cl.name + ": " + why, reason: why})
	case <-r.ctx.Done():
		return r.end(cl, answer{outcome: api.ToolCanceled, reason: "the run ended before the answer"})
	}
}

// testHookTimedOut, when set, is called when a call's time is up, before
// the call ends.
var testHookTimedOut func(id string)

// end ends cl with a, unless the caller's answer came first: then with
// the answer, which deliver has put in cl.answer. Either way no answer
// is taken after it.
func (r *Relay) end(cl *call, a answer) answer {
	r.mu.Lock()
	answered := cl.finished
	cl.finished = true
	delete(r.pending, cl.id)
	r.mu.Unlock()
	if answered {
		return <-cl.answer
	}
	return a
}

// Stop implements nsjail.ToolRelay: calls still waiting end as canceled,
// unanswered, and no reply is sent once it returns.
func (r *Relay) Stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// Close stops the relay and takes it out of the registry: the server's
// end of the run, whether or not the run started.
func (r *Relay) Close() {
	r.Stop()
	r.reg.remove(r.runID)
}

// Report is what the result and the record say of the run's calls, once
// the relay is stopped: each call in order (api's short form and the
// record), the calls past the cap, and the time the code waited for
// answers.
func (r *Relay) Report() (calls []api.ToolCallReport, records []record.ToolCall, overCap int64, busy time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	records = append([]record.ToolCall(nil), r.records...)
	for _, rec := range records {
		rep := api.ToolCallReport{Name: rec.Name, DurationMs: rec.Duration.Milliseconds(), OK: rec.Outcome == api.ToolOK, Outcome: rec.Outcome}
		switch rec.Outcome {
		case api.ToolOK:
		case api.ToolErrored:
			rep.Error = rec.Error
		default:
			rep.Error = rec.Reason
		}
		calls = append(calls, rep)
	}
	busy = r.busy
	if r.active > 0 {
		busy += time.Since(r.busySince)
	}
	return calls, records, r.overCap, busy
}

// keepContent reports whether a record keeps n bytes of content (a
// call's arguments or answer), and counts them. r.mu is held.
func (r *Relay) keepContent(n int) bool {
	if !r.tools.keep || n == 0 || n > contentBytes || r.kept+n > contentBudget {
		return false
	}
	r.kept += n
	return true
}

// unsentOver reports whether n more bytes of arguments would take the
// run's calls waiting to be sent past their bound.
func (r *Relay) unsentOver(n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unsent > 0 && r.unsent+n > max(unsentBytes, r.tools.caps.ArgumentBytes)
}

// names lists the declared tools for a message.
func (r *Relay) names() string {
	var b []byte
	for i, t := range r.tools.declared {
		if i == 20 {
			b = fmt.Appendf(b, " and %d more", len(r.tools.declared)-20)
			break
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, t.Name...)
	}
	return string(b)
}

// deliver gives the caller's answer to call id. tooLarge reports an answer
// over the cap (then a is not used, and the call fails in the code). It
// returns an *api.Error for the caller: not found when no such call waits.
func (r *Relay) deliver(p peercred.Peer, id string, a *api.ToolAnswer, size int, tooLarge bool) *api.Error {
	r.mu.Lock()
	cl := r.pending[id]
	ok := cl != nil && !cl.finished && r.owns(p)
	r.mu.Unlock()
	if !ok {
		return notFound(r.runID, id)
	}
	var ans answer
	var aerr *api.Error
	limit := r.tools.caps.ResultBytes
	switch {
	case tooLarge:
		why := fmt.Sprintf("the answer of %s was over the cap of %d bytes (tool_limits.result_bytes)", cl.name, limit)
		ans = answer{outcome: api.ToolTooLarge, errText: why, reason: why, size: size}
		aerr = api.Errorf(api.ErrTooLarge, "result", "is over the run's cap of %d bytes (tool_limits.result_bytes); the call failed in the code", limit)
	case a.Error != nil:
		msg := *a.Error
		if msg == "" {
			msg = "tool " + cl.name + " failed"
		}
		sum := sha256.Sum256([]byte(*a.Error))
		ans = answer{outcome: api.ToolErrored, errText: cut(msg, api.MaxToolError), size: len(*a.Error), sum: hex.EncodeToString(sum[:])}
	default:
		sum := sha256.Sum256(a.Result)
		ans = answer{outcome: api.ToolOK, result: a.Result, size: len(a.Result), sum: hex.EncodeToString(sum[:])}
		if int64(len(a.Result)) > limit {
			why := fmt.Sprintf("the answer of %s was %d bytes, over the cap of %d (tool_limits.result_bytes)", cl.name, len(a.Result), limit)
			ans = answer{outcome: api.ToolTooLarge, errText: why, reason: why, size: len(a.Result), sum: ans.sum}
			aerr = api.Errorf(api.ErrTooLarge, "result", "is %d bytes, over the run's cap of %d (tool_limits.result_bytes); the call failed in the code", len(a.Result), limit)
			break
		}
		// The frame that carries it to the code, made here so that the
		// caller hears if it cannot be.
		frame, err := runner.EncodeToolResult(cl.jailID, true, a.Result, "")
		if err == nil && len(frame) > maxReplyFrame {
			err = runner.ErrFrameTooLarge
		}
		if err != nil {
			why := fmt.Sprintf("the answer of %s could not be passed to the code: %v", cl.name, err)
			ans = answer{outcome: api.ToolTooLarge, errText: why, reason: why, size: len(a.Result), sum: ans.sum}
			aerr = api.Errorf(api.ErrTooLarge, "result", "could not be passed to the code (%v); the call failed in the code", err)
			break
		}
		ans.frame = frame
	}
	// Answered once, and the answer counts only if it came before the
	// call ended (see end): then the call ends with it.
	r.mu.Lock()
	defer r.mu.Unlock()
	if cl.finished {
		return notFound(r.runID, id)
	}
	cl.finished = true
	delete(r.pending, id)
	cl.answer <- ans // buffered, and sent once
	return aerr
}

// owns reports whether p may answer the relay's calls.
func (r *Relay) owns(p peercred.Peer) bool { return p.UID == 0 || p.UID == r.owner }

// resultLimit is the most an answer's result may be.
func (r *Relay) resultLimit() int64 { return r.tools.caps.ResultBytes }

// notFound is the one error for an answer to a call that does not wait:
// unknown, answered already, timed out, or another uid's.
func notFound(run, id string) *api.Error {
	return api.Errorf(api.ErrNotFound, "call", "no tool call %.80q waits for an answer in run %.80q", id, run)
}

// newID is a call's id: 128 random bits.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// boundName is a name the jail sent, for records and messages: printable
// ASCII, cut short ("?" when it has none).
func boundName(s string) string {
	if s == "" {
		return "?"
	}
	return cut(s, wire.MaxToolName)
}

// cut is s cut to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
