package api

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Files in and out of a run (see RunRequest.Files and Result.Files).
//
// A request's files are placed under the jail's /work before its code
// runs; what the program writes under /work/out comes back in the result,
// its content kept by the daemon's artifact store and fetched with
// GET PathArtifacts/SHA256 by the uid that produced it.

// Paths of the file API.
const (
	// PathArtifacts: GET PathArtifacts + "/" + SHA256 streams an
	// artifact's content to a uid that produced it.
	PathArtifacts = "/v1/artifacts"
	// SessionFilesDir: GET and PUT PathSessions/ID/SessionFilesDir/PATH
	// read and write the file at PATH under a session's /work.
	SessionFilesDir = "files"
	// OutDir is the directory under /work whose files come back.
	OutDir = "out"
)

// File encodings (FileInput.Encoding).
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// ReturnFilesInline (RunRequest.ReturnFiles) returns small text files
// with their content in the result.
const ReturnFilesInline = "inline"

// Bounds of a file's path that do not depend on the daemon's
// configuration.
const (
	// MaxFilePathBytes bounds a whole path; MaxFileNameBytes one of its
	// components (the kernel's NAME_MAX).
	MaxFilePathBytes = 1024
	MaxFileNameBytes = 255
	// MaxFileDepth bounds how many components a path has.
	MaxFileDepth = 32
	// fileEntryOverhead is what one entry of files may add to a request
	// body beyond its content: its path and the JSON around them.
	fileEntryOverhead = 2 * MaxFilePathBytes
)

// FileInput is one file of a request, placed under /work before the code
// runs.
type FileInput struct {
	// Path is relative to /work; subdirectories are made as needed.
	Path string `json:"path"`
	// Content is the file's content: text, or base64 with Encoding
	// EncodingBase64 (line breaks in it are ignored).
	Content string `json:"content"`
	// Encoding is EncodingUTF8 (the default) or EncodingBase64.
	Encoding string `json:"encoding,omitempty"`

	// size caches Size of base64 content once Validate decoded it
	// (sized): Content is not to change after that.
	size  int64
	sized bool
}

// Data returns the file's content as bytes. It fails only for base64
// that does not decode, which Validate refuses.
func (f *FileInput) Data() ([]byte, error) {
	if f.Encoding != EncodingBase64 {
		return []byte(f.Content), nil
	}
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, n)
	if _, err := f.WriteTo(sliceWriter{&b}); err != nil {
		return nil, err
	}
	return b, nil
}

// b64Chunk is how much base64 WriteTo decodes at a time: a multiple of 4.
const b64Chunk = 64 << 10

// WriteTo writes the file's content to w, decoding base64 a piece at a
// time, and returns its size.
func (f *FileInput) WriteTo(w io.Writer) (int64, error) {
	if f.Encoding != EncodingBase64 {
		n, err := io.WriteString(w, f.Content)
		return int64(n), err
	}
	s := f.Content
	if strings.ContainsAny(s, "\r\n") {
		// Line breaks: the streaming decoder skips them (slower).
		return io.Copy(w, base64.NewDecoder(base64.StdEncoding, strings.NewReader(s)))
	}
	in := make([]byte, b64Chunk)
	out := make([]byte, base64.StdEncoding.DecodedLen(b64Chunk))
	var total int64
	for off := 0; off < len(s); off += b64Chunk {
		chunk := in[:copy(in, s[off:min(off+b64Chunk, len(s))])]
		last := off+b64Chunk >= len(s)
		if !last && bytes.IndexByte(chunk, '=') >= 0 {
			return total, base64.CorruptInputError(off + bytes.IndexByte(chunk, '='))
		}
		n, err := base64.StdEncoding.Decode(out, chunk)
		if err != nil {
			if ce, ok := err.(base64.CorruptInputError); ok {
				err = base64.CorruptInputError(int64(off) + int64(ce))
			}
			return total, err
		}
		if _, err := w.Write(out[:n]); err != nil {
			return total, err
		}
		total += int64(n)
	}
	return total, nil
}

