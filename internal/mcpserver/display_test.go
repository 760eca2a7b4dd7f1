package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/nsjail/runner"
)

// tinyPNG is a real 3×2 PNG.
func tinyPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	img.Set(0, 0, color.NRGBA{R: 255, A: 255})
	img.Set(2, 1, color.NRGBA{B: 255, A: 255})
	return encodePNG(t, img)
}

// noisePNG is a w×h grey PNG of random pixels, which do not compress:
// about w*h bytes.
func noisePNG(t *testing.T, w, h int, seed uint64) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range img.Pix {
		img.Pix[i] = byte(r.UintN(256))
	}
	return encodePNG(t, img)
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// item is a display item with the given data: strings are encoded as JSON
// strings, []byte as base64 strings, json.RawMessage as it is.
func item(t *testing.T, data map[string]any) api.DisplayItem {
	t.Helper()
	d := api.DisplayItem{Data: make(map[string]json.RawMessage)}
	for mime, v := range data {
		switch v := v.(type) {
		case json.RawMessage:
			d.Data[mime] = v
		case []byte:
			d.Data[mime] = mustJSON(base64.StdEncoding.EncodeToString(v))
		default:
			d.Data[mime] = mustJSON(v)
		}
	}
	return d
}

// content is one content of a tool result, whatever its type.
type content struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     string `json:"data"`
	MIMEType string `json:"mimeType"`
	Resource struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
		Text     string `json:"text"`
	} `json:"resource"`
}

