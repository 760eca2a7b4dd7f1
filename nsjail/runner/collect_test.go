package runner

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cellblock/cellblock/nsjail/runner/wire"
)

func frame(s string) []byte {
	b := make([]byte, 4+len(s))
	binary.BigEndian.PutUint32(b, uint32(len(s)))
	copy(b[4:], s)
	return b
}

func collect(t *testing.T, l Limits, frames ...string) Result {
	t.Helper()
	var buf bytes.Buffer
	for _, f := range frames {
		buf.Write(frame(f))
	}
	c := NewCollector(l)
	if err := c.Collect(&buf); err != nil {
		t.Fatal(err)
	}
	return c.Result()
}

var pngB64 = base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nrest"))

func TestCollectHonest(t *testing.T) {
	started := 0
	c := NewCollector(DefaultLimits())
	c.OnStarted = func() { started++ }
	var buf bytes.Buffer
	for _, f := range []string{
		`{"type":"started"}`,
		`{"type":"display","data":{"image/png":"` + pngB64 + `","text/plain":"<Pic>"},"metadata":{}}`,
		`{"type":"value","value":{"type":"int","repr":"42","json":42}}`,
		`{"type":"exception","exception":{"type":"ValueError","message":"m","traceback":"Traceback...","line":3}}`,
		`{"type":"tool_call","future":true}`,
		`{"type":"done","exit_code":1}`,
	} {
		buf.Write(frame(f))
	}
	if err := c.Collect(&buf); err != nil {
		t.Fatal(err)
	}
	r := c.Result()
	if started != 1 || !r.Started || !r.Done || *r.ExitCode != 1 {
		t.Errorf("started=%d result=%+v", started, r)
	}
	if r.Value == nil || r.Value.Repr != "42" || string(r.Value.JSON) != "42" {
		t.Errorf("value %+v", r.Value)
	}
	if r.Exception == nil || r.Exception.Type != "ValueError" || *r.Exception.Line != 3 {
		t.Errorf("exception %+v", r.Exception)
	}
	if len(r.Display) != 1 {
		t.Fatalf("display %+v", r.Display)
	}
	if s, _ := r.Display[0].Text("image/png"); s != pngB64 {
		t.Errorf("png %q", s)
	}
	if len(r.Notes) != 0 {
		t.Errorf("notes %q", r.Notes)
	}
}

func dropped(t *testing.T, it wire.DisplayItem) []wire.Dropped {
	t.Helper()
	var md struct {
		Dropped []wire.Dropped `json:"dropped"`
	}
	if err := json.Unmarshal(it.Metadata["cellblock"], &md); err != nil {
		t.Fatalf("metadata %s: %v", it.Metadata["cellblock"], err)
	}
	return md.Dropped
}

func TestCollectDisplayChecks(t *testing.T) {
	gif := base64.StdEncoding.EncodeToString([]byte("GIF89a"))
	for _, tc := range []struct {
		name, frame string
		wantMIME    []string
		wantDropped string
	}{
		{"bad magic", `{"type":"display","data":{"image/png":"` + gif + `","text/plain":"x"}}`, []string{"text/plain"}, "image/png"},
		{"bad base64", `{"type":"display","data":{"image/jpeg":"!!!!","text/plain":"x"}}`, []string{"text/plain"}, "image/jpeg"},
		{"unknown mime", `{"type":"display","data":{"image/gif":"` + gif + `","text/plain":"x"}}`, []string{"text/plain"}, "image/gif"},
		{"bad mime name", `{"type":"display","data":{"Text/HTML":"x","text/plain":"x"}}`, []string{"text/plain"}, "Text/HTML"},
		{"html not string", `{"type":"display","data":{"text/html":1,"text/plain":"x"}}`, []string{"text/plain"}, "text/html"},
		{"deep json", `{"type":"display","data":{"application/json":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"text/plain":"x"}}`, []string{"text/plain"}, "application/json"},
		{"no text/plain", `{"type":"display","data":{"text/html":"<b>"}}`, []string{"text/html", "text/plain"}, ""},
		{"garbage", `{"type":"display","data":[1,2]}`, []string{"text/plain"}, "*"},
		{"unknown field", `{"type":"display","data":{"text/plain":"x"},"evil":1}`, []string{"text/plain"}, "*"},
		{"big item", `{"type":"display","data":{"text/html":"` + strings.Repeat("h", 2000) + `","text/plain":"x"}}`, []string{"text/plain"}, "text/html"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLimits()
			l.DisplayItemBytes = 1000
			r := collect(t, l, tc.frame)
			if len(r.Display) != 1 {
				t.Fatalf("display %+v", r.Display)
			}
			it := r.Display[0]
			var got []string
			for m := range it.Data {
				got = append(got, m)
			}
			if strings.Join(sorted(got), ",") != strings.Join(tc.wantMIME, ",") {
				t.Errorf("mimes %v, want %v", got, tc.wantMIME)
			}
			if tc.wantDropped != "" {
				d := dropped(t, it)
				if len(d) == 0 || d[0].MIME != tc.wantDropped {
					t.Errorf("dropped %+v, want %s", d, tc.wantDropped)
				}
			}
		})
	}
}

