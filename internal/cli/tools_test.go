package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/server/servertest"
)

// callTools is a run that calls each tool of calls, in order, through the
// real relay, and prints what came back: the result's JSON, or the
// ToolError's message.
func callTools(calls ...[2]string) servertest.RunFunc {
	return func(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
		var out strings.Builder
		for _, c := range calls {
			res, err := servertest.CallTool(ctx, req, c[0], json.RawMessage(c[1]))
			var te *servertest.ToolError
			switch {
			case errors.As(err, &te):
				fmt.Fprintf(&out, "ToolError: %s\n", te.Message)
			case err != nil:
				return nil, err
			default:
				fmt.Fprintf(&out, "%s\n", res)
			}
		}
		emit("stdout", out.String())
		return &api.Result{Stdout: out.String(), Phases: &api.Phases{}}, nil
	}
}

const addCommand = `add=python3 -c 'import json,sys; a=json.load(sys.stdin); print(a["x"] + a["y"])'`

func TestToolFlagRunsTheCommand(t *testing.T) {
	d := newFakeDaemon(t, callTools([2]string{"add", `{"x": 2, "y": 3}`}))
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--tool", addCommand,
		"-c", "import cellblock; print(cellblock.tools.add(x=2, y=3))")
	got.check(t, "5\n", "", 0)
	req, streamed := d.lastRequest(t)
	if !streamed || len(req.Tools) != 1 || req.Tools[0].Name != "add" || strings.Contains(req.Tools[0].Description, "python3") {
		t.Fatalf("request %+v (streamed %v)", req.Tools, streamed)
	}
}

func TestToolOutputs(t *testing.T) {
	dir := t.TempDir()
	d := newFakeDaemon(t, callTools(
		[2]string{"text", `{}`},
		[2]string{"json", `{}`},
		[2]string{"fail", `{}`},
		[2]string{"quiet", `{}`},
		[2]string{"env", `{}`},
		[2]string{"echo", `{"a": [1, "é"]}`},
	))
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket,
		"--tool", "text=echo not json",
		"--tool", `json=printf '{"k": [1, 2]}\n'`,
		"--tool", "fail=echo first >&2; echo 'the real reason' >&2; exit 3",
		"--tool", "quiet=exit 4",
		"--tool", `env=echo "$CELLBLOCK_TOOL $CELLBLOCK_SOCKET" > `+filepath.Join(dir, "env")+`; echo null`,
		"--tool", "echo=cat",
		"--json", "-c", "x")
	if got.code != 0 {
		t.Fatalf("exit %d: %s", got.code, got.stderr)
	}
	var res api.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil {
		t.Fatal(err)
	}
	want := `"not json"
{"k":[1,2]}
ToolError: first
the real reason
ToolError: quiet failed: exit status 4
null
{"a":[1,"é"]}
`
	if res.Stdout != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "env"))
	if string(b) != "env "+d.socket+"\n" {
		t.Errorf("the command's environment: %q", b)
	}
	if len(res.ToolCalls) != 6 || !res.ToolCalls[0].OK || res.ToolCalls[2].OK || res.ToolCalls[2].Outcome != api.ToolErrored {
		t.Errorf("tool_calls %+v", res.ToolCalls)
	}
}

func TestToolCommandKilledAtTheCallsTimeout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	d := newFakeDaemon(t, callTools([2]string{"slow", `{}`}))
	// The shell starts a child of its own: the whole group is killed.
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--tool-timeout", "1s",
		"--tool", "slow=sh -c 'echo $$ > "+pidFile+"; exec sleep 60' & sleep 60",
		"--json", "-c", "x")
	if got.code != 0 {
		t.Fatalf("exit %d: %s", got.code, got.stderr)
	}
	var res api.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "ToolError: slow did not finish within 1s, the time a tool call may take; it was killed") {
		t.Errorf("stdout %q", res.Stdout)
	}
	if req, _ := d.lastRequest(t); req.ToolLimits == nil || req.ToolLimits.TimeoutMs != 1000 {
		t.Errorf("tool_limits %+v", req.ToolLimits)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	stat := "/proc/" + strings.TrimSpace(string(b)) + "/stat"
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := os.ReadFile(stat)
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a process the command started outlived it: %s", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestToolFlagErrors(t *testing.T) {
	d := newFakeDaemon(t, nil)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tool", "add"}, "want NAME=COMMAND"},
		{[]string{"--tool", "add="}, "want NAME=COMMAND"},
		{[]string{"--tool", "2add=x"}, `"2add" is not a tool name`},
		{[]string{"--tool", "_x=x"}, `"_x" is not a tool name`},
		{[]string{"--tool", "for=x"}, `"for" is not a tool name`},
		{[]string{"--tool", "a=x", "--tool", "a=y"}, "tool a is given twice"},
	} {
		got := runCLI(context.Background(), "", nil, append(append([]string{"run", "--socket", d.socket}, c.args...), "-c", "1")...)
		if got.code != exitUsage || !strings.Contains(got.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.args, got.code, got.stderr, c.want)
		}
	}
}

func TestToolOutput(t *testing.T) {
	for in, want := range map[string]string{
		"5\n":          "5",
		"  [1, 2] \n":  "[1, 2]",
		"hello\n":      `"hello"`,
		"two\nlines\n": `"two\nlines"`,
		"":             `""`,
		"\xff\n":       "\"\ufffd\"",
		"\"q\"\r\n":    `"q"`,
		// JSON whose strings are not UTF-8: the daemon takes only UTF-8.
		"\"\xff\"\n":          "\"\ufffd\"",
		"{\"a\": \"x\xc3y\"}": "{\"a\": \"x\ufffdy\"}",
	} {
		if got := string(toolOutput([]byte(in))); got != want {
			t.Errorf("toolOutput(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestToolCommandsRunEightAtOnce: 24 calls at once run at most
// toolCommands commands at a time; each command prints how many were
// running when it started.
func TestToolCommandsRunEightAtOnce(t *testing.T) {
	dir := t.TempDir()
	d := newFakeDaemon(t, func(ctx context.Context, req *api.RunRequest, emit func(string, string)) (*api.Result, error) {
		results := make(chan string, 24)
		for range 24 {
			go func() {
				res, err := servertest.CallTool(ctx, req, "count", json.RawMessage(`{}`))
				results <- fmt.Sprint(string(res), err)
			}()
		}
		most := 0
		for range 24 {
			r := <-results
			var n int
			if _, err := fmt.Sscan(r, &n); err != nil {
				return nil, fmt.Errorf("a call: %s", r)
			}
			most = max(most, n)
		}
		out := fmt.Sprintf("at most %d\n", most)
		emit("stdout", out)
		return &api.Result{Stdout: out, Phases: &api.Phases{}}, nil
	})
	count := fmt.Sprintf(`count=mkdir %[1]s/$$; ls %[1]s | wc -l; sleep 0.2; rmdir %[1]s/$$`, dir)
	got := runCLI(context.Background(), "", nil, "run", "--socket", d.socket, "--tool", count, "-c", "x")
	if got.code != 0 || !strings.HasPrefix(got.stdout, "at most ") {
		t.Fatalf("exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	var most int
	fmt.Sscanf(got.stdout, "at most %d", &most)
	if most < 1 || most > toolCommands {
		t.Errorf("%d commands ran at once; the most is %d", most, toolCommands)
	}
	t.Logf("%d at once", most)
}
