package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// Plots drawn in a jail come back as display items: through the API, the
// CLI and the MCP tool, with real matplotlib. PyPI is out of reach, so the
// matplotlib is Debian's (python3-matplotlib, built for Debian's
// /usr/bin/python3), packed with what it requires into wheels for a local
// wheelhouse by testdata/debwheels.py, with the shared libraries the jail's
// rootfs lacks bundled into the wheels.

// debianPython is the interpreter Debian's python3-matplotlib is built for.
const debianPython = "/usr/bin/python3"

// matplotlibPackages are the Debian packages the matplotlib tests need:
// the distributions to pack, and the tool that points the packed extension
// modules at their bundled libraries. scripts/install-deps.sh installs
// them (make deps).
var matplotlibPackages = []string{"python3-matplotlib", "patchelf"}

// mplFixture is what every matplotlib test shares, made once per test
// binary: a rootfs store whose default is Debian's Python, and the
// wheelhouse of Debian's matplotlib built against that rootfs.
type mplFixture struct {
	store   string // a state directory's rootfs store, to copy (cp -al)
	wheels  string // the wheelhouse directory
	summary debWheels
}

// debWheels is debwheels.py's summary.
type debWheels struct {
	Python string `json:"python"`
	Wheels []struct {
		Name     string   `json:"name"`
		Version  string   `json:"version"`
		File     string   `json:"file"`
		Tag      string   `json:"tag"`
		Requires []string `json:"requires"`
		Bundled  []string `json:"bundled"`
	} `json:"wheels"`
	Notes []string `json:"notes"`
}

var (
	mplOnce    sync.Once
	mplShared  *mplFixture
	mplSkipWhy string
	mplErr     error
)

// matplotlibFixture makes the fixture on first use; it skips the test
// when Debian's matplotlib or patchelf cannot be installed, and fails it
// on anything else.
func matplotlibFixture(t *testing.T) *mplFixture {
	t.Helper()
	requireRoot(t)
	mplOnce.Do(func() { mplShared, mplSkipWhy, mplErr = makeMatplotlibFixture(t) })
	if mplSkipWhy != "" {
		t.Skip(mplSkipWhy)
	}
	if mplErr != nil {
		t.Fatal(mplErr)
	}
	return mplShared
}

// makeMatplotlibFixture returns the fixture, or why the tests must be
// skipped, or what went wrong. It runs inside a sync.Once, so it does not
// end the test itself (t is only for logs).
func makeMatplotlibFixture(t *testing.T) (*mplFixture, string, error) {
	if why := installMatplotlibPackages(t); why != "" {
		return nil, why, nil
	}
	if out, err := exec.Command(debianPython, "-c", "import matplotlib").CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("python3-matplotlib is installed but %s cannot import it: %v\n%s", debianPython, err, out)
	}
	dir, err := os.MkdirTemp("", "cellblock-it-mpl-")
	if err != nil {
		return nil, "", err
	}
	afterSuite(func() { os.RemoveAll(dir) })
	// The build jail's user reads the wheelhouse.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, "", err
	}
	f := &mplFixture{store: filepath.Join(dir, "state", "rootfs"), wheels: filepath.Join(dir, "wheels")}

	// The rootfs first: what it holds is what the wheels need not bundle.
	start := time.Now()
	cellblockd := filepath.Join(binDir, "cellblockd")
	if _, err := os.Stat(cellblockd); err != nil {
		return nil, "", fmt.Errorf("%s is missing: run `make build` first (%v)", cellblockd, err)
	}
	if out, err := exec.Command(cellblockd, "rootfs", "import", "--python", debianPython,
		"--state-dir", filepath.Join(dir, "state")).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("import %s as a rootfs: %v\n%s", debianPython, err, out)
	}
	var meta struct {
		Libraries []string `json:"libraries"`
	}
	b, err := os.ReadFile(filepath.Join(f.store, "default", "meta.json"))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil || len(meta.Libraries) == 0 {
		return nil, "", fmt.Errorf("the rootfs's libraries (meta.json): %v %s", err, b)
	}
	have := filepath.Join(dir, "rootfs-libraries")
	if err := os.WriteFile(have, []byte(strings.Join(meta.Libraries, "\n")+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	rootfsTime := time.Since(start)

	start = time.Now()
	cmd := exec.Command(debianPython, filepath.Join(repoRoot, "integration", "testdata", "debwheels.py"),
		"--out", f.wheels, "--have", have, "matplotlib")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("debwheels.py: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(out, &f.summary); err != nil {
		return nil, "", fmt.Errorf("debwheels.py's summary %q: %v", out, err)
	}
	t.Logf("rootfs from %s in %v (it holds %d libraries); %d wheels of Python %s in %v:",
		debianPython, rootfsTime.Round(time.Millisecond), len(meta.Libraries), len(f.summary.Wheels), f.summary.Python, time.Since(start).Round(time.Millisecond))
	for _, w := range f.summary.Wheels {
		t.Logf("  %s  requires %v  bundles %v", w.File, w.Requires, w.Bundled)
	}
	for _, n := range f.summary.Notes {
		t.Logf("  note: %s", n)
	}
	return f, "", nil
}

// installMatplotlibPackages installs the missing matplotlibPackages with
// scripts/install-deps.sh (which has them); it returns why the tests
// cannot run when that fails.
func installMatplotlibPackages(t *testing.T) string {
	var missing []string
	for _, p := range matplotlibPackages {
		out, _ := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Sprintf("needs the Debian packages %v, and this host has no apt-get", missing)
	}
	t.Logf("installing %v (scripts/install-deps.sh)", missing)
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "install-deps.sh")).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("needs the Debian packages %v, which could not be installed: %v\n%s", missing, err, out)
	}
	return ""
}