func contentsOf(t *testing.T, cs []mcp.Content) []content {
	t.Helper()
	var out []content
	for _, c := range cs {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var x content
		if err := json.Unmarshal(data, &x); err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

// dataString is a display item's data for mime, decoded as a string.
func dataString(t *testing.T, d api.DisplayItem, mime string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(d.Data[mime], &s); err != nil {
		t.Fatalf("data[%s] = %s: %v", mime, d.Data[mime], err)
	}
	return s
}

// TestRunCell: a cell's value, its plot, its HTML table and an image over
// the cap, through the real server and mcp-go's client.
func TestRunCell(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			fd := startFakeDaemon(t)
			plot := tinyPNG(t)
			huge := noisePNG(t, 1000, 1000, 1) // 1 MB of pixels, 1.3 MB of base64
			const html = "<table><tr><th>a</th></tr><tr><td>1</td></tr></table>"
			want := api.Result{
				Stdout: "working\n", Python: "3.12.7", DurationMs: 42,
				Value: &api.Value{Type: "int", Repr: "42", JSON: json.RawMessage("42")},
				Display: []api.DisplayItem{
					item(t, map[string]any{"image/png": plot, "text/plain": "<Figure size 3x2 with 1 Axes>"}),
					item(t, map[string]any{"text/html": html, "text/plain": "   a\n0  1"}),
					item(t, map[string]any{"image/png": huge, "text/plain": "<Figure size 1000x1000 with 1 Axes>"}),
					item(t, map[string]any{"text/plain": "'just text'"}),
				},
			}
			fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result { r := want; return &r }
			c := connect(t, newServer(t, fd), p.opts...)
			res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{
				"code":   "import matplotlib\n...\n6 * 7",
				"inputs": map[string]any{"n": 3, "names": []string{"a", "b"}},
			})
			if res.IsError {
				t.Fatalf("isError for a clean cell: %s", resultText(res))
			}

			req := fd.lastRequest(t)
			if req.Mode != api.ModeCell {
				t.Errorf("the daemon got mode %q, want %q", req.Mode, api.ModeCell)
			}
			if got := fmt.Sprintf("%s %s", req.Inputs["n"], req.Inputs["names"]); got != `3 ["a","b"]` || len(req.Inputs) != 2 {
				t.Errorf("the daemon got inputs %s", req.Inputs)
			}

			got := resultOf(t, res)
			cs := contentsOf(t, res.Content)
			text := cs[0].Text
			runID := got.RunID
			mustContain(t, text,
				"exited normally",
				"--- stdout ---\nworking",
				"--- display: 4 items, in order",
				"\n[0] image/png 3×2 px, "+fmtBytes(int64(len(plot)))+": sent as image content 1; text/plain: <Figure size 3x2 with 1 Axes>\n",
				"\n[1] text/html, 53 B: sent as the embedded resource cellblock://runs/"+runID+"/display/1.html; "+
					`text/plain, 9 B: sent as the text "display[1] text/plain"`+"\n",
				"\n[2] image/png left out: 1000×1000 px, 1.3 MiB of base64, is over the cap of 1 MiB per image; text/plain: <Figure size 1000x1000 with 1 Axes>\n",
				"\n[3] text/plain: 'just text'\n",
				"--- value of the last expression (int) ---\n42")
			if strings.Contains(text, base64.StdEncoding.EncodeToString(plot)) {
				t.Error("the text carries the image's base64")
			}

			if len(cs) != 4 {
				t.Fatalf("%d contents, want the text, one image, one resource and one text: %+v", len(cs), cs)
			}
			if img := cs[1]; img.Type != "image" || img.MIMEType != "image/png" || img.Data != base64.StdEncoding.EncodeToString(plot) {
				t.Errorf("content 1 = %s %s %.40q, want the plot as image/png", img.Type, img.MIMEType, img.Data)
			}
			if r := cs[2]; r.Type != "resource" || r.Resource.MIMEType != "text/html" || r.Resource.Text != html ||
				r.Resource.URI != "cellblock://runs/"+runID+"/display/1.html" {
				t.Errorf("content 2 = %+v, want the HTML as an embedded resource", r)
			}
			if tx := cs[3]; tx.Type != "text" || tx.Text != "display[1] text/plain:\n   a\n0  1" {
				t.Errorf("content 3 = %+v, want the HTML item's text/plain", tx)
			}

			// The structured content is the result, with each image's
			// base64 replaced by a note.
			if s := dataString(t, got.Display[0], "image/png"); s != "(sent as image content 1)" {
				t.Errorf("structured display[0] image/png = %q", s)
			}
			if s := dataString(t, got.Display[2], "image/png"); !strings.HasPrefix(s, "(left out of this tool result: 1000×1000 px, 1.3 MiB of base64, is over the cap of 1 MiB per image") {
				t.Errorf("structured display[2] image/png = %q", s)
			}
			wantStructured := asServed(t, want, got)
			wantStructured.Display = append([]api.DisplayItem(nil), want.Display...)
			wantStructured.Display[0] = got.Display[0]
			wantStructured.Display[2] = got.Display[2]
			for _, i := range []int{0, 2} {
				if dataString(t, got.Display[i], "text/plain") != dataString(t, want.Display[i], "text/plain") {
					t.Errorf("structured display[%d] text/plain changed", i)
				}
			}
			if !reflect.DeepEqual(got, wantStructured) {
				t.Errorf("structured content = %+v\nwant %+v", got, wantStructured)
			}
		})
	}
}

// TestRunCellException: an exception reported as data is what the text
// says, not what stderr's last line says; without it stderr is parsed.
func TestRunCellException(t *testing.T) {
	line := 3
	const traceback = "Traceback (most recent call last):\n  File \"<cell>\", line 3, in <module>\nKeyError: 'x'\n"
	tests := []struct {
		name   string
		result api.Result
		wants  []string
		not    []string
	}{{
		name: "reported",
		result: api.Result{ExitCode: 1, Stderr: "noise\nValueError: not this one\n",
			Exception: &api.Exception{Type: "KeyError", Message: "'x'", Traceback: traceback, Line: &line}},
		wants: []string{"The code raised an uncaught exception and exited with status 1: KeyError: 'x' (line 3; the traceback is below).",
			"--- traceback ---\n" + strings.TrimSuffix(traceback, "\n")},
		not: []string{"not this one (", "status 1: ValueError"},
	}, {
		name: "traceback in stderr",
		result: api.Result{ExitCode: 1, Stderr: traceback,
			Exception: &api.Exception{Type: "KeyError", Message: "'x'", Traceback: traceback}},
		wants: []string{"exited with status 1: KeyError: 'x' (the traceback is below).", "--- stderr ---\nTraceback"},
		not:   []string{"--- traceback ---"},
	}, {
		name:   "only stderr",
		result: api.Result{ExitCode: 1, Stderr: traceback},
		wants:  []string{"uncaught exception and exited with status 1: KeyError: 'x' (the traceback is in stderr below)."},
	}}
	fd := startFakeDaemon(t)
	c := connect(t, newServer(t, fd))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result { r := tt.result; return &r }
			res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "{}['x']"})
			if !res.IsError {
				t.Error("isError is false for a cell that raised")
			}
			text := resultText(res)
			mustContain(t, text, tt.wants...)
			for _, n := range tt.not {
				if strings.Contains(text, n) {
					t.Errorf("text contains %q:\n%s", n, text)
				}
			}
			if got := resultOf(t, res); !reflect.DeepEqual(got, asServed(t, tt.result, got)) {
				t.Errorf("structured content = %+v, want %+v", got, asServed(t, tt.result, got))
			}
		})
	}
}