// Size is the file's size in bytes, decoding base64 without keeping it
// (once: the request's validation remembers it).
func (f *FileInput) Size() (int64, error) {
	if f.Encoding != EncodingBase64 {
		return int64(len(f.Content)), nil
	}
	if f.sized {
		return f.size, nil
	}
	n, err := f.WriteTo(io.Discard)
	if err == nil {
		f.size, f.sized = n, true
	}
	return n, err
}

type sliceWriter struct{ b *[]byte }

func (w sliceWriter) Write(p []byte) (int, error) {
	*w.b = append(*w.b, p...)
	return len(p), nil
}

// File is one file a run produced under /work/out: an element of the
// result's files.
type File struct {
	// Path is relative to /work/out.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// MIME is the file's media type, from its name and its first bytes.
	MIME string `json:"mime"`
	// Content is the file's text, for a small text file when the request
	// asked for ReturnFilesInline.
	Content *string `json:"content,omitempty"`
}

// FileSkipped is a file (or anything else) under /work/out that did not
// come back, and why: not a regular file (a symbolic link, a FIFO, a
// socket), over a cap, changed while it was read.
type FileSkipped struct {
	// Path is relative to /work/out; bytes that are not UTF-8 are shown
	// as U+FFFD.
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Size is the file's size, when it is a file.
	Size int64 `json:"size,omitempty"`
}

// FileCaps are the daemon's caps on files in and out (Info.Files), set by
// the operator.
type FileCaps struct {
	// InCount files of at most InBytes in all may come with a request
	// (and must fit its tmp_bytes too).
	InCount int   `json:"in_count"`
	InBytes int64 `json:"in_bytes"`
	// OutCount files come back from a run at most, each at most
	// OutFileBytes, OutBytes in all.
	OutCount     int   `json:"out_count"`
	OutFileBytes int64 `json:"out_file_bytes"`
	OutBytes     int64 `json:"out_bytes"`
	// InlineBytes is the largest text file ReturnFilesInline returns with
	// its content; InlineTotalBytes bounds all of a run's.
	InlineBytes      int64 `json:"inline_bytes"`
	InlineTotalBytes int64 `json:"inline_total_bytes"`
	// StoreBytes is the artifact store's quota, StoreTTLSeconds how long
	// an artifact is kept after it was last produced; StoreUsedBytes and
	// StoreFiles what counts against the quota now: the caller's own
	// artifacts (each counted in full, whoever else holds it), or for
	// root everyone's.
	StoreBytes      int64 `json:"store_bytes"`
	StoreTTLSeconds int64 `json:"store_ttl_seconds"`
	StoreUsedBytes  int64 `json:"store_used_bytes"`
	StoreFiles      int   `json:"store_files"`
}

// RequestBytes is the largest body of a request that may carry files
// (a run, a session's creation): the usual MaxRequestBytes plus the most
// files caps admits, as base64 (which adds a third).
func (c FileCaps) RequestBytes() int64 {
	return MaxRequestBytes + (c.InBytes+2)/3*4 + int64(c.InCount)*fileEntryOverhead
}

// CheckFilePath says what is wrong with p as a path under /work ("" when
// nothing): it must be relative, of plain names (no "." or ".."
// component, no empty one), without NUL, within the length bounds.
func CheckFilePath(p string) string {
	switch {
	case p == "":
		return "is empty"
	case len(p) > MaxFilePathBytes:
		return fmt.Sprintf("is %d bytes; the most is %d", len(p), MaxFilePathBytes)
	case !utf8.ValidString(p):
		return "is not UTF-8"
	case strings.IndexByte(p, 0) >= 0:
		return "contains a NUL byte"
	case strings.HasPrefix(p, "/"):
		return "must be relative to /work, not absolute"
	}
	parts := strings.Split(p, "/")
	if len(parts) > MaxFileDepth {
		return fmt.Sprintf("has %d components; the most is %d", len(parts), MaxFileDepth)
	}
	for _, c := range parts {
		switch {
		case c == "":
			return "has an empty component (// or a trailing /)"
		case c == "." || c == "..":
			return "must not have . or .. components"
		case len(c) > MaxFileNameBytes:
			return fmt.Sprintf("has a component of %d bytes; the most is %d", len(c), MaxFileNameBytes)
		}
	}
	return ""
}

