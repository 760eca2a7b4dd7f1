package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"net/url"
	"path"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/cellblock/cellblock/internal/api"
)

// Files in and out of run_python.
//
// "files" puts files under /work before the code runs. What the code
// writes under /work/out comes back in the result: every file as a
// resource link, cellblock://artifacts/SHA256/PATH, which resources/read
// serves from the daemon's artifact store; a small text file also as an
// embedded resource with its text, and a PNG or JPEG image under a cap
// also as image content.
//
// cellblock-mcp fetches artifacts from the daemon as its own uid, which
// the daemon lets read only what that uid's runs produced. On top of
// that, a connection may read only artifacts its own calls returned: one
// MCP client cannot read another's results, even by their hash. A call
// with no connection (streamable HTTP in the stateless protocol) has
// nothing to bind its reads to, and reads no artifact: any HTTP client
// of this server could otherwise read every artifact of its uid by hash.

const (
	// artifactScheme starts the URI of a run's file.
	artifactScheme = "cellblock://artifacts/"
	// artifactTemplate is the resource template of those URIs.
	artifactTemplate = artifactScheme + "{sha256}/{+name}"
	// maxEmbeddedText is the most text of one file embedded in a result,
	// maxEmbeddedTexts of all its files together.
	maxEmbeddedText  = 16 << 10
	maxEmbeddedTexts = 64 << 10
	// maxFileImages file images go in one result as image content, each
	// within maxImageBase64 and all within maxFileImagesBase64.
	maxFileImages       = 4
	maxFileImagesBase64 = 2 << 20
	// maxResourceRead is the largest artifact resources/read returns.
	maxResourceRead = 16 << 20
	// maxArtifactsPerConn bounds the artifacts a connection may read (the
	// most recent ones).
	maxArtifactsPerConn = 4096
	// maxFilesListed is how many files the text describes one by one.
	maxFilesListed = 64
)

// filesText is the tool description's paragraph on files.
func filesText() string {
	return `Files: pass input files in "files" (text, or base64 for binary); they are placed under /work, the working directory, before the code runs. To give the user a file (a chart, a cleaned CSV, a report), write it under /work/out (for example plt.savefig("out/chart.png") or df.to_csv("out/clean.csv")): every file there comes back as a resource link cellblock://artifacts/SHA256/PATH that resources/read returns, small text files also with their text, and PNG or JPEG images also as image content. Files elsewhere in /work are not returned. Do not invent other paths for results.`
}

// artifactURI is the resource URI of a run's file.
func artifactURI(sum, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return artifactScheme + sum + "/" + strings.Join(parts, "/")
}

// parseArtifactURI splits an artifact URI into its hash and name.
func parseArtifactURI(uri string) (sum, name string, ok bool) {
	rest, ok := strings.CutPrefix(uri, artifactScheme)
	if !ok {
		return "", "", false
	}
	sum, escaped, ok := strings.Cut(rest, "/")
	if !ok || len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return "", "", false
	}
	name, err := url.PathUnescape(escaped)
	if err != nil || name == "" {
		return "", "", false
	}
	return sum, name, true
}

// artifactRef is what a connection knows of an artifact it was given.
type artifactRef struct {
	mime string
	size int64
}

// artifactTable records, per connection, the artifacts its calls
// returned: those and no others it may read.
type artifactTable struct {
	mu    sync.Mutex
	conns map[string]*connArtifacts
}

type connArtifacts struct {
	refs  map[string]artifactRef // by SHA-256
	order []string               // oldest first
}

// connected is an OnRegisterSession hook: a connection the MCP server
// registered (one that initialized; over HTTP, with an id this server
// issued) may record artifacts, and no other.
func (t *artifactTable) connected(_ context.Context, cs server.ClientSession) {
	id := cs.SessionID()
	if id == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		t.conns = map[string]*connArtifacts{}
	}
	if t.conns[id] == nil {
		t.conns[id] = &connArtifacts{refs: map[string]artifactRef{}}
	}
}

