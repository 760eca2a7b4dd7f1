package mcpserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// A run's display items (api.Result.Display) go out as MCP content: a
// raster image as image content, HTML and SVG as embedded resources,
// Markdown, JSON and plain text as text. Each item goes out once, in the
// richest form that fits under the caps below; every form left out is
// named in the text with its size and the reason.
//
// The caps keep one plot from flooding the model's context. A model pays
// for an image by its pixels and for text by its length, and a client
// holds the whole result in memory, so they bound each item, the result as
// a whole, and the number of images.
const (
	// maxImageBase64 is the most base64 one image may be. A matplotlib
	// figure at its default size (640×480 px at 100 dpi) is 20-60 KiB of
	// PNG; even at dpi=300 it stays well under this. A 1 MiB image is a
	// photograph or a huge array, not a chart.
	maxImageBase64 = 1 << 20
	// maxImagesBase64 is the most base64 the images of one result may
	// take together: up to four images at the per-image cap, or dozens
	// of ordinary plots.
	maxImagesBase64 = 4 << 20
	// maxImages is the most image contents one result carries, whatever
	// their size: a loop that draws a hundred small plots would cost as
	// much of the context as a hundred large ones.
	maxImages = 16
	// maxImageSide is the most pixels an image may have on a side. Model
	// APIs refuse larger images, and a refused image can make the whole
	// conversation fail, not only this tool result.
	maxImageSide = 8000
	// maxResourceBytes is the most one text/html or image/svg+xml
	// resource may be. pandas renders a DataFrame at its default display
	// limits (60 rows, 20 columns) in tens of KiB of HTML.
	maxResourceBytes = 256 << 10
	// maxResourcesBytes is the most the resources of one result may take
	// together.
	maxResourcesBytes = 1 << 20
	// maxDisplayText is the most of one text/markdown, application/json
	// or text/plain item the text carries; the middle of a longer one is
	// left out, as for stdout.
	maxDisplayText = 16 << 10
	// maxDisplayTextTotal is the most display text one result carries.
	maxDisplayTextTotal = 64 << 10
	// maxDisplayListed is how many items the text describes one by one;
	// the rest are counted in one line.
	maxDisplayListed = 64
	// inlinePlainBytes is the longest text/plain quoted in an item's line
	// of the text; a longer one, or one of several lines, gets a text
	// content of its own.
	inlinePlainBytes = 200
)

// MIME types of display data, in the order an item's form is chosen.
const (
	mimePNG      = "image/png"
	mimeJPEG     = "image/jpeg"
	mimeSVG      = "image/svg+xml"
	mimeHTML     = "text/html"
	mimeMarkdown = "text/markdown"
	mimeJSON     = "application/json"
	mimePlain    = "text/plain"
)

var displayOrder = []string{mimePNG, mimeJPEG, mimeSVG, mimeHTML, mimeMarkdown, mimeJSON, mimePlain}

// displayOut is how a result's display items go out.
type displayOut struct {
	// lines describe the items, one line each, for the text.
	lines []string
	// content is the items' image, resource and text contents, in order.
	content []mcp.Content
	// items are the items for the structured content: the same, except
	// that the base64 of every image is replaced by a note saying where
	// it went or why it was left out.
	items []api.DisplayItem
}

// displayRenderer turns display items into a displayOut, keeping count of
// what the result carries so far.
type displayRenderer struct {
	runID string
	out   displayOut

	images        int
	imageBytes    int
	resourceBytes int
	textBytes     int
}

// renderDisplay maps a run's display items onto MCP content.
func renderDisplay(runID string, items []api.DisplayItem) displayOut {
	r := &displayRenderer{runID: runID}
	for i, d := range items {
		if i == maxDisplayListed {
			r.out.lines = append(r.out.lines, fmt.Sprintf(
				"[%d-%d] not described here or sent: the text describes at most %d items (structuredContent.display has them all, images aside).",
				i, len(items)-1, maxDisplayListed))
		}
		r.item(i, d, i >= maxDisplayListed)
	}
	return r.out
}

