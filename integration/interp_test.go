package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// runCell runs code in cell mode with inputs and returns the result.
func runCell(t *testing.T, d *Daemon, code string, inputs map[string]string) *api.Result {
	t.Helper()
	req := &api.RunRequest{Code: code, Mode: api.ModeCell}
	for k, v := range inputs {
		if req.Inputs == nil {
			req.Inputs = map[string]json.RawMessage{}
		}
		req.Inputs[k] = json.RawMessage(v)
	}
	res, err := d.Client.Run(context.Background(), req)
	if err != nil || res.Error != nil {
		t.Fatalf("cell %q: %+v %v", code, res, err)
	}
	return res
}

// A cell's last expression comes back as its value: type, repr, and JSON
// when it is JSON; inputs are globals.
func TestCellValues(t *testing.T) {
	d := daemon(t)
	for _, c := range []struct {
		code     string
		inputs   map[string]string
		typ      string
		repr     string
		json     string // "" for no json
		noValue  bool
		exitCode int
	}{
		{code: "x = 6\nx * 7", typ: "int", repr: "42", json: "42"},
		{code: "{'n': n, 'names': names}", inputs: map[string]string{"n": "5", "names": `["a", "b"]`},
			typ: "dict", repr: "{'n': 5, 'names': ['a', 'b']}", json: `{"n":5,"names":["a","b"]}`},
		{code: "import cellblock\ncellblock.inputs['cfg']['deep'][0]", inputs: map[string]string{"cfg": `{"deep": [true]}`},
			typ: "bool", repr: "True", json: "true"},
		{code: "object()", typ: "object"},
		{code: "float('nan')", typ: "float", repr: "nan"},
		{code: "print('side effect')\nNone", noValue: true},
		{code: "x = 1", noValue: true},
	} {
		res := runCell(t, d, c.code, c.inputs)
		if res.ExitCode != c.exitCode {
			t.Errorf("%q: exit %d stderr %q", c.code, res.ExitCode, res.Stderr)
		}
		if c.noValue {
			if res.Value != nil {
				t.Errorf("%q: value %+v, want none", c.code, res.Value)
			}
			continue
		}
		v := res.Value
		if v == nil || v.Type != c.typ || (c.repr != "" && v.Repr != c.repr) || string(v.JSON) != c.json {
			t.Errorf("%q: value %+v (json %s), want %s %s %s", c.code, v, v.JSON, c.typ, c.repr, c.json)
		}
	}
}

// Exceptions come back as data in both modes, with the traceback on
// stderr as python prints it and exit code 1.
func TestExceptionsAsData(t *testing.T) {
	d := daemon(t)
	for _, mode := range []string{api.ModeScript, api.ModeCell} {
		res, err := d.Client.Run(context.Background(), &api.RunRequest{Mode: mode, Code: "import json\n\ndef f():\n    json.loads('{')\n\nf()\n"})
		if err != nil || res.Error != nil {
			t.Fatalf("%+v %v", res, err)
		}
		x := res.Exception
		if res.ExitCode != 1 || x == nil || x.Type != "json.decoder.JSONDecodeError" || x.Line == nil || *x.Line != 4 ||
			!strings.Contains(x.Message, "Expecting property name") || !strings.Contains(x.Traceback, `line 4, in f`) {
			t.Fatalf("%s: exit %d exception %+v", mode, res.ExitCode, x)
		}
		if !strings.Contains(res.Stderr, "Traceback (most recent call last):") || strings.Contains(res.Stderr, "_cellblock_runner") {
			t.Errorf("%s: stderr %q", mode, res.Stderr)
		}
	}
	// sys.exit is no exception to report.
	res, _ := d.Client.Run(context.Background(), &api.RunRequest{Code: "import sys; sys.exit(3)"})
	if res.ExitCode != 3 || res.Exception != nil {
		t.Errorf("sys.exit(3): exit %d exception %+v", res.ExitCode, res.Exception)
	}
}