// add records files for the connection conn, if it is registered (a
// call that names a connection the server never registered, or one that
// ended, records nothing).
func (t *artifactTable) add(conn string, files []api.File) {
	if conn == "" || len(files) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.conns[conn]
	if c == nil {
		return
	}
	for _, f := range files {
		if _, ok := c.refs[f.SHA256]; !ok {
			c.order = append(c.order, f.SHA256)
		}
		c.refs[f.SHA256] = artifactRef{mime: f.MIME, size: f.Size}
		for len(c.order) > maxArtifactsPerConn {
			delete(c.refs, c.order[0])
			c.order = c.order[1:]
		}
	}
}

// lookup reports whether conn was given sum, and what it is.
func (t *artifactTable) lookup(conn, sum string) (artifactRef, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.conns[conn]
	if c == nil {
		return artifactRef{}, false
	}
	ref, ok := c.refs[sum]
	return ref, ok
}

// disconnected is an OnUnregisterSession hook: the connection's records go.
func (t *artifactTable) disconnected(_ context.Context, cs server.ClientSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, cs.SessionID())
}

// connID is the MCP connection of a call, "" without one.
func connID(ctx context.Context) string {
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		return cs.SessionID()
	}
	return ""
}

// errArtifactNotFound is resources/read's answer for an artifact this
// connection was not given, does not exist, or has expired: the same
// for each.
var errArtifactNotFound = errors.New("no such resource: it was not returned by a run_python call of this connection, or it has expired")

// errNoConnection is resources/read's answer for an artifact asked for
// without an MCP session.
var errNoConnection = errors.New("cellblock artifacts are read only over an MCP connection that keeps state, and this request came without one " +
	"(streamable HTTP with protocol version 2026-07-28 has no MCP sessions, so cellblock-mcp cannot tell which client's run returned the file); " +
	"use stdio, or streamable HTTP with protocol version " + mcp.LATEST_LEGACY_PROTOCOL_VERSION + "; small text files and images still come embedded in run_python's results")

// readArtifact is the handler of the artifacts resource template.
func (h *handler) readArtifact(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	sum, name, ok := parseArtifactURI(uri)
	if !ok {
		return nil, fmt.Errorf("%q is not a cellblock artifact URI (%sSHA256/PATH)", uri, artifactScheme)
	}
	conn := connID(ctx)
	if conn == "" {
		return nil, errNoConnection
	}
	ref, ok := h.artifacts.lookup(conn, sum)
	if !ok {
		return nil, errArtifactNotFound
	}
	if ref.size > maxResourceRead {
		return nil, fmt.Errorf("%s is %s, over the %s this server returns", name, fmtBytes(ref.size), fmtBytes(maxResourceRead))
	}
	mime := ref.mime
	data, err := h.client.Artifact(ctx, sum, maxResourceRead)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Type == api.ErrNotFound {
		return nil, errArtifactNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %s from the sandbox: %w", name, err)
	}
	if mime == "" {
		mime = "application/octet-stream"
	}
	if textual(mime) && utf8.Valid(data) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: mime, Text: string(data)}}, nil
	}
	return []mcp.ResourceContents{mcp.BlobResourceContents{URI: uri, MIMEType: mime, Blob: base64.StdEncoding.EncodeToString(data)}}, nil
}

// textual reports whether a media type is text.
func textual(mime string) bool {
	switch {
	case strings.HasPrefix(mime, "text/"):
		return true
	case mime == "application/json", mime == "application/jsonl", mime == "application/x-ndjson",
		mime == "application/xml", mime == "image/svg+xml", mime == "application/yaml", mime == "application/toml":
		return true
	}
	return false
}

