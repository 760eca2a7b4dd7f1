package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"os"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

func TestArtifactURI(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, name := range []string{"chart.png", "sub dir/r#1?.csv", "ü/x"} {
		uri := artifactURI(sum, name)
		s, n, ok := parseArtifactURI(uri)
		if !ok || s != sum || n != name {
			t.Errorf("%q: %s -> %q %q %v", name, uri, s, n, ok)
		}
	}
	for _, bad := range []string{"cellblock://artifacts/" + sum, "cellblock://artifacts/xyz/a", "cellblock://runs/" + sum + "/a",
		"cellblock://artifacts/" + strings.ToUpper(sum) + "/a", "cellblock://artifacts/" + sum + "/%zz"} {
		if _, _, ok := parseArtifactURI(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// pngOf is a small real PNG.
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func filesTestInfo() api.Info {
	info := testInfo()
	info.Files = &api.FileCaps{InCount: 4, InBytes: 1 << 20, OutCount: 10, OutFileBytes: 1 << 20, OutBytes: 4 << 20, InlineBytes: 64 << 10}
	return info
}

// TestRunPythonFiles: files go in as the model gave them; files the code
// wrote under /work/out come back as resource links, small text also
// embedded, images also as image content; the connection that got them
// reads them with resources/read, and no other connection can.
func TestRunPythonFiles(t *testing.T) {
	fd := startFakeDaemonFor(t, filesTestInfo())
	me := uint32(os.Getuid())
	img := pngOf(t, 20, 10)
	csv := "region,total\nnorth,3\n"
	var pngSum, csvSum string
	fd.run = func(_ context.Context, req *api.RunRequest, _ func(string, string)) *api.Result {
		if req.ReturnFiles != api.ReturnFilesInline || len(req.Files) != 2 || req.Files[1].Encoding != api.EncodingBase64 {
			return &api.Result{Stderr: "unexpected request"}
		}
		pngSum = fd.AddArtifact(me, img)
		csvSum = fd.AddArtifact(me, []byte(csv))
		text := csv
		return &api.Result{Files: []api.File{
			{Path: "chart.png", Size: int64(len(img)), SHA256: pngSum, MIME: "image/png"},
			{Path: "tables/sum.csv", Size: int64(len(csv)), SHA256: csvSum, MIME: "text/csv", Content: &text},
		}, FilesSkipped: []api.FileSkipped{{Path: "secret", Reason: "a symbolic link (never followed)"}}}
	}
	srv := newServer(t, fd)
	c := connect(t, srv, protocols[0].opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := callTool(t, ctx, c, ToolRunPython, map[string]any{
		"code": "...",
		"files": []map[string]any{
			{"path": "sales.csv", "content": "region,amount\nnorth,3\n"},
			{"path": "logo.png", "content": base64.StdEncoding.EncodeToString(img), "encoding": "base64"},
		},
	})
	if res.IsError {
		t.Fatalf("error: %s", resultText(res))
	}
	text := resultText(res)
	mustContain(t, text, "files under /work/out: 2 returned, 1 not", "chart.png", "image content 1",
		"tables/sum.csv", "its text embedded", "secret: not returned: a symbolic link")
	var links []mcp.ResourceLink
	var embedded []mcp.EmbeddedResource
	var images []mcp.ImageContent
	for _, ct := range res.Content {
		switch v := ct.(type) {
		case mcp.ResourceLink:
			links = append(links, v)
		case mcp.EmbeddedResource:
			embedded = append(embedded, v)
		case mcp.ImageContent:
			images = append(images, v)
		}
	}
	if len(links) != 2 || links[0].URI != artifactURI(pngSum, "chart.png") || links[1].MIMEType != "text/csv" {
		t.Errorf("links %+v", links)
	}
	if len(embedded) != 1 || embedded[0].Resource.(mcp.TextResourceContents).Text != csv {
		t.Errorf("embedded %+v", embedded)
	}
	if len(images) != 1 || images[0].MIMEType != "image/png" || images[0].Data != base64.StdEncoding.EncodeToString(img) {
		t.Errorf("images: %d", len(images))
	}
	got := fd.lastRequest(t)
	if d, _ := got.Files[1].Data(); !bytes.Equal(d, img) || got.Files[0].Content != "region,amount\nnorth,3\n" {
		t.Errorf("the files sent: %+v", got.Files)
	}

	// resources/read, by the connection that got them.
	read := func(c interface {
		ReadResource(context.Context, mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error)
	}, uri string) (*mcp.ReadResourceResult, error) {
		var req mcp.ReadResourceRequest
		req.Params.URI = uri
		return c.ReadResource(ctx, req)
	}
	rr, err := read(c, links[0].URI)
	if err != nil {
		t.Fatal(err)
	}
	if blob, ok := rr.Contents[0].(mcp.BlobResourceContents); !ok || blob.Blob != base64.StdEncoding.EncodeToString(img) || blob.MIMEType != "image/png" {
		t.Errorf("the image: %+v", rr.Contents)
	}
	rr, err = read(c, links[1].URI)
	if err != nil {
		t.Fatal(err)
	}
	if txt, ok := rr.Contents[0].(mcp.TextResourceContents); !ok || txt.Text != csv {
		t.Errorf("the CSV: %+v", rr.Contents)
	}
	if _, err := read(c, artifactURI(strings.Repeat("0", 64), "x")); err == nil {
		t.Error("an artifact never returned was read")
	}
	// Another connection of the same server, same uid: not its files.
	other := connect(t, srv, protocols[0].opts...)
	if _, err := read(other, links[1].URI); err == nil || !strings.Contains(err.Error(), "not returned by a run_python call of this connection") {
		t.Errorf("another connection read the CSV: %v", err)
	}
	// Templates are listed.
	tl, err := c.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
	if err != nil || len(tl.ResourceTemplates) != 1 || tl.ResourceTemplates[0].URITemplate.Raw() != artifactTemplate {
		t.Errorf("templates: %+v %v", tl, err)
	}
}

// TestRunPythonFilesCaps: an image over the cap goes as a link only,
// saying why; files past the ones listed are counted.
func TestRunPythonFilesCaps(t *testing.T) {
	fd := startFakeDaemonFor(t, filesTestInfo())
	me := uint32(os.Getuid())
	fd.run = func(_ context.Context, req *api.RunRequest, _ func(string, string)) *api.Result {
		var files []api.File
		big := make([]byte, maxImageBase64) // over the cap as base64
		copy(big, "\x89PNG\r\n\x1a\n")
		files = append(files, api.File{Path: "huge.png", Size: int64(len(big)), SHA256: fd.AddArtifact(me, big), MIME: "image/png"})
		for i := range maxFilesListed + 3 {
			files = append(files, api.File{Path: "f" + strings.Repeat("x", i), Size: 1, SHA256: strings.Repeat("1", 64), MIME: "text/plain"})
		}
		return &api.Result{Files: files}
	}
	c := connect(t, newServer(t, fd), protocols[0].opts...)
	res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "x"})
	text := resultText(res)
	mustContain(t, text, "huge.png", "not sent as an image", "over the cap", "4 more, each a resource link")
	for _, ct := range res.Content {
		if _, ok := ct.(mcp.ImageContent); ok {
			t.Error("an image over the cap was sent")
		}
	}
}

// TestRunPythonDescribesFiles: the model is told where results go.
func TestRunPythonDescribesFiles(t *testing.T) {
	info := filesTestInfo()
	tool := runPythonTool(&info, nil)
	mustContain(t, tool.Description, "/work/out", "resources/read", `"files"`)
	mustContain(t, string(tool.RawInputSchema), `"files"`, "base64", "At most 4 files of 1 MiB in all")
	mustContain(t, instructions, "/work/out")
}

// TestRunPythonFilesRefused: bad files are refused before the daemon is
// asked, naming the argument.
func TestRunPythonFilesRefused(t *testing.T) {
	fd := startFakeDaemonFor(t, filesTestInfo())
	c := connect(t, newServer(t, fd), protocols[0].opts...)
	for _, files := range []any{
		[]map[string]any{{"path": "../x", "content": "a"}},
		[]map[string]any{{"path": "out/x", "content": "a"}},
		[]map[string]any{{"path": "x", "content": "@@", "encoding": "base64"}},
		"not an array",
	} {
		res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "x", "files": files})
		if !res.IsError || !strings.Contains(resultText(res), "files") {
			t.Errorf("%v: %s", files, resultText(res))
		}
	}
	if n := len(fd.Requests()); n != 0 {
		t.Errorf("%d refused calls reached the daemon", n)
	}
}