// TestDisplayCaps: each cap leaves out what is over it, says so with the
// size and the reason, and still sends what fits.
func TestDisplayCaps(t *testing.T) {
	imageItem := func(data []byte) api.DisplayItem {
		return item(t, map[string]any{"image/png": data, "text/plain": "<Figure>"})
	}
	// Each about 0.92 MiB of base64: four fit in 4 MiB, five do not.
	var big []api.DisplayItem
	for i := range 5 {
		big = append(big, imageItem(noisePNG(t, 800, 900, uint64(i))))
	}
	var many []api.DisplayItem
	for range maxImages + 1 {
		many = append(many, imageItem(tinyPNG(t)))
	}
	var jpg bytes.Buffer
	if err := jpeg.Encode(&jpg, image.NewGray(image.Rect(0, 0, 4, 4)), nil); err != nil {
		t.Fatal(err)
	}
	var pages []api.DisplayItem
	for range 5 {
		pages = append(pages, item(t, map[string]any{"text/html": strings.Repeat("<p>x</p>", 30<<10), "text/plain": "<Page>"}))
	}
	var listed []api.DisplayItem
	for i := range maxDisplayListed + 6 {
		listed = append(listed, item(t, map[string]any{"text/plain": fmt.Sprint(i)}))
	}

	tests := []struct {
		name  string
		items []api.DisplayItem
		// images is how many image contents go out, resources how many
		// embedded resources.
		images, resources int
		lines             []string
		notes             map[int]string // display index: image/png note in the structured content
	}{{
		name:   "all images over the total",
		items:  big,
		images: 4,
		lines:  []string{"[4] image/png left out: 939.4 KiB of base64 would take this result's images past the cap of 4 MiB in all (3.7 MiB already); text/plain: <Figure>"},
		notes:  map[int]string{3: "(sent as image content 4)", 4: "(left out of this tool result: 939.4 KiB of base64 would take"},
	}, {
		name:   "too many images",
		items:  many,
		images: maxImages,
		lines:  []string{"[16] image/png left out: this result already has 16 images, the most it may carry; text/plain: <Figure>"},
		notes:  map[int]string{15: "(sent as image content 16)", 16: "(left out of this tool result: this result already has 16 images"},
	}, {
		name:  "image too wide",
		items: []api.DisplayItem{imageItem(encodePNG(t, image.NewGray(image.Rect(0, 0, maxImageSide+1, 1))))},
		lines: []string{"[0] image/png left out: 8001×1 px is over the cap of 8000 px a side, which model APIs refuse; text/plain: <Figure>"},
		notes: map[int]string{0: "(left out of this tool result: 8001×1 px"},
	}, {
		name:  "not an image",
		items: []api.DisplayItem{imageItem([]byte("GIF89a, not a PNG"))},
		lines: []string{"[0] image/png left out: it is not a valid PNG image; text/plain: <Figure>"},
		notes: map[int]string{0: "(left out of this tool result: it is not a valid PNG image)"},
	}, {
		name:   "PNG over the cap falls back to JPEG",
		items:  []api.DisplayItem{item(t, map[string]any{"image/png": noisePNG(t, 1100, 1000, 9), "image/jpeg": jpg.Bytes(), "text/plain": "<Figure>"})},
		images: 1,
		lines:  []string{"[0] image/jpeg 4×4 px, " + fmtBytes(int64(jpg.Len())) + ": sent as image content 1; image/png left out: 1100×1000 px, 1.4 MiB of base64, is over the cap of 1 MiB per image; text/plain: <Figure>"},
	}, {
		name:   "HTML over the cap falls back to text",
		items:  []api.DisplayItem{item(t, map[string]any{"text/html": strings.Repeat("<td>1</td>", 30<<10), "text/plain": "   a\n0  1"})},
		lines:  []string{`[0] text/html left out: 300 KiB is over the cap of 256 KiB per HTML or SVG item; text/plain, 9 B: sent as the text "display[0] text/plain"`},
		images: 0,
	}, {
		name:      "HTML over the total",
		items:     pages,
		resources: 4,
		lines:     []string{"[4] text/html left out: 240 KiB would take this result's HTML and SVG past the cap of 1 MiB in all (960 KiB already); text/plain: <Page>"},
	}, {
		name:  "long Markdown shortened",
		items: []api.DisplayItem{item(t, map[string]any{"text/markdown": strings.Repeat("word ", 8<<10), "text/plain": "<Markdown>"})},
		lines: []string{`[0] text/markdown, 40 KiB: sent as the text "display[0] text/markdown" (shortened to 16.`},
	}, {
		name:  "too many items to list",
		items: listed,
		lines: []string{"[63] text/plain: 63", "[64-69] not described here or sent: the text describes at most 64 items"},
	}, {
		name: "JSON, SVG and what the sandbox dropped",
		items: []api.DisplayItem{
			item(t, map[string]any{"application/json": json.RawMessage(`{"a":[1,2]}`), "text/plain": "{'a': [1, 2]}"}),
			// As the daemon returns it: the PNG that was not one dropped
			// by its own Collector.
			collected(t, runner.DefaultLimits(), `{"type":"display","data":{"image/svg+xml":"<svg/>","text/latex":"$x$","text/plain":"<Circle>","image/png":"`+
				base64.StdEncoding.EncodeToString([]byte("GIF89a, not a PNG"))+`"}}`)[0],
		},
		resources: 1,
		lines: []string{
			`[0] application/json, 29 B: sent as the text "display[0] application/json"`,
			"[1] image/svg+xml, 6 B: sent as the embedded resource cellblock://runs/r-1/display/1.svg; text/plain: <Circle>; in structuredContent only: text/latex; " +
				"the sandbox dropped image/png of 26 B (content does not start with the image/png signature)",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := renderDisplay("r-1", tt.items)
			text := strings.Join(out.lines, "\n")
			mustContain(t, text, tt.lines...)
			images, resources, imageBytes, resourceBytes, textBytes := 0, 0, 0, 0, 0
			for _, c := range contentsOf(t, out.content) {
				switch c.Type {
				case "image":
					images++
					imageBytes += len(c.Data)
					if len(c.Data) > maxImageBase64 {
						t.Errorf("an image of %d bytes of base64 went out", len(c.Data))
					}
				case "resource":
					resources++
					resourceBytes += len(c.Resource.Text)
				case "text":
					textBytes += len(c.Text)
				}
			}
			if images != tt.images || resources != tt.resources {
				t.Errorf("%d images and %d resources went out, want %d and %d", images, resources, tt.images, tt.resources)
			}
			if imageBytes > maxImagesBase64 || resourceBytes > maxResourcesBytes || textBytes > maxDisplayTextTotal+1024 {
				t.Errorf("the result carries %d bytes of images, %d of resources and %d of text", imageBytes, resourceBytes, textBytes)
			}
			if len(out.items) != len(tt.items) {
				t.Fatalf("%d structured items, want %d", len(out.items), len(tt.items))
			}
			for i, d := range out.items {
				for _, mime := range []string{"image/png", "image/jpeg"} {
					if _, ok := d.Data[mime]; ok && !strings.HasPrefix(dataString(t, d, mime), "(") {
						t.Errorf("structured display[%d] %s still holds the image's base64", i, mime)
					}
				}
			}
			for i, want := range tt.notes {
				if got := dataString(t, out.items[i], "image/png"); !strings.HasPrefix(got, want) {
					t.Errorf("structured display[%d] image/png = %q, want %q...", i, got, want)
				}
			}
			// The items given are left as they were.
			for i, d := range tt.items {
				if s, ok := d.Data["image/png"]; ok && strings.HasPrefix(string(s), `"(`) {
					t.Errorf("display[%d] of the daemon's result was changed", i)
				}
			}
		})
	}
}

