package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// testInvocation is an invocation whose environment is env and whose
// streams are buffers.
func testInvocation(stdin string, env map[string]string) (*invocation, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &invocation{
		stdin:  strings.NewReader(stdin),
		stdout: &stdout,
		stderr: &stderr,
		lookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
	}, &stdout, &stderr
}

func TestParseRun(t *testing.T) {
	env := map[string]string{"FROM_CLIENT": "copied", "EMPTY": ""}
	for _, tc := range []struct {
		name string
		args []string
		want runOptions
	}{{
		name: "file",
		args: []string{"hello.py"},
		want: runOptions{script: "hello.py", args: []string{}},
	}, {
		name: "file with args that look like flags",
		args: []string{"--timeout", "5s", "hello.py", "--timeout", "9s", "-c", "x"},
		want: runOptions{
			req:    api.RunRequest{TimeoutMs: 5000},
			script: "hello.py",
			args:   []string{"--timeout", "9s", "-c", "x"},
		},
	}, {
		name: "double dash ends the flags",
		args: []string{"--json", "--", "-weird.py", "a"},
		want: runOptions{json: true, script: "-weird.py", args: []string{"a"}},
	}, {
		name: "cell with inputs",
		args: []string{"--cell", "--input", "n=3", "--input", `cfg={"a": [1]}`, "-c", "n + 1"},
		want: runOptions{
			req:     api.RunRequest{Mode: api.ModeCell, Inputs: map[string]json.RawMessage{"n": json.RawMessage("3"), "cfg": json.RawMessage(`{"a": [1]}`)}},
			code:    "n + 1",
			codeSet: true,
		},
	}, {
		name: "stdin",
		args: []string{"--pids", "64", "-", "a", "b"},
		want: runOptions{req: api.RunRequest{Pids: 64}, script: "-", args: []string{"a", "b"}},
	}, {
		name: "code",
		args: []string{"-c", "print(1)"},
		want: runOptions{code: "print(1)", codeSet: true},
	}, {
		name: "code ends the flags",
		args: []string{"--memory", "128M", "-c", "print(1)", "--json", "-c", "y", "--", "z"},
		want: runOptions{
			req:     api.RunRequest{MemoryBytes: 128 << 20},
			code:    "print(1)",
			codeSet: true,
			args:    []string{"--json", "-c", "y", "--", "z"},
		},
	}, {
		name: "code with equals",
		args: []string{"--c=pass", "x"},
		want: runOptions{code: "pass", codeSet: true, args: []string{"x"}},
	}, {
		name: "empty code",
		args: []string{"-c", ""},
		want: runOptions{code: "", codeSet: true},
	}, {
		name: "code that looks like a flag",
		args: []string{"-c", "-x"},
		want: runOptions{code: "-x", codeSet: true},
	}, {
		name: "flag value -c is not code",
		args: []string{"--python", "-c", "x.py"},
		want: runOptions{req: api.RunRequest{Python: "-c"}, script: "x.py", args: []string{}},
	}, {
		name: "every flag",
		args: []string{
			"--timeout", "0.5", "--memory=1.5G", "-pids", "32", "--cpus", "1.5",
			"--with", "requests", "--with", "rich>=13", "--python", "3.12",
			"--env", "A=1", "--env", "B=x=y", "--env", "FROM_CLIENT", "--env", "UNSET",
			"--env", "EMPTY", "--env", "C=", "--tmp", "256M", "-i", "--json", "--socket", "/s",
			"--allow-net", "api.example.org:443", "--allow-net", "*.files.example.org:443",
			"--secret", "GITHUB_TOKEN", "--secret", "OTHER",
			"prog.py", "arg",
		},
		want: runOptions{
			req: api.RunRequest{
				TimeoutMs:    500,
				MemoryBytes:  3 << 29,
				Pids:         32,
				CPUs:         1.5,
				Dependencies: []string{"requests", "rich>=13"},
				Python:       "3.12",
				Env:          map[string]string{"A": "1", "B": "x=y", "FROM_CLIENT": "copied", "EMPTY": "", "C": ""},
				TmpBytes:     256 << 20,
				Network:      &api.Network{Allow: []string{"api.example.org:443", "*.files.example.org:443"}},
				Secrets:      []string{"GITHUB_TOKEN", "OTHER"},
			},
			stdin:  true,
			json:   true,
			script: "prog.py",
			args:   []string{"arg"},
		},
	}, {
		name: "long stdin flag",
		args: []string{"--stdin", "x.py"},
		want: runOptions{stdin: true, script: "x.py", args: []string{}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inv, _, _ := testInvocation("", env)
			got, err := inv.parseRun(tc.args)
			if err != nil {
				t.Fatalf("parseRun(%q): %v", tc.args, err)
			}
			if len(got.args) == 0 && len(tc.want.args) == 0 {
				got.args, tc.want.args = nil, nil
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("parseRun(%q) =\n %+v\nwant\n %+v", tc.args, *got, tc.want)
			}
		})
	}
}

func TestParseRunErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{}, "missing FILE"},
		{[]string{"--json"}, "missing FILE"},
		{[]string{"--"}, "missing FILE"},
		{[]string{"-c"}, "-c"},
		{[]string{"--timeout", "soon", "x.py"}, "-timeout"},
		{[]string{"--timeout", "-1s", "x.py"}, "-timeout"},
		{[]string{"--memory", "12Q", "x.py"}, "-memory"},
		{[]string{"--memory", "-5", "x.py"}, "-memory"},
		{[]string{"--tmp", "lots", "x.py"}, "-tmp"},
		{[]string{"--pids", "many", "x.py"}, "-pids"},
		{[]string{"--pids", "-1", "x.py"}, "-pids"},
		{[]string{"--cpus", "NaN", "x.py"}, "-cpus"},
		{[]string{"--cpus", "-1", "x.py"}, "-cpus"},
		{[]string{"--env", "=x", "x.py"}, "-env"},
		{[]string{"--env", "K=\xff", "x.py"}, "-env"},
		{[]string{"--nope", "x.py"}, "-nope"},
		{[]string{"--timeout"}, "-timeout"},
		{[]string{"--input", "n", "x.py"}, "NAME=JSON"},
		{[]string{"--input", "s=text", "x.py"}, "not JSON"},
		{[]string{"--cell=maybe", "x.py"}, "-cell"},
		{[]string{"--allow-net", "example.org", "x.py"}, "-allow-net"},
		{[]string{"--allow-net", "example.org:*", "x.py"}, "explicit port"},
		{[]string{"--secret", "not-a-name", "x.py"}, "not a secret's name"},
		{[]string{"--session", "s1", "--secret", "TOKEN", "x.py"}, "--secret cannot be used with --session"},
	} {
		inv, _, _ := testInvocation("", nil)
		_, err := inv.parseRun(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRun(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	inv, _, _ := testInvocation("", nil)
	if _, err := inv.parseRun([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("parseRun(-h) = %v, want flag.ErrHelp", err)
	}
}

func TestScriptFilename(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"hello.py", "hello.py"},
		{"/tmp/dir/hello.py", "hello.py"},
		{"../x/tool", "tool"},
		{"my script.py", "my script.py"},
		{"naïve.py", "naïve.py"},
		{".hidden.py", "main.py"},
		{"dir/", "dir"},
		{"/", "main.py"},
		{".", "main.py"},
		{"..", "main.py"},
		{"", "main.py"},
		{"-rf.py", "main.py"},
		{"bad\nname.py", "main.py"},
		{"tab\tname.py", "main.py"},
		{"x\xff.py", "main.py"},
		{strings.Repeat("a", 200) + ".py", "main.py"},
	} {
		if got := scriptFilename(tc.path); got != tc.want {
			t.Errorf("scriptFilename(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestRequest(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "job.py")
	if err := os.WriteFile(script, []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.py")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	latin1 := filepath.Join(dir, "latin1.py")
	if err := os.WriteFile(latin1, []byte("print('caf\xe9')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.py")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), api.MaxCodeBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  api.RunRequest
		err   string
	}{{
		name: "file",
		args: []string{"--timeout", "2", script, "a"},
		want: api.RunRequest{Code: "print('hi')\n", Filename: "job.py", Args: []string{"a"}, TimeoutMs: 2000},
	}, {
		name:  "code",
		args:  []string{"-c", "print(1)", "x"},
		stdin: "not read",
		want:  api.RunRequest{Code: "print(1)", Filename: "-c", Args: []string{"x"}},
	}, {
		name:  "code on stdin",
		args:  []string{"-", "x"},
		stdin: "import sys\n",
		want:  api.RunRequest{Code: "import sys\n", Filename: "-", Args: []string{"x"}},
	}, {
		name:  "stdin for the program",
		args:  []string{"-i", "-c", "input()"},
		stdin: "42\n",
		want:  api.RunRequest{Code: "input()", Filename: "-c", Stdin: "42\n"},
	}, {
		name: "empty file runs like python's",
		args: []string{empty},
		want: api.RunRequest{Code: "\n", Filename: "empty.py"},
	}, {
		name: "empty -c",
		args: []string{"-c", ""},
		want: api.RunRequest{Code: "\n", Filename: "-c"},
	}, {
		name: "missing file",
		args: []string{filepath.Join(dir, "nope.py")},
		err:  "no such file",
	}, {
		name: "directory",
		args: []string{dir},
		err:  "is a directory",
	}, {
		name: "not UTF-8",
		args: []string{latin1},
		err:  "latin1.py: the code is not UTF-8",
	}, {
		name: "too big",
		args: []string{big},
		err:  "more than 1 MiB",
	}, {
		name:  "stdin not UTF-8",
		args:  []string{"-i", "-c", "pass"},
		stdin: "\xff\xfe",
		err:   "--stdin",
	}, {
		name:  "stdin twice",
		args:  []string{"-i", "-"},
		stdin: "pass",
		err:   "cannot be used with -",
	}, {
		name: "argument not UTF-8",
		args: []string{"-c", "pass", "ok", "\xff"},
		err:  "argument 2",
	}, {
		name: "bad python",
		args: []string{"--python", "latest", "-c", "pass"},
		err:  `--python: "latest" is not a version`,
	}, {
		name: "reserved variable",
		args: []string{"--env", "PATH=/evil", "-c", "pass"},
		err:  "--env: PATH is set by the sandbox",
	}, {
		name: "bad variable name",
		args: []string{"--env", "1X=2", "-c", "pass"},
		err:  "--env:",
	}, {
		name: "bad requirement",
		args: []string{"--with", "ok", "--with", " ", "-c", "pass"},
		err:  `--with " ": is not a requirement`,
	}, {
		name: "NUL in code",
		args: []string{"-c", "pass\x00"},
		err:  "-c: contains a NUL byte",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inv, _, _ := testInvocation(tc.stdin, nil)
			o, err := inv.parseRun(tc.args)
			if err != nil {
				t.Fatalf("parseRun: %v", err)
			}
			req, err := o.request(context.Background(), inv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("request() error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("request(): %v", err)
			}
			if len(req.Args) == 0 {
				req.Args = nil
			}
			if !reflect.DeepEqual(*req, tc.want) {
				t.Errorf("request() =\n %+v\nwant\n %+v", *req, tc.want)
			}
		})
	}
}

// blockingReader never returns, like a terminal nobody types into.
type blockingReader struct{ ch chan struct{} }

func (r blockingReader) Read([]byte) (int, error) { <-r.ch; return 0, nil }

func TestReadStdinInterrupted(t *testing.T) {
	r := blockingReader{make(chan struct{})}
	defer close(r.ch)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&interrupted{sig: os.Interrupt})
	if _, err := readLimited(ctx, r, 10); err == nil {
		t.Fatal("readLimited returned without error after cancellation")
	}
}

// TestUsageListsFlags keeps the hand-written usage in step with the flags.
func TestUsageListsFlags(t *testing.T) {
	inv, _, _ := testInvocation("", nil)
	usage := runCmd{}.usage()
	inv.runFlags(&runOptions{}).VisitAll(func(f *flag.Flag) {
		want := "--" + f.Name + " "
		if len(f.Name) == 1 {
			want = "-" + f.Name + " "
		}
		if !strings.Contains(usage, want) && !strings.Contains(usage, "-"+f.Name+",") {
			t.Errorf("run usage does not mention %s", strings.TrimSpace(want))
		}
	})
}

// A cell's value is printed after the output, as Python's REPL shows it;
// display items, which a terminal cannot show, are named on stderr.
func TestValueAndDisplayOnTheTerminal(t *testing.T) {
	res := &api.Result{
		Value: &api.Value{Type: "int", Repr: "42"},
		Display: []api.DisplayItem{{Data: map[string]json.RawMessage{
			"text/plain": json.RawMessage(`"<Figure size 640x480 with 1 Axes>"`),
			"image/png":  json.RawMessage(`"` + strings.Repeat("A", 4000) + `"`),
		}}},
	}
	n := notes(res, &api.RunRequest{})
	if len(n) != 1 || !strings.Contains(n[0], "<Figure size 640x480 with 1 Axes>") || !strings.Contains(n[0], "image/png, 2.9 KiB") {
		t.Errorf("notes %q", n)
	}
}