// TestCheckEnvironmentFiles: the caps on files are in check_environment.
func TestCheckEnvironmentFiles(t *testing.T) {
	info := filesTestInfo()
	info.Files.StoreTTLSeconds = 86400
	fd := startFakeDaemonFor(t, info)
	c := connect(t, newServer(t, fd), protocols[0].opts...)
	res := callTool(t, context.Background(), c, ToolCheckEnvironment, map[string]any{})
	mustContain(t, resultText(res), "up to 4 files, 1 MiB in all, under /work", "/work/out comes back, up to 10 files")
}

// TestArtifactReadsNeedAConnection: over streamable HTTP, a client with
// an MCP session reads the files its calls returned; a stateless one
// (protocol 2026-07-28) reads none, not even by a hash the daemon would
// serve this server's uid, and is told why; over stdio reads work.
func TestArtifactReadsNeedAConnection(t *testing.T) {
	fd := startFakeDaemonFor(t, filesTestInfo())
	me := uint32(os.Getuid())
	csv := "region,total\nnorth,3\n"
	sum := fd.AddArtifact(me, []byte(csv))
	other := fd.AddArtifact(me, []byte("another client's result"))
	fd.run = func(context.Context, *api.RunRequest, func(string, string)) *api.Result {
		return &api.Result{Files: []api.File{{Path: "sum.csv", Size: int64(len(csv)), SHA256: sum, MIME: "text/csv"}}}
	}
	read := func(c *mcpclient.Client, uri string) (*mcp.ReadResourceResult, error) {
		var req mcp.ReadResourceRequest
		req.Params.URI = uri
		return c.ReadResource(context.Background(), req)
	}
	for _, tc := range []struct {
		name     string
		client   func() *mcpclient.Client
		readable bool
	}{
		{"http with a session", func() *mcpclient.Client { return serveHTTP(t, newServer(t, fd), protocols[0].opts...) }, true},
		{"http stateless", func() *mcpclient.Client { return serveHTTP(t, newServer(t, fd)) }, false},
		{"stdio", func() *mcpclient.Client { return serveStdioPipes(t, newServer(t, fd)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.client()
			res := callTool(t, context.Background(), c, ToolRunPython, map[string]any{"code": "..."})
			if res.IsError {
				t.Fatalf("run_python: %s", resultText(res))
			}
			rr, err := read(c, artifactURI(sum, "sum.csv"))
			switch {
			case tc.readable && err != nil:
				t.Errorf("the file its call returned: %v", err)
			case tc.readable:
				if txt, ok := rr.Contents[0].(mcp.TextResourceContents); !ok || txt.Text != csv {
					t.Errorf("the file its call returned: %+v", rr.Contents)
				}
			case err == nil:
				t.Errorf("a stateless client read an artifact: %+v", rr.Contents)
			default:
				mustContain(t, err.Error(), "MCP connection that keeps state", "2026-07-28", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
				mustContain(t, resultText(res), "without an MCP session")
			}
			if _, err := read(c, artifactURI(other, "x")); err == nil {
				t.Error("an artifact no call of this client returned was read")
			}
		})
	}
}