// matplotlibDaemon starts a daemon whose default Python is Debian's and
// which installs dependencies from the fixture's wheelhouse only.
func matplotlibDaemon(t *testing.T) (*Daemon, *mplFixture) {
	t.Helper()
	f := matplotlibFixture(t)
	state := searchableDir(t, "cellblock-it-state-")
	if out, err := exec.Command("cp", "-al", f.store, filepath.Join(state, "rootfs")).CombinedOutput(); err != nil {
		t.Fatalf("copy the rootfs store: %v\n%s", err, out)
	}
	d := startDaemon(t, "--state-dir", state, "--python", debianPython, "--no-index", "--find-links", f.wheels)
	return d, f
}

// plotCode draws two figures: one shown with plt.show(), one left open
// at the end; a blank figure between them is never sent. Its value is the
// backend in use.
const plotCode = `import matplotlib
import matplotlib.pyplot as plt
plt.figure(figsize=(4, 3), dpi=100)
plt.plot([0, 1, 2, 3], [0, 1, 4, 9], color="red", linewidth=3)
plt.title("shown")
plt.show()
plt.figure()
fig = plt.figure(figsize=(5, 2), dpi=100)
plt.bar(["a", "b"], [3, 5], color="blue")
matplotlib.get_backend()
`

// plotFigures are plotCode's figures, in order: their size in pixels
// and a colour that only what was drawn has.
var plotFigures = []struct {
	w, h int
	ink  color.RGBA
}{
	{400, 300, color.RGBA{255, 0, 0, 255}}, // the red line
	{500, 200, color.RGBA{0, 0, 255, 255}}, // the blue bars
}

// plotProblems lists what is wrong with display items that should be
// plotCode's figures: every item an image/png of the expected size that
// is a real, decodable PNG with something drawn on it, plus text/plain.
func plotProblems(items []api.DisplayItem) []string {
	var bad []string
	if len(items) != len(plotFigures) {
		bad = append(bad, fmt.Sprintf("%d display items, want %d (the blank figure skipped)", len(items), len(plotFigures)))
	}
	for i, it := range items {
		if i >= len(plotFigures) {
			break
		}
		if _, ok := it.Data["text/plain"]; !ok {
			bad = append(bad, fmt.Sprintf("item %d has no text/plain: %v", i, mimeTypes(it)))
		}
		img, err := decodePNGItem(it.Data["image/png"])
		if err != nil {
			bad = append(bad, fmt.Sprintf("item %d: %v (types %v, metadata %s)", i, err, mimeTypes(it), it.Metadata))
			continue
		}
		if p := plotProblem(img, i); p != "" {
			bad = append(bad, fmt.Sprintf("item %d: %s", i, p))
		}
	}
	return bad
}

func mimeTypes(it api.DisplayItem) []string {
	var types []string
	for k := range it.Data {
		types = append(types, k)
	}
	return types
}

// decodePNGItem reads an image/png display value: a base64 string of a
// PNG whose IHDR is sound, decoded in full (checksums and all).
func decodePNGItem(raw json.RawMessage) (image.Image, error) {
	if raw == nil {
		return nil, fmt.Errorf("no image/png")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("image/png is not a string: %s", raw)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("image/png is not base64: %v", err)
	}
	return decodePNG(b)
}