// collected is the display the daemon returns for these runner frames:
// each goes through the daemon's own Collector (package runner) under
// limits l, and out as package runs hands a result to the API. Tests of
// what the sandbox says it dropped build their items so, in the shape the
// daemon really produces.
func collected(t *testing.T, l runner.Limits, frames ...string) []api.DisplayItem {
	t.Helper()
	c := runner.NewCollector(l)
	for _, f := range frames {
		c.Handle([]byte(f))
	}
	return c.Result().Display
}

// TestDisplayDroppedNotes: what the daemon's Collector says it dropped
// from an item reaches the model as MIME type, size and reason, on the
// item's line, however much of it there is and whatever the jail wrote.
func TestDisplayDroppedNotes(t *testing.T) {
	small := runner.DefaultLimits()
	small.DisplayItemBytes = 1024
	one := runner.DefaultLimits()
	one.DisplayItems = 1
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf(`{"mime":"x/m%d","bytes":%d,"reason":"runner note %d"}`, i, i, i))
	}
	for _, tt := range []struct {
		name   string
		items  []api.DisplayItem
		lines  []string
		absent []string
	}{{
		name:  "item over the cap",
		items: collected(t, small, `{"type":"display","data":{"text/html":"`+strings.Repeat("h", 2000)+`","text/plain":"<Big>"}}`),
		lines: []string{"[0] text/plain: <Big>; the sandbox dropped text/html of 2.0 KiB (item over display_item_bytes (1024))"},
	}, {
		name: "the runner's own notes, one of them hostile",
		items: collected(t, runner.DefaultLimits(), `{"type":"display","data":{"text/plain":"<Raises>"},"metadata":{"cellblock":{"dropped":[`+
			`{"mime":"text/html","bytes":0,"reason":"_repr_html_ raised RuntimeError: no html today"},`+
			`{"mime":"text/markdown","bytes":5,"reason":"line one\nline two `+strings.Repeat("z", 400)+`"}]}}}`),
		lines: []string{"[0] text/plain: <Raises>; the sandbox dropped text/html of 0 B (_repr_html_ raised RuntimeError: no html today), " +
			"text/markdown of 5 B (line one line two " + strings.Repeat("z", 200-len("line one line two ")) + "...)\n"},
	}, {
		name:  "more notes than the line lists",
		items: collected(t, runner.DefaultLimits(), `{"type":"display","data":{"text/plain":"x"},"metadata":{"cellblock":{"dropped":[`+strings.Join(many, ",")+`]}}}`),
		lines: []string{"x/m7 of 7 B (runner note 7), and 24 more (structuredContent's metadata.cellblock.dropped lists them)\n"},
	}, {
		name: "items dropped whole",
		items: collected(t, one, `{"type":"display","data":{"text/plain":"first"}}`, `{"type":"display","data":{"text/plain":"second"}}`,
			`{"type":"done","exit_code":0,"display_dropped":3}`),
		lines:  []string{"[0] text/plain: first\n", "[1] text/plain: [cellblock: 4 more display items dropped"},
		absent: []string{"the sandbox dropped"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.items) == 0 {
				t.Fatal("the Collector kept no item")
			}
			// The notes are there, in the shape the API documents.
			var notes api.DisplayNotes
			if err := json.Unmarshal(tt.items[0].Metadata[api.DisplayNotesKey], &notes); tt.absent == nil && (err != nil || len(notes.Dropped) == 0) {
				t.Fatalf("metadata %s does not decode as api.DisplayNotes: %v", tt.items[0].Metadata, err)
			}
			text := strings.Join(renderDisplay("r-1", tt.items).lines, "\n") + "\n"
			mustContain(t, text, tt.lines...)
			for _, a := range append(tt.absent, `{"`, `"mime"`, `[{`) {
				if strings.Contains(text, a) {
					t.Errorf("the text holds %q:\n%s", a, text)
				}
			}
		})
	}
}
