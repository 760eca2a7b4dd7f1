package cli

import (
	"context"
	"encoding/json"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// newSession makes a session in d with cellblock session new and returns
// its id.
func newSession(t *testing.T, d *fakeDaemon, flags ...string) string {
	t.Helper()
	got := runCLI(context.Background(), "", nil, append([]string{"session", "new", "--socket", d.socket}, flags...)...)
	if got.code != 0 || got.stderr != "" || strings.Count(got.stdout, "\n") != 1 {
		t.Fatalf("session new: %+v", got)
	}
	return strings.TrimSuffix(got.stdout, "\n")
}

// sessionIDs lists the ids of the sessions d holds.
func sessionIDs(t *testing.T, d *fakeDaemon) []string {
	t.Helper()
	list, err := client.New(d.socket).Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, s := range list.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

func TestSessionNew(t *testing.T) {
	d := newFakeDaemon(t, nil)
	env := map[string]string{"FROM_CLIENT": "v"}
	got := runCLI(context.Background(), "", env, "session", "new", "--socket", d.socket,
		"--python", "3.12", "--with", "pandas", "--with", "rich>=13", "--env", "A=1", "--env", "FROM_CLIENT",
		"--memory", "512M", "--pids", "32", "--cpus", "0.5", "--tmp", "128M", "--idle-timeout", "30m")
	got.check(t, "s-test-1\n", "", 0)
	want := api.SessionRequest{
		Python: "3.12", Dependencies: []string{"pandas", "rich>=13"}, Env: map[string]string{"A": "1", "FROM_CLIENT": "v"},
		MemoryBytes: 512 << 20, Pids: 32, CPUs: 0.5, TmpBytes: 128 << 20, IdleTimeoutMs: 30 * 60 * 1000,
	}
	if reqs := d.SessionRequests(); len(reqs) != 1 || !reflect.DeepEqual(reqs[0], want) {
		t.Errorf("session requests = %+v, want [%+v]", reqs, want)
	}

	// --json prints the whole session.
	got = runCLI(context.Background(), "", nil, "session", "new", "--json", "--socket", d.socket)
	if got.code != 0 || got.stderr != "" || strings.Count(got.stdout, "\n") != 1 {
		t.Fatalf("session new --json: %+v", got)
	}
	var s api.Session
	if err := json.Unmarshal([]byte(got.stdout), &s); err != nil {
		t.Fatal(err)
	}
	if s.ID != "s-test-2" || s.State != api.SessionAlive || s.ExpiresAt.IsZero() || s.IdleTimeoutMs != api.DefaultSessionIdle.Milliseconds() {
		t.Errorf("session new --json = %+v", s)
	}
}

func TestSessionNewRefused(t *testing.T) {
	d := newFakeDaemon(t, nil)
	for _, tc := range []struct {
		args      []string
		code      int
		stderrHas string
	}{
		{[]string{"--idle-timeout", "10ms"}, 2, "--idle-timeout: must be at least 1000"},
		{[]string{"--idle-timeout", "soon"}, 2, "-idle-timeout"},
		{[]string{"--python", "latest"}, 2, `--python: "latest" is not a version`},
		{[]string{"--env", "PATH=/evil"}, 2, "--env: PATH is set by the sandbox"},
		{[]string{"--with", " "}, 2, `--with " ": is not a requirement`},
		{[]string{"--memory", "lots"}, 2, "-memory"},
		{[]string{"--timeout", "5s"}, 2, "-timeout"},
		{[]string{"extra"}, 2, `unexpected "extra"`},
		// Refused by the server, which the fake gives a 1h maximum.
		{[]string{"--idle-timeout", "2h"}, 125, "cellblock: over_limit: idle_timeout_ms: 7200000 is above the maximum 3600000\n"},
		{[]string{"--memory", "64G"}, 125, "cellblock: over_limit: memory_bytes:"},
	} {
		got := runCLI(context.Background(), "", nil, append([]string{"session", "new", "--socket", d.socket}, tc.args...)...)
		if got.code != tc.code || got.stdout != "" || !strings.Contains(got.stderr, tc.stderrHas) {
			t.Errorf("session new %q: exit %d, stdout %q, stderr %q; want %d, nothing, %q",
				tc.args, got.code, got.stdout, got.stderr, tc.code, tc.stderrHas)
		}
	}
	if reqs := d.SessionRequests(); len(reqs) != 0 {
		t.Errorf("refused requests reached the executor: %+v", reqs)
	}
}

func TestSessionListShowRemove(t *testing.T) {
	d := newFakeDaemon(t, answer(nil, api.Result{}))
	a := newSession(t, d)
	b := newSession(t, d, "--python", "3.11", "--memory", "128M", "--idle-timeout", "1m")
	if res, err := client.New(d.socket).Run(context.Background(), &api.RunRequest{Code: "x = 41", Session: a}); err != nil || res.Error != nil {
		t.Fatalf("run in %s: %v %v", a, err, res.Error)
	}

	got := runCLI(context.Background(), "", nil, "session", "ls", "--socket", d.socket)
	if got.code != 0 || got.stderr != "" {
		t.Fatalf("session ls: %+v", got)
	}
	lines := strings.Split(strings.TrimSuffix(got.stdout, "\n"), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID STATE RUNS EXPIRES IN MEMORY PYTHON" ||
		lines[3] != "2 session(s)" {
		t.Fatalf("session ls:\n%s", got.stdout)
	}
	for i, want := range [][]string{
		{a, "alive", "1", "0 B of 256 MiB", "-"},
		{b, "alive", "0", "0 B of 128 MiB", "3.11"},
	} {
		row := lines[i+1]
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("session ls row %q lacks %q", row, w)
			}
		}
	}

	got = runCLI(context.Background(), "", nil, "session", "ls", "--json", "--socket", d.socket)
	var list api.SessionList
	if err := json.Unmarshal([]byte(got.stdout), &list); err != nil || got.code != 0 || len(list.Sessions) != 2 {
		t.Fatalf("session ls --json: %+v (%v)", got, err)
	}

	d.SetVariables(a, []api.Variable{
		{Name: "x", Type: "int", Repr: "41"},
		{Name: "df", Type: "DataFrame", Repr: "   a\n0  1\x1b[2J"},
	})
	got = runCLI(context.Background(), "", nil, "session", "show", "--socket", d.socket, a)
	if got.code != 0 || got.stderr != "" {
		t.Fatalf("session show: %+v", got)
	}
	for _, want := range []string{
		"id            " + a + "\n", "state         alive\n", "runs          1\n", "idle timeout  10m\n",
		"memory        0 B of 256 MiB\n", "limits        memory 256 MiB, pids 64, cpus 1, tmp 64 MiB\n",
		"expires", "(in ", "ago)", "variables (2):\n", "x     int        41\n",
		`df    DataFrame     a\n0  1\x1b[2J` + "\n",
	} {
		if !strings.Contains(got.stdout, want) {
			t.Errorf("session show lacks %q:\n%s", want, got.stdout)
		}
	}
	got = runCLI(context.Background(), "", nil, "session", "show", "--socket", d.socket, b)
	if !strings.Contains(got.stdout, "last used     never\n") || !strings.Contains(got.stdout, "variables: none\n") {
		t.Errorf("session show of an unused session:\n%s", got.stdout)
	}
	got = runCLI(context.Background(), "", nil, "session", "show", "--json", "--socket", d.socket, a)
	var s api.Session
	if err := json.Unmarshal([]byte(got.stdout), &s); err != nil || s.ID != a || len(s.Variables) != 2 {
		t.Errorf("session show --json: %+v (%v)", got, err)
	}

	// An unknown id: said plainly, exit 125.
	got = runCLI(context.Background(), "", nil, "session", "show", "--socket", d.socket, "s-nope")
	got.check(t, "", `cellblock: session_not_found: session: no session "s-nope": it never existed, has expired or been deleted, ended when cellblockd restarted, or belongs to another user`+"\n", 125)

	// rm goes on past an id it cannot delete.
	got = runCLI(context.Background(), "", nil, "session", "rm", "--socket", d.socket, a, "s-nope", b)
	if got.code != 125 || got.stdout != a+"\n"+b+"\n" || !strings.Contains(got.stderr, `session_not_found: session: no session "s-nope"`) {
		t.Errorf("session rm: %+v", got)
	}
	if ids := sessionIDs(t, d); len(ids) != 0 {
		t.Errorf("sessions left after rm: %q", ids)
	}
	runCLI(context.Background(), "", nil, "session", "ls", "--socket", d.socket).check(t,
		"ID  STATE  RUNS  EXPIRES IN  MEMORY  PYTHON\n0 session(s)\n", "", 0)
}

func TestSessionCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		code      int
		stdoutHas string
		stderrHas string
	}{
		{[]string{"session"}, 2, "", "missing subcommand"},
		{[]string{"session", "frob"}, 2, "", `unknown subcommand "frob"`},
		{[]string{"session", "-h"}, 0, "--idle-timeout DURATION", ""},
		{[]string{"session", "new", "-h"}, 0, "cellblock session new", ""},
		{[]string{"help", "session"}, 0, "cellblock session rm ID", ""},
		{[]string{"session", "show"}, 2, "", "needs one session ID"},
		{[]string{"session", "show", "a", "b"}, 2, "", "needs one session ID"},
		{[]string{"session", "rm"}, 2, "", "needs a session ID"},
		{[]string{"session", "ls", "x"}, 2, "", "takes no arguments"},
		{[]string{"session", "ls", "--bogus"}, 2, "", "-bogus"},
	} {
		got := runCLI(context.Background(), "", nil, tc.args...)
		if got.code != tc.code || !strings.Contains(got.stdout, tc.stdoutHas) || !strings.Contains(got.stderr, tc.stderrHas) {
			t.Errorf("cellblock %q: exit %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr",
				tc.args, got.code, got.stdout, got.stderr, tc.code, tc.stdoutHas, tc.stderrHas)
		}
	}
}