// A stdlib-only object that draws a real PNG comes back as image/png with
// its text/plain, as a cell's value and through cellblock.display.
func TestDisplayStdlibPNG(t *testing.T) {
	d := daemon(t)
	code := `
import struct, zlib, cellblock
class Square:
    def _repr_png_(self):
        w = h = 8
        raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))
        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    def __repr__(self):
        return "<red square>"
class Bad:
    def _repr_png_(self):
        return b"not a png at all"
    def __repr__(self):
        return "<bad>"
cellblock.display(Square())
cellblock.display(Bad())
Square()
`
	res := runCell(t, d, code, nil)
	if res.ExitCode != 0 || len(res.Display) != 3 {
		t.Fatalf("exit %d, %d display items, stderr %q", res.ExitCode, len(res.Display), res.Stderr)
	}
	for _, i := range []int{0, 2} {
		var png, text string
		_ = json.Unmarshal(res.Display[i].Data["image/png"], &png)
		_ = json.Unmarshal(res.Display[i].Data["text/plain"], &text)
		if !strings.HasPrefix(png, "iVBORw0KGgo") || text != "<red square>" {
			t.Errorf("display[%d]: png %.20q text %q", i, png, text)
		}
	}
	// Garbage from _repr_png_ is dropped with a note, never silently.
	bad := res.Display[1]
	var badText string
	_ = json.Unmarshal(bad.Data["text/plain"], &badText)
	if _, ok := bad.Data["image/png"]; ok || badText != "<bad>" || !strings.Contains(string(bad.Metadata["cellblock"]), "image/png") {
		t.Errorf("garbage PNG item: %+v metadata %s", bad.Data, bad.Metadata["cellblock"])
	}
	if res.Value == nil || res.Value.Repr != "<red square>" {
		t.Errorf("value %+v", res.Value)
	}
}

// findRunnerChannel is Python that sets fd to the runner's channel: the
// process's highest socket descriptor.
const findRunnerChannel = `
import os
def sockets():
    for f in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + f).startswith("socket:"):
                yield int(f)
        except OSError:
            pass  # listdir's own descriptor, gone already
fd = max(sockets())
`

// The code can write anything to the runner's channel, close it, or take
// over what the runner uses: each run still gets a correct result, and
// the daemon stays healthy and serves the next run.
func TestHostileToTheRunner(t *testing.T) {
	d := daemon(t)
	channel := findRunnerChannel
	for _, c := range []struct {
		name, code string
		exit       int
		stdout     string
	}{
		{"close the channel", channel + "os.close(fd)\nprint('closed')\n1/0", 1, "closed\n"},
		{"garbage frames", channel + "import struct\nfor n in (5, 1 << 31, 3):\n    os.write(fd, struct.pack('>I', n) + b'x' * min(n, 4096))\nprint('sent')", 0, "sent\n"},
		{"huge frame header", channel + "os.write(fd, b'\\xff\\xff\\xff\\xff' + b'{' * 65536)\nprint('sent')", 0, "sent\n"},
		{"fake results", channel + "import json, struct\nm = json.dumps({'type': 'value', 'value': {'type': 'int', 'repr': 'x' * 100000}}).encode()\nos.write(fd, struct.pack('>I', len(m)) + m)\nprint('sent')", 0, "sent\n"},
		{"replace stdout", "import sys, io\nsys.stdout = io.StringIO()\nprint('lost')\nsys.__stdout__.write('kept\\n')", 0, "kept\n"},
		{"patch cellblock", "import cellblock\ncellblock.display = None\ncellblock._channel = None\nprint('patched')\nraise ValueError('after')", 1, "patched\n"},
		{"os._exit", "print('bye', flush=True)\nimport os\nos._exit(5)", 5, "bye\n"},
		{"fork and exit in the child", "import os\npid = os.fork()\nif pid == 0:\n    raise SystemExit(0)\nos.waitpid(pid, 0)\nprint('parent')", 0, "parent\n"},
		{"exit from a thread", "import threading, sys\nt = threading.Thread(target=sys.exit, args=(4,))\nt.start(); t.join()\nprint('main goes on')", 0, "main goes on\n"},
	} {
		res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: c.code, Mode: api.ModeCell, TimeoutMs: 20000})
		if err != nil || res.Error != nil || res.TimedOut {
			t.Errorf("%s: %+v %v", c.name, res, err)
			continue
		}
		if res.ExitCode != c.exit || res.Stdout != c.stdout {
			t.Errorf("%s: exit %d stdout %q stderr %q; want %d %q", c.name, res.ExitCode, res.Stdout, res.Stderr, c.exit, c.stdout)
		}
		if res.Value != nil && len(res.Value.Repr) > 8192 {
			t.Errorf("%s: a %d-byte repr got through", c.name, len(res.Value.Repr))
		}
	}
	// A value whose repr never ends is a timeout, not a stuck daemon.
	res, err := d.Client.Run(context.Background(), &api.RunRequest{Mode: api.ModeCell, TimeoutMs: 1000,
		Code: "class Slow:\n    def __repr__(self):\n        while True: pass\nSlow()"})
	if err != nil || res.Error != nil || !res.TimedOut {
		t.Errorf("endless repr: %+v %v", res, err)
	}
	runOK(t, d, &api.RunRequest{Code: "print('still fine')"})
}