// The runner's own notes of what it dropped come first, in the order it
// sent them, then the Collector's.
func TestCollectDroppedOrder(t *testing.T) {
	gif := base64.StdEncoding.EncodeToString([]byte("GIF89a"))
	r := collect(t, DefaultLimits(), `{"type":"display","data":{"image/png":"`+gif+`","text/plain":"x"},"metadata":{"cellblock":{"dropped":[`+
		`{"mime":"text/html","bytes":1,"reason":"first"},{"mime":"text/markdown","bytes":2,"reason":"second"}]}}}`)
	var got []string
	for _, d := range dropped(t, r.Display[0]) {
		got = append(got, d.MIME)
	}
	if strings.Join(got, ",") != "text/html,text/markdown,image/png" {
		t.Errorf("dropped %v, want the runner's two in order, then image/png", got)
	}
}

// Whatever escapes the jail sends, what the Collector keeps encodes as
// valid UTF-8 JSON with no lone surrogate: a lone surrogate becomes U+FFFD,
// in the content kept as raw JSON too. A frame that is not UTF-8 is
// skipped.
func TestCollectInvalidUTF8(t *testing.T) {
	const bad = `\udcff\ud800x`
	r := collect(t, DefaultLimits(),
		"{\"type\":\"display\",\"data\":{\"text/plain\":\"\xff\"}}",
		`{"type":"display","data":{"text/plain":"p`+bad+`","text/html":"<b>`+bad+`</b>","application/json":{"k`+bad+`":["`+bad+`",1.50]}},`+
			`"metadata":{"other":"`+bad+`","cellblock":{"dropped":[{"mime":"text/markdown","bytes":1,"reason":"r`+bad+`"}]}}}`,
		`{"type":"display","data":{"text/html":"<i>\ud83d\ude00</i>","text/plain":"ok"}}`,
		`{"type":"value","value":{"type":"T`+bad+`","repr":"r`+bad+`","json":"`+bad+`"}}`,
		`{"type":"exception","exception":{"type":"E`+bad+`","message":"m`+bad+`","traceback":"t`+bad+`","line":1}}`,
	)
	if len(r.Display) != 2 || r.Value == nil || r.Exception == nil || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "not UTF-8") {
		t.Fatalf("result %+v", r)
	}
	out, err := json.Marshal(struct {
		Display   []wire.DisplayItem
		Value     *wire.Value
		Exception *wire.Exception
	}{r.Display, r.Value, r.Exception})
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(out) {
		t.Errorf("the result is not valid UTF-8: %q", out)
	}
	pairs := regexp.MustCompile(`\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}`)
	if regexp.MustCompile(`\\u[dD][89a-fA-F]`).Match(pairs.ReplaceAll(out, nil)) {
		t.Errorf("the result escapes a lone surrogate: %s", out)
	}
	if html, _ := r.Display[0].Text("text/html"); html != "<b>\ufffd\ufffdx</b>" {
		t.Errorf("text/html %q", html)
	}
	if got := string(r.Display[0].Data["application/json"]); got != `{"k\ufffd\ufffdx":["\ufffd\ufffdx",1.50]}` {
		t.Errorf("application/json %s", got)
	}
	if raw := string(r.Display[1].Data["text/html"]); raw != `"<i>\ud83d\ude00</i>"` {
		t.Errorf("a surrogate pair, changed: text/html %s", raw)
	}
	if string(r.Value.JSON) != `"\ufffd\ufffdx"` || r.Value.Repr != "r\ufffd\ufffdx" {
		t.Errorf("value %+v json %s", r.Value, r.Value.JSON)
	}
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestCollectCaps(t *testing.T) {
	l := DefaultLimits()
	l.DisplayItems = 3
	l.ReprBytes = 50
	l.MessageBytes = 60
	l.TracebackBytes = 70
	l.JSONBytes = 10
	var frames []string
	for i := 0; i < 5; i++ {
		frames = append(frames, `{"type":"display","data":{"text/plain":"`+strings.Repeat("é", 100)+`"}}`)
	}
	frames = append(frames,
		`{"type":"value","value":{"type":"list","repr":"`+strings.Repeat("r", 100)+`","json":[1,2,3,4,5,6,7,8,9]}}`,
		`{"type":"exception","exception":{"type":"E","message":"`+strings.Repeat("m", 100)+`","traceback":"`+strings.Repeat("t", 100)+`END","line":null}}`,
		`{"type":"done","exit_code":0,"display_dropped":4}`,
	)
	r := collect(t, l, frames...)
	if len(r.Display) != 4 {
		t.Fatalf("want 3 items and a note, got %d", len(r.Display))
	}
	for _, it := range r.Display[:3] {
		s, _ := it.Text("text/plain")
		if len(s) > l.ReprBytes {
			t.Errorf("text/plain of %d bytes", len(s))
		}
	}
	note, _ := r.Display[3].Text("text/plain")
	if !strings.Contains(note, "6 more display items dropped") {
		t.Errorf("note %q", note)
	}
	if len(r.Value.Repr) > 50 || r.Value.JSON != nil {
		t.Errorf("value %+v", r.Value)
	}
	if e := r.Exception; len(e.Message) > 60 || len(e.Traceback) > 70 || !strings.HasSuffix(e.Traceback, "END") || e.Line != nil {
		t.Errorf("exception %+v", e)
	}
}