// addFiles adds res's files to the tool result out: a section of its
// text, and a resource link, an embedded text or image content for each,
// within the caps. The files become readable by this call's connection.
func (h *handler) addFiles(ctx context.Context, out *mcp.CallToolResult, res *api.Result) {
	if res == nil || len(res.Files) == 0 && len(res.FilesSkipped) == 0 {
		return
	}
	h.artifacts.add(connID(ctx), res.Files)
	images := 0
	for _, c := range out.Content {
		if _, ok := c.(mcp.ImageContent); ok {
			images++
		}
	}
	var lines []string
	var content []mcp.Content
	var textBytes, imageBytes, fileImages int
	for i, f := range res.Files {
		uri := artifactURI(f.SHA256, f.Path)
		link := mcp.NewResourceLink(uri, f.Path, fmt.Sprintf("%s written under /work/out by the code", f.Path), f.MIME)
		size := f.Size
		link.Size = &size
		content = append(content, link)
		how := "resource link " + uri
		switch {
		case f.Content != nil && len(*f.Content) <= maxEmbeddedText && textBytes+len(*f.Content) <= maxEmbeddedTexts:
			textBytes += len(*f.Content)
			content = append(content, mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: uri, MIMEType: f.MIME, Text: *f.Content}))
			how += ", and its text embedded"
		case f.MIME == mimePNG || f.MIME == mimeJPEG:
			n, why := h.fileImage(ctx, f, &fileImages, &imageBytes)
			if why != "" {
				how += "; not sent as an image: " + why
				break
			}
			content = append(content, n)
			images++
			how += fmt.Sprintf(", and image content %d", images)
		}
		if i < maxFilesListed {
			lines = append(lines, fmt.Sprintf("- %s (%s, %s): %s", f.Path, fmtBytes(f.Size), f.MIME, how))
		} else if i == maxFilesListed {
			lines = append(lines, fmt.Sprintf("- %d more, each a resource link (structuredContent.files lists them all)", len(res.Files)-maxFilesListed))
		}
	}
	for i, s := range res.FilesSkipped {
		if i == maxFilesListed {
			lines = append(lines, fmt.Sprintf("- %d more not returned (structuredContent.files_skipped lists them)", len(res.FilesSkipped)-maxFilesListed))
			break
		}
		lines = append(lines, fmt.Sprintf("- %s: not returned: %s", s.Path, s.Reason))
	}
	var b strings.Builder
	if len(out.Content) > 0 {
		if t, ok := out.Content[0].(mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	fmt.Fprintf(&b, "\n\n--- files under /work/out: %d returned, %d not ---\n", len(res.Files), len(res.FilesSkipped))
	b.WriteString(strings.Join(lines, "\n"))
	if len(res.Files) > 0 && connID(ctx) == "" {
		b.WriteString("\n(This call came without an MCP session, so resources/read cannot serve these links over it: only what is embedded here comes back.)")
	}
	if len(out.Content) > 0 {
		out.Content[0] = mcp.NewTextContent(b.String())
	} else {
		out.Content = []mcp.Content{mcp.NewTextContent(b.String())}
	}
	out.Content = append(out.Content, content...)
}

// fileImage fetches an image file for image content, within the caps
// (n and total count what this result carries), or says why not.
func (h *handler) fileImage(ctx context.Context, f api.File, n, total *int) (mcp.Content, string) {
	size := base64.StdEncoding.EncodedLen(int(min(f.Size, 1<<40)))
	switch {
	case size > maxImageBase64:
		return nil, fmt.Sprintf("%s of base64 is over the cap of %s per image", fmtBytes(int64(size)), fmtBytes(maxImageBase64))
	case *n >= maxFileImages:
		return nil, fmt.Sprintf("this result already has %d file images, the most it carries", maxFileImages)
	case *total+size > maxFileImagesBase64:
		return nil, fmt.Sprintf("it would take the file images past %s of base64 in all", fmtBytes(maxFileImagesBase64))
	}
	data, err := h.client.Artifact(ctx, f.SHA256, f.Size)
	if err != nil {
		return nil, "it could not be fetched: " + err.Error()
	}
	var cfg image.Config
	if f.MIME == mimePNG {
		cfg, err = png.DecodeConfig(bytes.NewReader(data))
	} else {
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
	}
	switch {
	case err != nil:
		return nil, "it is not a valid " + strings.ToUpper(path.Base(f.MIME)) + " image"
	case cfg.Width > maxImageSide || cfg.Height > maxImageSide:
		return nil, fmt.Sprintf("%d×%d px is over the cap of %d px a side", cfg.Width, cfg.Height, maxImageSide)
	}
	*n++
	*total += size
	return mcp.NewImageContent(base64.StdEncoding.EncodeToString(data), f.MIME), ""
}