// item renders one display item; when muted, it only fills in the
// structured content.
func (r *displayRenderer) item(i int, d api.DisplayItem, muted bool) {
	// The item for the structured content, where images become notes.
	structured := api.DisplayItem{Data: make(map[string]json.RawMessage, len(d.Data)), Metadata: d.Metadata}
	for mime, raw := range d.Data {
		structured.Data[mime] = raw
	}
	note := func(mime, text string) { structured.Data[mime] = mustJSON("(" + text + ")") }

	var (
		chosen string   // the form the item went out in
		sent   string   // how it went out, for the line
		left   []string // forms left out, and why
		plain  string
	)
	_ = json.Unmarshal(d.Data[mimePlain], &plain)
	for _, mime := range displayOrder {
		raw, ok := d.Data[mime]
		switch {
		case !ok:
			continue
		case muted:
			if isRaster(mime) {
				note(mime, "left out of this tool result: the text describes at most "+fmt.Sprint(maxDisplayListed)+" display items")
			}
			continue
		case chosen != "":
			if isRaster(mime) {
				note(mime, "not sent: this item went out as "+chosen)
			}
			continue
		}
		var why string
		switch mime {
		case mimePNG, mimeJPEG:
			var n int
			n, sent, why = r.image(i, raw, mime)
			if why == "" {
				note(mime, fmt.Sprintf("sent as image content %d", n))
			} else {
				note(mime, "left out of this tool result: "+why)
			}
		case mimeSVG, mimeHTML:
			sent, why = r.resource(i, raw, mime)
		case mimeMarkdown, mimeJSON:
			sent, why = r.text(i, raw, mime)
		case mimePlain:
			sent = "text/plain" // shown below
		}
		if why != "" {
			left = append(left, mime+" left out: "+why)
			continue
		}
		chosen = mime
	}
	r.out.items = append(r.out.items, structured)
	if muted {
		return
	}

	var parts []string
	if chosen != "" && chosen != mimePlain {
		parts = append(parts, sent)
	}
	parts = append(parts, left...)
	// The plain text goes along with an image or resource, which a model
	// may not be able to read, and stands in for an item with nothing
	// else; Markdown and JSON say it already.
	if _, ok := d.Data[mimePlain]; ok && (chosen == mimePlain || isRaster(chosen) || chosen == mimeSVG || chosen == mimeHTML) {
		switch {
		case plain == "":
			parts = append(parts, "text/plain: (empty)")
		case len(plain) <= inlinePlainBytes && !strings.Contains(strings.TrimRight(plain, "\n"), "\n"):
			parts = append(parts, "text/plain: "+strings.TrimRight(plain, "\n"))
		default:
			s, why := r.text(i, d.Data[mimePlain], mimePlain)
			if why != "" {
				s = "text/plain left out: " + why
			}
			parts = append(parts, s)
		}
	}
	if chosen == "" {
		parts = append(parts, "nothing sent")
	}
	var other []string
	for mime := range d.Data {
		if !slices.Contains(displayOrder, mime) {
			other = append(other, mime)
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		parts = append(parts, "in structuredContent only: "+strings.Join(other, ", "))
	}
	if dropped := droppedText(d.Metadata); dropped != "" {
		parts = append(parts, "the sandbox dropped "+dropped)
	}
	r.out.lines = append(r.out.lines, fmt.Sprintf("[%d] %s", i, strings.Join(parts, "; ")))
}

// image sends a PNG or JPEG as image content, returning its number, or
// says why it was left out.
func (r *displayRenderer) image(i int, raw json.RawMessage, mime string) (n int, sent, why string) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, "", "its data is not a base64 string"
	}
	data, err := base64.StdEncoding.DecodeString(s) // skips line breaks
	if err != nil {
		return 0, "", "its data is not valid base64"
	}
	var cfg image.Config
	if mime == mimePNG {
		cfg, err = png.DecodeConfig(bytes.NewReader(data))
	} else {
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
	}
	if err != nil {
		return 0, "", "it is not a valid " + strings.ToUpper(strings.TrimPrefix(mime, "image/")) + " image"
	}
	size := base64.StdEncoding.EncodedLen(len(data))
	switch {
	case size > maxImageBase64:
		return 0, "", fmt.Sprintf("%d×%d px, %s of base64, is over the cap of %s per image",
			cfg.Width, cfg.Height, fmtBytes(int64(size)), fmtBytes(maxImageBase64))
	case cfg.Width > maxImageSide || cfg.Height > maxImageSide:
		return 0, "", fmt.Sprintf("%d×%d px is over the cap of %d px a side, which model APIs refuse",
			cfg.Width, cfg.Height, maxImageSide)
	case r.images >= maxImages:
		return 0, "", fmt.Sprintf("this result already has %d images, the most it may carry", maxImages)
	case r.imageBytes+size > maxImagesBase64:
		return 0, "", fmt.Sprintf("%s of base64 would take this result's images past the cap of %s in all (%s already)",
			fmtBytes(int64(size)), fmtBytes(maxImagesBase64), fmtBytes(int64(r.imageBytes)))
	}
	r.images++
	r.imageBytes += size
	r.out.content = append(r.out.content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(data), mime))
	return r.images, fmt.Sprintf("%s %d×%d px, %s: sent as image content %d",
		mime, cfg.Width, cfg.Height, fmtBytes(int64(len(data))), r.images), ""
}