func TestCollectTotalBytes(t *testing.T) {
	l := DefaultLimits()
	l.DisplayTotalBytes = 2500
	var frames []string
	for i := 0; i < 3; i++ {
		frames = append(frames, `{"type":"display","data":{"text/html":"`+strings.Repeat("h", 1000)+`","text/plain":"p"}}`)
	}
	r := collect(t, l, frames...)
	if len(r.Display) != 3 {
		t.Fatalf("display %d", len(r.Display))
	}
	if _, ok := r.Display[2].Data["text/html"]; ok {
		t.Error("third item kept its html past the total")
	}
	if d := dropped(t, r.Display[2]); d[0].MIME != "text/html" {
		t.Errorf("dropped %+v", d)
	}
}

func TestCollectGarbageKeepsDraining(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(frame(`{"type":"started"}`))
	buf.Write(frame(`not json`))
	buf.Write(frame("\xff\xfe"))
	// A frame over the maximum: skipped, and the stream stays in step.
	big := make([]byte, 4)
	binary.BigEndian.PutUint32(big, 5<<20)
	buf.Write(big)
	buf.Write(make([]byte, 5<<20))
	buf.Write(frame(`{"type":"value","value":{"type":"int","repr":"1"}}`))
	// A header promising more than is left.
	buf.Write([]byte{0, 0, 1, 0, 'x'})
	l := DefaultLimits()
	l.FrameBytes = 1 << 20
	c := NewCollector(l)
	if err := c.Collect(&buf); err != nil {
		t.Fatal(err)
	}
	r := c.Result()
	if !r.Started || r.Value == nil || r.Value.Repr != "1" {
		t.Errorf("result %+v", r)
	}
	if len(r.Notes) != 4 {
		t.Errorf("notes %q", r.Notes)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestCollectReadError(t *testing.T) {
	if err := NewCollector(DefaultLimits()).Collect(errReader{}); err == nil {
		t.Fatal("no error")
	}
}

// TestCollectMemoryBounded: frames that declare 4 GiB are drained without
// allocating them.
func TestCollectMemoryBounded(t *testing.T) {
	l := DefaultLimits()
	l.FrameBytes = 1 << 20
	hdr := []byte{0xff, 0xff, 0xff, 0xff}
	r := io.MultiReader(bytes.NewReader(hdr), io.LimitReader(zeros{}, 64<<20))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := NewCollector(l)
	if err := c.Collect(r); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("allocated %d bytes draining a 64 MiB frame", got)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestReadReady(t *testing.T) {
	for _, tc := range []struct {
		frame string
		ok    bool
	}{
		{`{"type":"ready","protocol":1,"python":"3.11.7"}`, true},
		{`{"type":"ready","protocol":2,"python":"3.11.7"}`, false},
		{`{"type":"started"}`, false},
		{`{"type":"ready","protocol":1,"python":"3.11.7","x":1}`, false},
		{`{"type":"ready","protocol":1,"python":"3.11.7"} {}`, false},
		{`{"type":"ready","protocol":1,"python":"3.11.7","preload_failed":[{"module":"x","error":"ImportError: no"}]}`, true},
		{`{"type":"ready","protocol":1,"python":"3.11.7","preload_failed":[{"module":"x","error":"e","more":1}]}`, false},
		{`{"type":"ready","protocol":1,"python":"3.11.7","preload_failed":{}}`, false},
	} {
		_, err := ReadReady(NewFrameReader(bytes.NewReader(frame(tc.frame)), ReadyFrameBytes))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.frame, err)
		}
	}
}

// TestReadReadyBoundsPreloadFailures: what the runner says of its
// preload is untrusted: kept to the list's bounds, names checked.
func TestReadReadyBoundsPreloadFailures(t *testing.T) {
	var fails []PreloadFailure
	for range MaxPreload + 10 {
		fails = append(fails, PreloadFailure{Module: "ok.name", Error: strings.Repeat("é", PreloadErrorBytes)})
	}
	fails[1].Module = "bad name,x"
	fails[2].Module = strings.Repeat("a", MaxModuleName+1)
	b, _ := json.Marshal(Ready{Type: TypeReady, Protocol: ProtocolVersion, Python: "3.12.1", PreloadFailed: fails})
	m, err := ReadReady(NewFrameReader(bytes.NewReader(frame(string(b))), ReadyFrameBytes))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.PreloadFailed) != MaxPreload {
		t.Fatalf("%d failures kept, want %d", len(m.PreloadFailed), MaxPreload)
	}
	for i, f := range m.PreloadFailed {
		want := "ok.name"
		if i == 1 || i == 2 {
			want = "?"
		}
		if f.Module != want || len(f.Error) > PreloadErrorBytes || !utf8.ValidString(f.Error) {
			t.Errorf("failure %d: module %q, error of %d bytes (valid UTF-8 %v)", i, f.Module, len(f.Error), utf8.ValidString(f.Error))
		}
	}
}