// UnderOut reports whether p (a checked path) is /work/out or below it,
// where the program's results go and inputs may not.
func UnderOut(p string) bool { return p == OutDir || strings.HasPrefix(p, OutDir+"/") }

// validateFiles checks a request's files: paths, encodings, content that
// decodes, no path twice or below another's file. script, when not empty,
// is the file the code is written to, which no input may replace.
func validateFiles(files []FileInput, script string) *Error {
	seen := make(map[string]bool, len(files))
	for i := range files {
		f := &files[i]
		field := fmt.Sprintf("files[%d]", i)
		if why := CheckFilePath(f.Path); why != "" {
			return Errorf(ErrBadRequest, field+".path", "%q %s", cut(f.Path, 80), why)
		}
		if UnderOut(f.Path) {
			return Errorf(ErrBadRequest, field+".path", "%q is under %s/, where the program's results go; put inputs elsewhere in /work", f.Path, OutDir)
		}
		if script != "" && f.Path == script {
			return Errorf(ErrBadRequest, field+".path", "%q is the file the code is written to (filename); give the input another name", f.Path)
		}
		switch f.Encoding {
		case "", EncodingUTF8:
		case EncodingBase64:
			if _, err := f.Size(); err != nil {
				return Errorf(ErrBadRequest, field+".content", "is not valid base64: %v", err)
			}
		default:
			return Errorf(ErrBadRequest, field+".encoding", "%q is not %q or %q", cut(f.Encoding, 40), EncodingUTF8, EncodingBase64)
		}
		seen[f.Path] = true
	}
	if len(seen) < len(files) {
		for i, f := range files {
			for _, g := range files[:i] {
				if g.Path == f.Path {
					return Errorf(ErrBadRequest, fmt.Sprintf("files[%d].path", i), "%q is given twice", f.Path)
				}
			}
		}
	}
	// A file where another needs a directory.
	for i, f := range files {
		for dir := f.Path; ; {
			j := strings.LastIndexByte(dir, '/')
			if j < 0 {
				break
			}
			dir = dir[:j]
			if seen[dir] {
				return Errorf(ErrBadRequest, fmt.Sprintf("files[%d].path", i), "%q needs %q to be a directory, but it is a file of the request", f.Path, dir)
			}
		}
	}
	return nil
}

// CheckFileCaps refuses files past the operator's caps (count, bytes in
// all) or past tmpBytes, the size of the /work they go to. It returns the
// files' total size. Call it after Validate.
func CheckFileCaps(files []FileInput, caps FileCaps, tmpBytes int64) (int64, *Error) {
	if len(files) == 0 {
		return 0, nil
	}
	if len(files) > caps.InCount {
		return 0, Errorf(ErrOverLimit, "files", "has %d files; the most a request may carry is %d", len(files), caps.InCount)
	}
	var total int64
	for i := range files {
		n, err := files[i].Size()
		if err != nil {
			return 0, Errorf(ErrBadRequest, fmt.Sprintf("files[%d].content", i), "is not valid base64: %v", err)
		}
		total += n
	}
	if total > caps.InBytes {
		return 0, Errorf(ErrOverLimit, "files", "are %d bytes in all; the most a request may carry is %d", total, caps.InBytes)
	}
	if total > tmpBytes {
		return 0, Errorf(ErrOverLimit, "files", "are %d bytes in all, more than /work holds (tmp_bytes %d)", total, tmpBytes)
	}
	return total, nil
}

// cut shortens s for a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// validateFileFields checks a run request's files and return_files. A
// run in a session writes no script file; a run of its own writes its
// code to filename (main.py by default) unless that is "-c" or "-".
func (r *RunRequest) validateFileFields() *Error {
	switch r.ReturnFiles {
	case "", ReturnFilesInline:
	default:
		return Errorf(ErrBadRequest, "return_files", "%q is not %q (or absent)", cut(r.ReturnFiles, 40), ReturnFilesInline)
	}
	script := ""
	if r.Session == "" {
		switch r.Filename {
		case "":
			script = "main.py"
		case "-c", "-":
		default:
			script = r.Filename
		}
	}
	return validateFiles(r.Files, script)
}

// SessionFileWritten answers a PUT of a session's file.
type SessionFileWritten struct {
	Session string `json:"session"`
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
}