// TestSessionUsageListsFlags keeps session's usage in step with the flags
// of session new.
func TestSessionUsageListsFlags(t *testing.T) {
	inv, _, _ := testInvocation("", nil)
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	inv.sessionFlags(fs, &api.SessionRequest{})
	usage := sessionCmd{}.usage()
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(usage, "--"+f.Name+" ") {
			t.Errorf("session usage does not mention --%s", f.Name)
		}
	})
}

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{1400 * time.Millisecond, "1s"},
		{10 * time.Minute, "10m"},
		{10*time.Minute - 10*time.Millisecond, "10m"},
		{9*time.Minute + 58*time.Second, "9m58s"},
		{2 * time.Hour, "2h"},
		{time.Hour + 2*time.Minute + 3*time.Second, "1h2m3s"},
		{time.Hour + 30*time.Second, "1h0m30s"},
	} {
		if got := formatAge(tc.d); got != tc.want {
			t.Errorf("formatAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	if got := formatUntil(-time.Second); got != "expired" {
		t.Errorf("formatUntil(-1s) = %q", got)
	}
}

func TestRunInSession(t *testing.T) {
	d := newFakeDaemon(t, func(_ context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
		if req.Mode == api.ModeCell {
			return &api.Result{Value: &api.Value{Type: "int", Repr: "42"}}, nil
		}
		emit("stdout", "set\n")
		return &api.Result{Stdout: "set\n"}, nil
	})
	id := newSession(t, d, "--with", "pandas")

	runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", id, "-c", "x = 41").check(t, "set\n", "", 0)
	req, streamed := d.lastRequest(t)
	if want := (api.RunRequest{Code: "x = 41", Filename: "-c", Session: id}); !reflect.DeepEqual(req, want) || !streamed {
		t.Errorf("request = %+v (streamed %v), want %+v streamed", req, streamed, want)
	}
	runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", id, "--cell", "--timeout", "5s", "-c", "x + 1").check(t, "42\n", "", 0)
	if req, _ := d.lastRequest(t); req.Session != id || req.Mode != api.ModeCell || req.TimeoutMs != 5000 {
		t.Errorf("request = %+v", req)
	}

	// --json: the result says which session, after how many runs.
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session="+id, "--json", "--cell", "-c", "x + 1")
	var res api.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || got.code != 0 {
		t.Fatalf("run --json: %+v (%v)", got, err)
	}
	if s := res.Session; s == nil || s.ID != id || s.ExecutionCount != 3 || s.State != api.SessionAlive || s.ExpiresAt.IsZero() {
		t.Errorf("result's session = %+v", res.Session)
	}
	if !strings.Contains(got.stdout, `"session":{"id":"`+id+`","execution_count":3,`) {
		t.Errorf("run --json: %s", got.stdout)
	}
}

func TestRunInSessionRefused(t *testing.T) {
	d := newFakeDaemon(t, func(context.Context, *api.RunRequest, func(string, string)) (*api.Result, error) {
		t.Error("a refused run reached the executor")
		return &api.Result{}, nil
	})
	id := newSession(t, d)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--python", "3.12"}, "--python cannot be used with --session"},
		{[]string{"--with", "pandas"}, "--with cannot be used with --session"},
		{[]string{"--env", "A=1"}, "--env cannot be used with --session"},
		// Given, though it sets nothing (UNSET is not in the environment).
		{[]string{"--env", "UNSET"}, "--env cannot be used with --session"},
		{[]string{"--memory", "1G"}, "--memory cannot be used with --session"},
		{[]string{"--pids", "8"}, "--pids cannot be used with --session"},
		{[]string{"--cpus", "2"}, "--cpus cannot be used with --session"},
		{[]string{"--tmp", "1G"}, "--tmp cannot be used with --session"},
		{[]string{"--allow-net", "api.example.org:443"}, "--allow-net cannot be used with --session"},
		{[]string{"--tmp", "1G", "--python", "3.12", "--memory", "1G"},
			"--python, --memory, --tmp cannot be used with --session: a session's Python, dependencies, environment, limits, network and secrets are fixed when it is created (cellblock session new --python ...)"},
	} {
		args := append([]string{"run", "--socket", d.socket, "--session", id}, tc.flags...)
		got := runCLI(context.Background(), "", nil, append(args, "-c", "pass")...)
		if got.code != 2 || got.stdout != "" || !strings.Contains(got.stderr, "cellblock run: "+tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.flags, got.code, got.stdout, got.stderr, tc.want)
		}
	}
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", "", "-c", "pass")
	if got.code != 2 || !strings.Contains(got.stderr, "--session: want a session ID") {
		t.Errorf("empty --session: %+v", got)
	}
}