func decodePNG(b []byte) (image.Image, error) {
	const sig = "\x89PNG\r\n\x1a\n"
	if len(b) < 33 || string(b[:8]) != sig || string(b[12:16]) != "IHDR" {
		return nil, fmt.Errorf("not a PNG (starts %q)", b[:min(len(b), 16)])
	}
	w, h := binary.BigEndian.Uint32(b[16:20]), binary.BigEndian.Uint32(b[20:24])
	if w == 0 || h == 0 || w > 8000 || h > 8000 {
		return nil, fmt.Errorf("IHDR says %dx%d", w, h)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("PNG (IHDR %dx%d) does not decode: %v", w, h, err)
	}
	if bd := img.Bounds(); bd.Dx() != int(w) || bd.Dy() != int(h) {
		return nil, fmt.Errorf("decoded %v, IHDR says %dx%d", bd, w, h)
	}
	return img, nil
}

// plotProblem says what is wrong with img as plotCode's figure i: its
// size, or that what was drawn on it is not there.
func plotProblem(img image.Image, i int) string {
	want := plotFigures[i]
	bd := img.Bounds()
	if bd.Dx() != want.w || bd.Dy() != want.h {
		return fmt.Sprintf("%dx%d, want %dx%d", bd.Dx(), bd.Dy(), want.w, want.h)
	}
	ink, colours := 0, map[color.RGBA]bool{}
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			colours[c] = true
			if c == want.ink {
				ink++
			}
		}
	}
	// The line is some 4 pixels wide and 250 long; the bars are larger.
	if ink < 500 || len(colours) < 3 {
		return fmt.Sprintf("%d pixels of %v and %d colours in all: not what was drawn", ink, want.ink, len(colours))
	}
	return ""
}

// checkPlotResult checks a result of plotCode run as a cell with
// matplotlib as a dependency.
func checkPlotResult(t *testing.T, res *api.Result) {
	t.Helper()
	if res.Error != nil || res.ExitCode != 0 || res.Exception != nil {
		t.Fatalf("run failed: exit %d error %+v exception %+v\nstdout %q\nstderr %q", res.ExitCode, res.Error, res.Exception, res.Stdout, res.Stderr)
	}
	for _, p := range plotProblems(res.Display) {
		t.Error(p)
	}
	if res.Value == nil || res.Value.Repr != "'module://cellblock._mpl_backend'" {
		t.Errorf("value %+v, want cellblock's backend", res.Value)
	}
	got := map[string]bool{}
	if res.Environment != nil {
		for _, p := range res.Environment.Packages {
			got[strings.ToLower(p.Name)] = true
		}
	}
	for _, want := range []string{"matplotlib", "numpy", "pillow", "kiwisolver", "contourpy"} {
		if !got[want] {
			t.Errorf("environment %+v lacks %s", res.Environment, want)
		}
	}
}