// The request's environment is the program's from its first line, also
// for variables that change how Python starts.
func TestEnvironmentFromTheStart(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import os, sys
print(os.environ["GREETING"], sys.flags.hash_randomization, hash("cellblock") == hash("cellblock"))
`, Env: map[string]string{"GREETING": "hello", "PYTHONHASHSEED": "0"}})
	if res.Stdout != "hello 0 True\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// cellblock run --cell prints the value after the output; --json carries
// value, exception and display.
func TestCLICell(t *testing.T) {
	d := daemon(t)
	out, err := exec.Command(bin(t, "cellblock"), "--socket", d.Socket, "run", "--cell", "--input", "n=4", "-c", "print('out')\nn * 10").Output()
	if err != nil || string(out) != "out\n40\n" {
		t.Errorf("cellblock run --cell: %q %v", out, err)
	}
	out, _ = exec.Command(bin(t, "cellblock"), "--socket", d.Socket, "run", "--json", "-c", "raise KeyError('k')").Output()
	var res api.Result
	if err := json.Unmarshal(out, &res); err != nil || res.Exception == nil || res.Exception.Type != "KeyError" {
		t.Errorf("--json exception: %s %v", out, err)
	}
}

// The runner works in a jail on every CPython the machine has, 3.8 to
// 3.13 (pyenv's) and Debian's: script mode with its traceback, a cell's
// value, an exception as data and a display item.
func TestRunnerOnEveryPython(t *testing.T) {
	d := startDaemon(t, "--prestart", "0")
	candidates, _ := filepath.Glob("/root/.pyenv/versions/3.*/bin/python3")
	candidates = append(candidates, "/usr/bin/python3")
	seen := 0
	for _, py := range candidates {
		out, err := exec.Command(py, "-c", "import platform, sys; print(platform.python_version()); sys.exit(sys.version_info < (3, 8))").Output()
		version := strings.TrimSpace(string(out))
		if err != nil || version == "" {
			continue
		}
		if out, err := exec.Command(bin(t, "cellblockd"), "rootfs", "import", "--python", py, "--state-dir", d.StateDir).CombinedOutput(); err != nil {
			t.Errorf("import %s: %v\n%s", py, err, out)
			continue
		}
		seen++
		t.Run(version, func(t *testing.T) {
			res := runOK(t, d, &api.RunRequest{Python: version, Code: "import sys, cellblock\nprint(sys.version.split()[0], __name__, sys.argv[1:])", Args: []string{"a"}})
			if want := version + " __main__ ['a']\n"; res.Stdout != want || res.Python != version {
				t.Errorf("script: python %s stdout %q stderr %q", res.Python, res.Stdout, res.Stderr)
			}
			cell, err := d.Client.Run(context.Background(), &api.RunRequest{Python: version, Mode: api.ModeCell,
				Code: "import cellblock\nclass H:\n    def _repr_html_(self):\n        return '<b>hi</b>'\ncellblock.display(H())\n[n] * 2", Inputs: map[string]json.RawMessage{"n": json.RawMessage("7")}})
			if err != nil || cell.Error != nil || cell.Value == nil || string(cell.Value.JSON) != "[7,7]" || len(cell.Display) != 1 {
				t.Errorf("cell: %+v %v", cell, err)
			} else if html := string(cell.Display[0].Data["text/html"]); !strings.Contains(html, "hi") {
				t.Errorf("display: %+v", cell.Display[0].Data)
			}
			exc, err := d.Client.Run(context.Background(), &api.RunRequest{Python: version, Code: "def f():\n    raise ValueError('bad')\nf()"})
			if err != nil || exc.ExitCode != 1 || exc.Exception == nil || exc.Exception.Type != "ValueError" ||
				exc.Exception.Line == nil || *exc.Exception.Line != 2 || !strings.Contains(exc.Stderr, "ValueError: bad") {
				t.Errorf("exception: %+v %v", exc, err)
			}
		})
	}
	if seen < 2 {
		t.Skipf("found %d CPython 3.8+ interpreters on this machine; want pyenv's and Debian's", seen)
	}
}

// cellblock run -c CODE and cellblock run - behave as python -c and
// python - do: sys.argv[0], sys.path[0], __file__ (none for -c,
// "<stdin>" for -), and the traceback's file name.
func TestCLIDashForms(t *testing.T) {
	d := daemon(t)
	code := "import sys; print(sys.argv, repr(sys.path[0]), '__file__' in globals()); 1/0"
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
		file  string
	}{
		{[]string{"-c", code, "a"}, "", "['-c', 'a'] '' False\n", `File "<string>", line 1`},
		{[]string{"-", "b"}, code, "['-', 'b'] '' True\n", `File "<stdin>", line 1`}, // python sets __file__ to "<stdin>"
	} {
		cmd := exec.Command(bin(t, "cellblock"), append([]string{"--socket", d.Socket, "run"}, c.args...)...)
		cmd.Stdin = strings.NewReader(c.stdin)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || string(out) != c.want || !strings.Contains(stderr.String(), c.file) {
			t.Errorf("cellblock run %q: %v stdout %q stderr %q", c.args[0], err, out, stderr.String())
		}
	}
}

// postRun posts req to d's API and returns the answer's body as sent.
func postRun(t *testing.T, d *Daemon, req *api.RunRequest) []byte {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://cellblockd"+api.PathRuns, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := unixHTTP(d.Socket).Do(hreq)
	if err != nil {
		t.Fatalf("POST %s: %v", api.PathRuns, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %v\n%s", api.PathRuns, resp.Status, err, out)
	}
	return out
}

// dataText is a display item's content for mime, a string, or "" when it
// has none.
func dataText(d api.DisplayItem, mime string) string { return jsonString(d.Data[mime]) }

// jsonString is raw decoded as a JSON string, or "" when it is not one.
func jsonString(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// strictJSONText says what makes b something other than JSON text that a
// strict parser takes: not UTF-8, not JSON, or a \u escape of a lone
// surrogate (which encoding/json accepts and turns into U+FFFD, but
// Python's json.loads keeps and serde_json refuses).
func strictJSONText(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not UTF-8")
	}
	if !json.Valid(b) {
		return errors.New("not JSON")
	}
	surrogate := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(n), err == nil && n >= 0xd800 && n <= 0xdfff
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := surrogate(i)
		switch {
		case !ok:
			i++ // skip the escaped character: \\ and \" included
		case r >= 0xdc00:
			return fmt.Errorf("a lone low surrogate at byte %d: %.40q", i, b[i:])
		default:
			if low, ok := surrogate(i + 6); !ok || low < 0xdc00 {
				return fmt.Errorf("a lone high surrogate at byte %d: %.40q", i, b[i:])
			}
			i += 11
		}
	}
	return nil
}

// Lone surrogates in a repr, an exception's message, a display item's text
// and stdout, and surrogate escapes that a program writes to the runner's
// channel itself: the daemon's answer is strict UTF-8 JSON each time, with
// U+FFFD or "?" in their place, and the run is not failed.
func TestNonUTF8Reports(t *testing.T) {
	d := daemon(t)
	for _, c := range []struct {
		name  string
		req   api.RunRequest
		check func(r *api.Result) error
	}{{
		name: "repr", req: api.RunRequest{Mode: api.ModeCell, Code: "class C:\n    def __repr__(self):\n        return 'a\\udcffb'\nC()"},
		check: func(r *api.Result) error {
			if r.ExitCode != 0 || r.Value == nil || r.Value.Repr != "a?b" {
				return fmt.Errorf("exit %d value %+v", r.ExitCode, r.Value)
			}
			return nil
		},
	}, {
		name: "exception", req: api.RunRequest{Mode: api.ModeCell, Code: "raise ValueError('bad \\udcff here')"},
		check: func(r *api.Result) error {
			if x := r.Exception; r.ExitCode != 1 || x == nil || x.Type != "ValueError" || x.Message != "bad ? here" ||
				!strings.Contains(r.Stderr, `ValueError: bad \udcff here`) {
				return fmt.Errorf("exit %d exception %+v stderr %q", r.ExitCode, x, r.Stderr)
			}
			return nil
		},
	}, {
		name: "display", req: api.RunRequest{Code: "import cellblock\nclass D:\n    def __repr__(self):\n        return 't\\udcff'\n" +
			"    def _repr_html_(self):\n        return '<b>\\udcff</b>'\ncellblock.display(D())"},
		check: func(r *api.Result) error {
			if r.ExitCode != 0 || len(r.Display) != 1 || dataText(r.Display[0], "text/plain") != "t?" ||
				dataText(r.Display[0], "text/html") != "<b>?</b>" {
				return fmt.Errorf("exit %d display %+v", r.ExitCode, r.Display)
			}
			return nil
		},
	}, {
		name: "stdout", req: api.RunRequest{Code: "import sys\nprint('x\\udcffy')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xfe\\n')"},
		check: func(r *api.Result) error {
			if r.ExitCode != 0 || r.Stdout != "x\ufffdy\n\ufffd\n" {
				return fmt.Errorf("exit %d stdout %q", r.ExitCode, r.Stdout)
			}
			return nil
		},
	}, {
		name: "escapes on the channel", req: api.RunRequest{Code: findRunnerChannel + `
import struct
for m in (b'{"type":"value","value":{"type":"str","repr":"r\\udcff","json":"j\\udcff"}}',
          b'{"type":"display","data":{"text/plain":"p\\ud800","text/html":"<i>\\udcff</i>"},"metadata":{"k":"\\udfff"}}'):
    os.write(fd, struct.pack(">I", len(m)) + m)
print("sent")
`},
		check: func(r *api.Result) error {
			if r.ExitCode != 0 || r.Stdout != "sent\n" || r.Value == nil || r.Value.Repr != "r\ufffd" || jsonString(r.Value.JSON) != "j\ufffd" ||
				len(r.Display) != 1 || dataText(r.Display[0], "text/html") != "<i>\ufffd</i>" || dataText(r.Display[0], "text/plain") != "p\ufffd" {
				return fmt.Errorf("exit %d stdout %q value %+v display %+v", r.ExitCode, r.Stdout, r.Value, r.Display)
			}
			return nil
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			body := postRun(t, d, &c.req)
			if err := strictJSONText(body); err != nil {
				t.Errorf("the answer is not strict JSON text: %v\n%s", err, body)
			}
			var res api.Result
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatalf("decode %s: %v", body, err)
			}
			if res.Error != nil || res.TimedOut {
				t.Fatalf("the run failed: %+v", res)
			}
			if err := c.check(&res); err != nil {
				t.Error(err)
			}
		})
	}
	runOK(t, d, &api.RunRequest{Code: "print('still fine')"})
}

// The operator's display caps, end to end: info.display reports them, and
// a run's items over the per-item cap or past the total keep only their
// text/plain, with a note in metadata.cellblock.dropped of what went, how
// big it was and why, which cellblock-mcp puts in words; an item within
// the caps is kept whole.
func TestDisplayCapsFromFlags(t *testing.T) {
	d := startDaemon(t, "--prestart", "0", "--display-item-bytes", "2K", "--display-total-bytes", "3K")
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := api.DisplayCaps{Items: 64, ItemBytes: 2 << 10, TotalBytes: 3 << 10, ReprBytes: 4096, TracebackBytes: 65536}
	if info.Display == nil || *info.Display != want {
		t.Fatalf("info.display = %+v, want %+v", info.Display, want)
	}
	code := `
import cellblock
class Page:
    def __init__(self, name, n):
        self.name, self.n = name, n
    def _repr_html_(self):
        return "<p>" + "x" * self.n + "</p>"
    def __repr__(self):
        return self.name
cellblock.display(Page("fits", 1500))
cellblock.display(Page("past the total", 1800))
Page("over the item cap", 3000)
`
	res := runCell(t, d, code, nil)
	if res.ExitCode != 0 || len(res.Display) != 3 {
		t.Fatalf("exit %d, %d display items, stderr %q", res.ExitCode, len(res.Display), res.Stderr)
	}
	for i, c := range []struct {
		plain  string
		html   int // bytes of text/html kept, 0 for none
		reason string
	}{
		{"fits", 1500 + 7, ""},
		{"past the total", 0, "past display_total_bytes (3072)"},
		{"over the item cap", 0, "item over display_item_bytes (2048)"},
	} {
		it := res.Display[i]
		if got := dataText(it, "text/plain"); got != c.plain {
			t.Errorf("display[%d] text/plain %q, want %q", i, got, c.plain)
		}
		if got := len(dataText(it, "text/html")); got != c.html {
			t.Errorf("display[%d] (%s): %d bytes of text/html, want %d", i, c.plain, got, c.html)
		}
		var notes api.DisplayNotes
		if raw, ok := it.Metadata[api.DisplayNotesKey]; ok {
			if err := json.Unmarshal(raw, &notes); err != nil {
				t.Errorf("display[%d] metadata.cellblock %s: %v", i, raw, err)
			}
		}
		switch {
		case c.reason == "" && len(notes.Dropped) != 0:
			t.Errorf("display[%d] (%s): dropped %+v", i, c.plain, notes.Dropped)
		case c.reason == "":
		case len(notes.Dropped) != 1 || notes.Dropped[0].MIME != "text/html" || notes.Dropped[0].Reason != c.reason || notes.Dropped[0].Bytes < 1800:
			t.Errorf("display[%d] (%s): dropped %+v, want text/html for %q", i, c.plain, notes.Dropped, c.reason)
		}
	}

	// cellblock-mcp tells the model what was dropped, how big and why.
	c := mcpStdio(t, d.Socket, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	text := mcpText(mcpCall(t, ctx, c, "run_python", map[string]any{"code": code}, nil))
	for _, line := range []string{
		"\n[1] text/plain: past the total; the sandbox dropped text/html of 1.8 KiB (past display_total_bytes (3072))\n",
		"\n[2] text/plain: over the item cap; the sandbox dropped text/html of 2.9 KiB (item over display_item_bytes (2048))\n",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("the text lacks the line %q:\n%s", line, text)
		}
	}
}

// In script mode (the default) too, inputs are bound as globals before the
// first line runs, are cellblock.inputs, and leave the program's argv and
// environment alone; a script has no value.
func TestScriptModeInputs(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{
		Code: `
import os, sys
print(__name__, n + 1, names, cfg["deep"][0], nothing is None, text)
def uses_global():
    return n * 2
print(uses_global())
import cellblock
print(cellblock.inputs == {"n": n, "names": names, "cfg": cfg, "nothing": None, "text": text})
print(sys.argv, sorted(k for k in os.environ if k in ("n", "names", "cfg")))
n * 100
`,
		Args: []string{"a1"},
		Inputs: map[string]json.RawMessage{
			"n": json.RawMessage("5"), "names": json.RawMessage(`["a", "b"]`), "cfg": json.RawMessage(`{"deep": [true]}`),
			"nothing": json.RawMessage("null"), "text": json.RawMessage(`"é ünïcode"`),
		},
	})
	want := "__main__ 6 ['a', 'b'] True True é ünïcode\n10\nTrue\n['/work/main.py', 'a1'] []\n"
	if res.Stdout != want || res.Value != nil {
		t.Errorf("stdout %q value %+v stderr %q; want stdout %q and no value", res.Stdout, res.Value, res.Stderr, want)
	}
	// Without inputs, the names are not there.
	res = run(t, d, &api.RunRequest{Code: "print(n)"})
	if res.ExitCode != 1 || res.Exception == nil || res.Exception.Type != "NameError" {
		t.Errorf("no inputs: exit %d exception %+v", res.ExitCode, res.Exception)
	}
}
