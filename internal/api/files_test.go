package api

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestCheckFilePath(t *testing.T) {
	for _, ok := range []string{"a.csv", "data/2024/in.csv", "out.csv", "outs/x", ".hidden", "a b/ü.txt", strings.Repeat("d/", 31) + "f"} {
		if why := CheckFilePath(ok); why != "" {
			t.Errorf("%q refused: %s", ok, why)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "../x", "a/../../x", "a/./b", ".", "..", "a//b", "a/", "a\x00b",
		strings.Repeat("x", MaxFileNameBytes+1), strings.Repeat("d/", 32) + "f", strings.Repeat("a/", 600), "bad\xff"} {
		if why := CheckFilePath(bad); why == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestValidateFiles: each bad entry is refused naming its field, before
// anything is built.
func TestValidateFiles(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("\x00\x01binary"))
	good := &RunRequest{Code: "x", Files: []FileInput{
		{Path: "data/in.csv", Content: "a,b\n"},
		{Path: "img.bin", Content: b64, Encoding: EncodingBase64},
		{Path: "wrapped.bin", Content: b64[:4] + "\n" + b64[4:], Encoding: EncodingBase64},
		{Path: "main.txt", Content: "", Encoding: EncodingUTF8},
	}, ReturnFiles: ReturnFilesInline}
	if e := good.Validate(); e != nil {
		t.Fatalf("good files refused: %v", e)
	}
	if n, err := good.Files[1].Size(); err != nil || n != 8 {
		t.Errorf("size %d %v", n, err)
	}
	if d, err := good.Files[2].Data(); err != nil || string(d) != "\x00\x01binary" {
		t.Errorf("data %q %v", d, err)
	}
	for _, c := range []struct {
		name  string
		req   RunRequest
		field string
	}{
		{"absolute", RunRequest{Files: []FileInput{{Path: "/etc/x"}}}, "files[0].path"},
		{"dotdot", RunRequest{Files: []FileInput{{Path: "a"}, {Path: "../x"}}}, "files[1].path"},
		{"nul", RunRequest{Files: []FileInput{{Path: "a\x00"}}}, "files[0].path"},
		{"long name", RunRequest{Files: []FileInput{{Path: strings.Repeat("n", 256)}}}, "files[0].path"},
		{"duplicate", RunRequest{Files: []FileInput{{Path: "a"}, {Path: "b"}, {Path: "a"}}}, "files[2].path"},
		{"file in the way", RunRequest{Files: []FileInput{{Path: "a"}, {Path: "a/b"}}}, "files[1].path"},
		{"under out", RunRequest{Files: []FileInput{{Path: "out/x"}}}, "files[0].path"},
		{"out itself", RunRequest{Files: []FileInput{{Path: "out"}}}, "files[0].path"},
		{"the script", RunRequest{Files: []FileInput{{Path: "main.py"}}}, "files[0].path"},
		{"a named script", RunRequest{Filename: "job.py", Files: []FileInput{{Path: "job.py"}}}, "files[0].path"},
		{"encoding", RunRequest{Files: []FileInput{{Path: "a", Encoding: "latin-1"}}}, "files[0].encoding"},
		{"base64", RunRequest{Files: []FileInput{{Path: "a", Content: "not base64!", Encoding: EncodingBase64}}}, "files[0].content"},
		{"base64 cut", RunRequest{Files: []FileInput{{Path: "a", Content: "QUJD" + "QQ", Encoding: EncodingBase64}}}, "files[0].content"},
		{"return_files", RunRequest{ReturnFiles: "all"}, "return_files"},
	} {
		c.req.Code = "x"
		e := c.req.Validate()
		if e == nil || e.Type != ErrBadRequest || e.Field != c.field {
			t.Errorf("%s: %v, want bad_request naming %s", c.name, e, c.field)
		}
	}
	// -c and - write no script file; a session's run neither.
	for _, r := range []RunRequest{{Filename: "-c"}, {Filename: "-"}, {Session: "s1"}} {
		r.Code, r.Files = "x", []FileInput{{Path: "main.py"}}
		if e := r.Validate(); e != nil {
			t.Errorf("main.py with filename %q session %q: %v", r.Filename, r.Session, e)
		}
	}
	sr := SessionRequest{Files: []FileInput{{Path: "/abs"}}}
	if e := sr.Validate(); e == nil || e.Field != "files[0].path" {
		t.Errorf("a session's files: %v", e)
	}
}

func TestCheckFileCaps(t *testing.T) {
	caps := FileCaps{InCount: 2, InBytes: 10}
	files := func(sizes ...int) []FileInput {
		var f []FileInput
		for i, n := range sizes {
			f = append(f, FileInput{Path: string(rune('a' + i)), Content: strings.Repeat("x", n)})
		}
		return f
	}
	if n, e := CheckFileCaps(files(4, 6), caps, 100); e != nil || n != 10 {
		t.Errorf("within the caps: %d %v", n, e)
	}
	for name, c := range map[string]struct {
		files []FileInput
		tmp   int64
	}{
		"count": {files(1, 1, 1), 100},
		"bytes": {files(6, 5), 100},
		"tmp":   {files(5), 4},
	} {
		_, e := CheckFileCaps(c.files, caps, c.tmp)
		if e == nil || e.Type != ErrOverLimit || e.Field != "files" {
			t.Errorf("%s: %v", name, e)
		}
	}
	b64 := FileInput{Path: "b", Content: base64.StdEncoding.EncodeToString(make([]byte, 9)), Encoding: EncodingBase64}
	if n, e := CheckFileCaps([]FileInput{b64}, caps, 100); e != nil || n != 9 {
		t.Errorf("base64 counts its decoded size: %d %v", n, e)
	}
	if _, e := CheckFileCaps(nil, FileCaps{}, 0); e != nil {
		t.Errorf("no files: %v", e)
	}
}

// TestRequestBytes: the body of a request carrying the most files as
// base64 fits, and only those requests grow.
func TestRequestBytes(t *testing.T) {
	c := FileCaps{InCount: 100, InBytes: 32 << 20}
	if got, min := c.RequestBytes(), int64(MaxRequestBytes)+int64(base64.StdEncoding.EncodedLen(32<<20)); got < min {
		t.Errorf("RequestBytes %d < %d", got, min)
	}
	if got := (FileCaps{}).RequestBytes(); got != MaxRequestBytes {
		t.Errorf("without files: %d", got)
	}
}

// TestBase64Pieces: content decoded a piece at a time is the content, at
// every size around the pieces' bounds, with line breaks or without;
// padding inside it, or a stray character, is refused as a whole decode
// would.
func TestBase64Pieces(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, b64Chunk/4*3 - 1, b64Chunk / 4 * 3, b64Chunk/4*3 + 1, 3 * b64Chunk} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		enc := base64.StdEncoding.EncodeToString(data)
		for _, content := range []string{enc, wrap(enc, 76)} {
			f := FileInput{Content: content, Encoding: EncodingBase64}
			got, err := f.Data()
			if err != nil || string(got) != string(data) {
				t.Fatalf("%d bytes (%d of base64): %d back, %v", n, len(content), len(got), err)
			}
		}
	}
	half := base64.StdEncoding.EncodeToString(make([]byte, b64Chunk/4*3))
	for _, bad := range []string{
		"QQ==" + half,                       // padding in the first piece
		half + "QQ==" + half,                // in a middle piece
		half[:b64Chunk-4] + "QQ==" + "QUJD", // at a piece's end
		half + "QU!D",
		"QUJ",
	} {
		f := FileInput{Content: bad, Encoding: EncodingBase64}
		_, errWhole := base64.StdEncoding.DecodeString(bad)
		if _, err := f.Size(); err == nil || errWhole == nil {
			t.Errorf("%d bytes of bad base64: %v (a whole decode: %v)", len(bad), err, errWhole)
		}
	}
}

func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\n")
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}