// TestMatplotlib draws plots with Debian's matplotlib in a jail, through
// the API, the CLI and the MCP tool.
func TestMatplotlib(t *testing.T) {
	d, _ := matplotlibDaemon(t)
	req := &api.RunRequest{Code: plotCode, Mode: api.ModeCell, Dependencies: []string{"matplotlib"}}

	t.Run("api", func(t *testing.T) {
		res := run(t, d, req)
		checkPlotResult(t, res)
		t.Logf("environment %s built in %d ms; run %d ms, peak memory %d MiB",
			res.Environment.ID, res.Phases.EnvUs/1000, res.DurationMs, res.MemoryPeakBytes>>20)
		// The cached environment, and numpy's bundled BLAS on the way.
		res = runOK(t, d, &api.RunRequest{Mode: api.ModeCell, Dependencies: []string{"matplotlib"},
			Code: "import numpy as np\nround(float(np.linalg.det(np.array([[2.0, 1.0], [1.0, 3.0]]))), 9)"})
		if !res.Environment.CacheHit || res.Value == nil || res.Value.Repr != "5.0" {
			t.Errorf("numpy in the cached environment: value %+v, environment %+v", res.Value, res.Environment)
		}
	})

	t.Run("control", func(t *testing.T) {
		// With matplotlib's own Agg backend (the runner leaves a
		// request's MPLBACKEND alone) nothing is sent: the checks above
		// would see that.
		res := runOK(t, d, &api.RunRequest{Code: plotCode, Mode: api.ModeCell, Dependencies: []string{"matplotlib"},
			Env: map[string]string{"MPLBACKEND": "agg"}})
		if len(res.Display) != 0 || len(plotProblems(res.Display)) == 0 {
			t.Errorf("with MPLBACKEND=agg: display %v, problems %v", mimeTypesOf(res.Display), plotProblems(res.Display))
		}
	})

	t.Run("cli", func(t *testing.T) {
		out, errs, code := cli(t, d, "", "run", "--cell", "--json", "--with", "matplotlib", "-c", plotCode)
		if code != 0 {
			t.Fatalf("exit %d stderr %q", code, errs)
		}
		var res api.Result
		mustJSON(t, out, &res)
		checkPlotResult(t, &res)
		// Without --json the CLI names the items.
		out, errs, code = cli(t, d, "", "run", "--cell", "--with", "matplotlib", "-c", plotCode)
		if code != 0 || strings.Count(out+errs, "image/png") != len(plotFigures) {
			t.Errorf("without --json: exit %d stdout %q stderr %q", code, out, errs)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		c := mcpStdio(t, d.Socket, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res := mcpCall(t, ctx, c, "run_python", map[string]any{"code": plotCode, "dependencies": []string{"matplotlib"}}, nil)
		if res.IsError {
			t.Fatalf("isError: %s", mcpText(res))
		}
		var images []mcp.ImageContent
		for _, ct := range res.Content {
			if img, ok := ct.(mcp.ImageContent); ok {
				images = append(images, img)
			}
		}
		if len(images) != len(plotFigures) {
			t.Fatalf("%d image contents, want %d; text:\n%s", len(images), len(plotFigures), mcpText(res))
		}
		for i, im := range images {
			if im.MIMEType != "image/png" {
				t.Errorf("image %d is %s", i, im.MIMEType)
			}
			b, err := base64.StdEncoding.DecodeString(im.Data)
			if err != nil {
				t.Errorf("image %d: %v", i, err)
				continue
			}
			img, err := decodePNG(b)
			if err != nil {
				t.Errorf("image %d: %v", i, err)
				continue
			}
			if p := plotProblem(img, i); p != "" {
				t.Errorf("image %d: %s", i, p)
			}
		}
		if !strings.Contains(mcpText(res), "module://cellblock._mpl_backend") {
			t.Errorf("the text lacks the cell's value:\n%s", mcpText(res))
		}
	})
}

func mimeTypesOf(items []api.DisplayItem) [][]string {
	var all [][]string
	for _, it := range items {
		all = append(all, mimeTypes(it))
	}
	return all
}

// swatchCode defines an object with _repr_png_ that makes a real PNG of
// one colour with zlib and struct, displays one and leaves another as the
// cell's value.
const swatchCode = `import struct, zlib
import cellblock

class Swatch:
    def __init__(self, w, h, rgb):
        self.w, self.h, self.rgb = w, h, rgb

    def __repr__(self):
        return "Swatch(%dx%d)" % (self.w, self.h)

    def _repr_png_(self):
        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
        rows = b"".join(b"\x00" + bytes(self.rgb) * self.w for _ in range(self.h))
        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

cellblock.display(Swatch(3, 2, (255, 0, 0)))
Swatch(7, 5, (0, 128, 255))
`

// TestDisplayPNGObject: a stdlib-only object with _repr_png_, passed to
// cellblock.display and left as a cell's value, comes back as image/png
// (the very pixels it drew) with its repr as text/plain.
func TestDisplayPNGObject(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: swatchCode, Mode: api.ModeCell})
	want := []struct {
		text string
		w, h int
		c    color.RGBA
	}{
		{"Swatch(3x2)", 3, 2, color.RGBA{255, 0, 0, 255}},
		{"Swatch(7x5)", 7, 5, color.RGBA{0, 128, 255, 255}},
	}
	if len(res.Display) != len(want) {
		t.Fatalf("display %v, want %d items", mimeTypesOf(res.Display), len(want))
	}
	for i, w := range want {
		it := res.Display[i]
		if len(it.Data) != 2 {
			t.Errorf("item %d has %v, want image/png and text/plain", i, mimeTypes(it))
		}
		var text string
		if err := json.Unmarshal(it.Data["text/plain"], &text); err != nil || text != w.text {
			t.Errorf("item %d text/plain %s, want %q", i, it.Data["text/plain"], w.text)
		}
		img, err := decodePNGItem(it.Data["image/png"])
		if err != nil {
			t.Errorf("item %d: %v", i, err)
			continue
		}
		if bd := img.Bounds(); bd.Dx() != w.w || bd.Dy() != w.h {
			t.Errorf("item %d is %v, want %dx%d", i, bd, w.w, w.h)
		}
		for y := 0; y < w.h; y++ {
			for x := 0; x < w.w; x++ {
				if got := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA); got != w.c {
					t.Fatalf("item %d pixel (%d,%d) is %v, want %v", i, x, y, got, w.c)
				}
			}
		}
	}
	if res.Value == nil || res.Value.Type != "__main__.Swatch" || res.Value.Repr != "Swatch(7x5)" {
		t.Errorf("value %+v", res.Value)
	}
}