// resource sends HTML or SVG as an embedded resource, or says why it was
// left out.
func (r *displayRenderer) resource(i int, raw json.RawMessage, mime string) (sent, why string) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", "its data is not a string"
	}
	switch {
	case len(s) > maxResourceBytes:
		return "", fmt.Sprintf("%s is over the cap of %s per HTML or SVG item", fmtBytes(int64(len(s))), fmtBytes(maxResourceBytes))
	case r.resourceBytes+len(s) > maxResourcesBytes:
		return "", fmt.Sprintf("%s would take this result's HTML and SVG past the cap of %s in all (%s already)",
			fmtBytes(int64(len(s))), fmtBytes(maxResourcesBytes), fmtBytes(int64(r.resourceBytes)))
	}
	r.resourceBytes += len(s)
	uri := r.uri(i, mime)
	r.out.content = append(r.out.content, mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: uri, MIMEType: mime, Text: s}))
	return fmt.Sprintf("%s, %s: sent as the embedded resource %s", mime, fmtBytes(int64(len(s))), uri), ""
}

// uri names an item's resource.
func (r *displayRenderer) uri(i int, mime string) string {
	ext := "html"
	if mime == mimeSVG {
		ext = "svg"
	}
	run := r.runID
	if run == "" {
		run = "unknown"
	}
	return fmt.Sprintf("cellblock://runs/%s/display/%d.%s", url.PathEscape(run), i, ext)
}

// text sends Markdown, JSON or plain text as a text content of its own,
// headed by the item's index and type, or says why it was left out.
func (r *displayRenderer) text(i int, raw json.RawMessage, mime string) (sent, why string) {
	var s string
	if mime == mimeJSON {
		var indented bytes.Buffer
		if err := json.Indent(&indented, raw, "", "  "); err != nil {
			return "", "its data is not JSON"
		}
		s = indented.String()
	} else if err := json.Unmarshal(raw, &s); err != nil {
		return "", "its data is not a string"
	}
	label := fmt.Sprintf("display[%d] %s", i, mime)
	shown := s
	if len(s) > maxDisplayText {
		shown = elideAt(s, maxDisplayText/2, maxDisplayText/2, fmt.Sprintf("display[%d].data", i))
	}
	if r.textBytes+len(shown) > maxDisplayTextTotal {
		return "", fmt.Sprintf("%s would take this result's display text past the cap of %s in all",
			fmtBytes(int64(len(s))), fmtBytes(maxDisplayTextTotal))
	}
	r.textBytes += len(shown)
	r.out.content = append(r.out.content, mcp.NewTextContent(label+":\n"+shown))
	what := fmt.Sprintf("%s, %s: sent as the text %q", mime, fmtBytes(int64(len(s))), label)
	if len(shown) != len(s) {
		what += fmt.Sprintf(" (shortened to %s; structuredContent has all of it)", fmtBytes(int64(len(shown))))
	}
	return what, ""
}

// droppedText says what the sandbox left out of an item
// (metadata.cellblock.dropped, api.DisplayNotes): each MIME type with its
// size and the reason, at most maxDroppedListed of them. The notes come
// from the jail: each is cut short and kept on one line.
func droppedText(meta map[string]json.RawMessage) string {
	raw, ok := meta[api.DisplayNotesKey]
	if !ok {
		return ""
	}
	var notes api.DisplayNotes
	if err := json.Unmarshal(raw, &notes); err != nil {
		return "content it describes in structuredContent's metadata.cellblock"
	}
	var parts []string
	for i, d := range notes.Dropped {
		if i == maxDroppedListed {
			parts = append(parts, fmt.Sprintf("and %d more (structuredContent's metadata.cellblock.dropped lists them)", len(notes.Dropped)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s of %s (%s)", oneLine(d.MIME, 80), fmtBytes(d.Bytes), oneLine(d.Reason, 200)))
	}
	return strings.Join(parts, ", ")
}

// maxDroppedListed is how many of an item's dropped notes its line lists.
const maxDroppedListed = 8

// oneLine is s (valid UTF-8, as json.Unmarshal leaves strings) on one
// line, cut to about max bytes on a rune boundary: control characters
// become spaces.
func oneLine(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func isRaster(mime string) bool { return mime == mimePNG || mime == mimeJPEG }