func TestValidModule(t *testing.T) {
	for name, ok := range map[string]bool{
		"pandas": true, "matplotlib.pyplot": true, "_x.y_2": true, strings.Repeat("a", MaxModuleName): true,
		"": false, "a,b": false, "a.": false, ".a": false, "a..b": false, "2a": false, "a.2b": false,
		"a-b": false, "a b": false, "é": false, strings.Repeat("a", MaxModuleName+1): false,
	} {
		if ValidModule(name) != ok {
			t.Errorf("ValidModule(%q) = %v", name, !ok)
		}
	}
}

func TestWriteRunRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteRun(&buf, Run{Mode: "cell", Code: "1", Argv0: "-c", Env: map[string]string{"A": "b"}, Limits: DefaultLimits()}); err != nil {
		t.Fatal(err)
	}
	p, err := NewFrameReader(&buf, MaxDaemonFrame).Next()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil || m["type"] != "run" || m["argv"] == nil {
		t.Fatalf("%s: %v", p, err)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	l := DefaultLimits()
	l.DisplayItems = 0
	if err := l.Validate(); !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("got %v", err)
	}
}

func FuzzCollect(f *testing.F) {
	f.Add(frame(`{"type":"display","data":{"image/png":"`+pngB64+`","text/plain":"x"},"metadata":{"cellblock":{"dropped":[{"mime":"a/b","bytes":1,"reason":"r"}]}}}`), 3)
	f.Add(frame(`{"type":"value","value":{"type":"int","repr":"1","json":[[[1]]]}}`), 1)
	f.Add(frame(`{"type":"exception","exception":{"type":"E","message":"m","traceback":"t","line":1}}`), 2)
	f.Add(append(frame(`{"type":"done","exit_code":3,"display_dropped":2}`), 0, 0, 0), 4)
	f.Fuzz(func(t *testing.T, data []byte, items int) {
		l := DefaultLimits()
		l.FrameBytes = 1 << 16
		l.DisplayItems = 1 + (items & 7)
		l.DisplayItemBytes = 4096
		l.DisplayTotalBytes = 8192
		l.ReprBytes = 64
		l.JSONBytes = 128
		l.MessageBytes = 64
		l.TracebackBytes = 128
		c := NewCollector(l)
		if err := c.Collect(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		r := c.Result()
		if len(r.Display) > l.DisplayItems+1 {
			t.Fatalf("%d items", len(r.Display))
		}
		var total int
		for _, it := range r.Display {
			s, ok := it.Text("text/plain")
			if !ok || len(s) > 512 {
				t.Fatalf("text/plain %q", s)
			}
			for _, raw := range it.Data {
				total += len(raw)
			}
		}
		if total > l.DisplayTotalBytes*2+1024 {
			t.Fatalf("display of %d bytes", total)
		}
		if v := r.Value; v != nil && (len(v.Repr) > l.ReprBytes || len(v.JSON) > l.JSONBytes) {
			t.Fatalf("value %+v", v)
		}
		if e := r.Exception; e != nil && (len(e.Message) > l.MessageBytes || len(e.Traceback) > l.TracebackBytes) {
			t.Fatalf("exception %+v", e)
		}
		if len(r.Notes) > maxNotes+1 {
			t.Fatalf("%d notes", len(r.Notes))
		}
	})
}

// validText changes no JSON value as encoding/json reads it, keeps valid
// JSON valid and invalid JSON invalid, and has nothing left to do on its
// own output.
func FuzzValidText(f *testing.F) {
	for _, s := range []string{`"a\udcffb"`, `["\ud83d\ude00","\ud83d",{"\udfff":1}]`, `"\\udcff"`, `"\u00e9\ud800\u0041"`, `"\ud800\ud800\udc00"`, `"\u12"`, `{"a":"\ud800`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !utf8.Valid(raw) {
			return // messageType refuses such frames before validText sees them
		}
		out := validText(raw)
		if json.Valid(raw) != json.Valid(out) {
			t.Fatalf("valid %v became %v: %q -> %q", json.Valid(raw), json.Valid(out), raw, out)
		}
		if again := validText(out); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", raw, out, again)
		}
		var a, b any
		if json.Unmarshal(raw, &a) == nil {
			if err := json.Unmarshal(out, &b); err != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("%q reads as %v, %q as %v (%v)", raw, a, out, b, err)
			}
		}
	})
}

func TestCollectExit(t *testing.T) {
	r := collect(t, DefaultLimits(), `{"type":"done","exit_code":0}`)
	if r.Exit != nil {
		t.Errorf("no exit message, yet Exit = %d", *r.Exit)
	}
	// The last valid one counts: the runner's own is its last frame, and
	// one the program forged before it must not stand.
	r = collect(t, DefaultLimits(),
		`{"type":"exit","exit_code":9}`,
		`{"type":"exit","exit_code":300}`,
		`{"type":"exit","exit_code":-1}`,
		`{"type":"exit","exit_code":"0"}`,
		`{"type":"exit","exit_code":4,"extra":1}`,
		`{"type":"exit","exit_code":4}`,
		`{"type":"exit"`)
	if r.Exit == nil || *r.Exit != 4 {
		t.Errorf("Exit = %v; want 4", r.Exit)
	}
	if len(r.Notes) != 5 {
		t.Errorf("notes %q; want one for each bad exit message and the cut frame", r.Notes)
	}
}