func TestRunInSessionErrors(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	d := newFakeDaemon(t, nil)
	d.SetRun(func(_ context.Context, req *api.RunRequest, _ func(string, string)) (*api.Result, error) {
		switch req.Code {
		case "block":
			close(started)
			<-release
		case "oom":
			// The interpreter dies with the run.
			d.LoseSession(req.Session)
			return &api.Result{ExitCode: 137, OOMKilled: true, Limits: &api.Limits{MemoryBytes: 64 << 20}}, nil
		}
		return &api.Result{}, nil
	})
	id := newSession(t, d)

	// Unknown: exit 125 with the daemon's words; --json prints the result.
	runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", "s-nope", "-c", "pass").check(t, "",
		`cellblock: session_not_found: session: no session "s-nope": it never existed, has expired or been deleted, ended when cellblockd restarted, or belongs to another user`+"\n", 125)
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", "s-nope", "--json", "-c", "pass")
	var res api.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || got.code != 125 || res.Error == nil || res.Error.Type != api.ErrSessionNotFound {
		t.Errorf("run --json in an unknown session: %+v (%v)", got, err)
	}

	// Busy: a second run while one is in progress is refused at once.
	done := make(chan cliResult)
	go func() {
		done <- runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", id, "-c", "block")
	}()
	<-started
	got = runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", id, "-c", "pass")
	if got.code != 125 || !strings.Contains(got.stderr, "cellblock: session_busy: session: another run is in progress in session") {
		t.Errorf("run in a busy session: %+v", got)
	}
	close(release)
	if got := <-done; got.code != 0 {
		t.Errorf("the blocking run: %+v", got)
	}

	// Lost by a run: the run's own ending, then what became of the session.
	runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", id, "-c", "oom").check(t, "",
		"cellblock: killed: out of memory (limit 64 MiB)\n"+
			"cellblock: session "+id+" lost its interpreter: its state is gone, and it refuses runs until deleted (cellblock session rm "+id+")\n", 137)
	// And lost it stays.
	got = runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--session", id, "-c", "pass")
	if got.code != 125 || !strings.Contains(got.stderr, "cellblock: session_lost: session:") {
		t.Errorf("run in a lost session: %+v", got)
	}
	got = runCLI(context.Background(), "", nil, "session", "ls", "--socket", d.socket)
	if !strings.Contains(got.stdout, id+"  lost") {
		t.Errorf("session ls:\n%s", got.stdout)
	}
}

func TestWriteSession(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	s := api.Session{
		ID: "s-1", State: api.SessionAlive, Busy: true, ExecutionCount: 3,
		CreatedAt: now.Add(-5 * time.Minute), LastUsedAt: now.Add(-time.Minute), ExpiresAt: now.Add(9*time.Minute + 30*time.Second),
		IdleTimeoutMs: 600000, OwnerUID: 1000, Python: "3.12.3", MemoryBytes: 40 << 20,
		Limits:             &api.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1, TmpBytes: 64 << 20},
		Environment:        &api.Environment{Packages: []api.Package{{Name: "pandas", Version: "2.2.3"}, {Name: "numpy", Version: "2.1.0"}}},
		Variables:          []api.Variable{{Name: "df", Type: "DataFrame", Repr: "   a\n0  1"}, {Name: "x", Type: "int", Repr: "41"}},
		VariablesTruncated: true,
	}
	var out strings.Builder
	writeSession(&out, &s, now)
	want := `id            s-1
state         alive, busy
runs          3
python        3.12.3
created       2025-03-01 11:55:00 (5m ago)
last used     2025-03-01 11:59:00 (1m ago)
expires       2025-03-01 12:09:30 (in 9m30s)
idle timeout  10m
memory        40 MiB of 256 MiB
limits        memory 256 MiB, pids 64, cpus 1, tmp 64 MiB
dependencies  pandas==2.2.3, numpy==2.1.0
owner         uid 1000

variables (2; more not shown, past the first 200):
NAME  TYPE       REPR
df    DataFrame     a\n0  1
x     int        41
`
	if out.String() != want {
		t.Errorf("writeSession:\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	lost := api.Session{ID: "s-2", State: api.SessionLost, ExpiresAt: now.Add(-time.Second), MemoryBytes: 1 << 20}
	writeSessionList(&out, &api.SessionList{Sessions: []api.Session{s, lost}}, now)
	want = `ID   STATE        RUNS  EXPIRES IN  MEMORY             PYTHON
s-1  alive, busy  3     9m30s       40 MiB of 256 MiB  3.12.3
s-2  lost         0     expired     1 MiB              -
2 session(s)
`
	if out.String() != want {
		t.Errorf("writeSessionList:\n%s\nwant\n%s", out.String(), want)
	}
}
