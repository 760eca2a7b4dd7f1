package cli

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// Files in and out: cellblock run --file SRC[:DEST] and --out DIR, and
// cellblock session cp.

// maxLocalFile is the most cellblock reads of one local file to send; the
// daemon's own caps (cellblock info) are usually lower.
const maxLocalFile = 1 << 30

// fileSpec is one --file: a local file and its path under /work.
type fileSpec struct{ src, dest string }

// fileValue is --file SRC[:DEST], repeatable.
type fileValue struct{ specs *[]fileSpec }

func (v fileValue) String() string {
	if v.specs == nil {
		return ""
	}
	var s []string
	for _, f := range *v.specs {
		s = append(s, f.src+":"+f.dest)
	}
	return strings.Join(s, " ")
}

// Set takes SRC, or SRC:DEST. A SRC that exists as given, colons and all,
// is taken whole; otherwise the last colon ends it. DEST is relative to
// /work; one ending in / is a directory that gets SRC's name.
func (v fileValue) Set(s string) error {
	src, dest := s, ""
	if _, err := os.Stat(s); err != nil {
		if i := strings.LastIndexByte(s, ':'); i > 0 {
			src, dest = s[:i], s[i+1:]
		}
	}
	base := filepath.Base(src)
	switch {
	case dest == "":
		dest = base
	case strings.HasSuffix(dest, "/"):
		dest += base
	}
	dest = strings.TrimPrefix(dest, "/work/")
	if why := api.CheckFilePath(dest); why != "" {
		return fmt.Errorf("%q: the path under /work %s", dest, why)
	}
	*v.specs = append(*v.specs, fileSpec{src: src, dest: dest})
	return nil
}

// readInputs reads the --file sources into the request's files: text as
// it is, anything else (not UTF-8, or with control characters JSON would
// escape six-fold) as base64.
func readInputs(ctx context.Context, specs []fileSpec) ([]api.FileInput, error) {
	var files []api.FileInput
	for _, f := range specs {
		b, err := readFile(ctx, f.src, maxLocalFile)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", f.src, err)
		}
		in := api.FileInput{Path: f.dest, Content: string(b)}
		if !plainText(b) {
			in.Content, in.Encoding = base64.StdEncoding.EncodeToString(b), api.EncodingBase64
		}
		files = append(files, in)
	}
	return files, nil
}

// plainText reports whether b is UTF-8 text without control characters
// other than tab, newline and carriage return.
func plainText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

// fileNotes are the lines about a result's files on a terminal: what was
// skipped, and what --out would have saved.
func fileNotes(res *api.Result, saved bool) []string {
	var n []string
	if !saved {
		for _, f := range res.Files {
			n = append(n, fmt.Sprintf("cellblock: out/%s (%s, %s) not saved: --out DIR saves the files under /work/out", printable(f.Path), formatSize(f.Size), f.MIME))
		}
	}
	for _, s := range res.FilesSkipped {
		n = append(n, fmt.Sprintf("cellblock: out/%s not returned: %s", printable(s.Path), printable(s.Reason)))
	}
	return n
}

// saveFiles writes the result's files into dir, made if missing, each
// fetched from the daemon, checked against its hash, and renamed into
// place once whole. It reports each file on w.
func saveFiles(ctx context.Context, cl *client.Client, dir string, files []api.File, w io.Writer) error {
	if len(files) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for _, f := range files {
		if err := saveFile(ctx, cl, dir, f); err != nil {
			return fmt.Errorf("--out: out/%s: %w", printable(f.Path), err)
		}
		fmt.Fprintf(w, "cellblock: saved %s (%s)\n", printable(filepath.Join(dir, filepath.FromSlash(f.Path))), formatSize(f.Size))
	}
	return nil
}

// saveFile writes one file under dir. Its path comes from the daemon,
// which read it from the sandbox: it is checked again here, and never
// written through a symbolic link.
func saveFile(ctx context.Context, cl *client.Client, dir string, f api.File) error {
	if why := api.CheckFilePath(f.Path); why != "" || path.IsAbs(f.Path) {
		return fmt.Errorf("refused: the path %s", why)
	}
	dest := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	rc, size, err := cl.OpenArtifact(ctx, f.SHA256)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size != f.Size {
		return fmt.Errorf("the daemon has %d bytes, the result said %d", size, f.Size)
	}
	return writeAtomically(dest, rc, size, f.SHA256)
}

// writeAtomically writes size bytes of r to dest through a temporary file
// beside it, renamed over dest once whole (and, with sum, once its SHA-256
// is sum). dest is replaced if it is a file, never followed if it is a
// symbolic link.
func writeAtomically(dest string, r io.Reader, size int64, sum string) error {
	if st, err := os.Lstat(dest); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file", dest)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".part-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, size+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case n != size:
		return fmt.Errorf("got %d bytes of %d", n, size)
	case sum != "" && hex.EncodeToString(h.Sum(nil)) != sum:
		return errors.New("the content does not match its SHA-256")
	}
	if err := os.Chmod(tmp.Name(), 0o666&^umask()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

// saveOut saves the result's files with --out; it returns the exit
// status when that failed, else -1.
func (o *runOptions) saveOut(ctx context.Context, inv *invocation, cl *client.Client, res *api.Result) int {
	if o.out == "" || res.Error != nil {
		return -1
	}
	if err := saveFiles(ctx, cl, o.out, res.Files, inv.stderr); err != nil {
		return inv.failure(ctx, err)
	}
	return -1
}

// remoteFile splits ID:PATH; ok is false for a local path (no colon, or
// a slash before it: ./a:b is local).
func remoteFile(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.ContainsRune(id, '/') {
		return "", "", false
	}
	return id, strings.TrimPrefix(p, "/work/"), true
}

// copy is "cellblock session cp": one file into or out of a session.
func (c sessionCmd) copy(ctx context.Context, inv *invocation, args []string) int {
	fs := inv.newFlagSet("session cp")
	if st := inv.parse(c, fs, args); st >= 0 {
		return st
	}
	if fs.NArg() != 2 {
		return inv.usageError(c, "session cp needs a source and a destination: LOCAL ID:PATH or ID:PATH LOCAL")
	}
	src, dst := fs.Arg(0), fs.Arg(1)
	sid, sp, fromSession := remoteFile(src)
	did, dp, toSession := remoteFile(dst)
	switch {
	case fromSession == toSession:
		return inv.usageError(c, "session cp copies between this machine and a session: exactly one of %q and %q must be ID:PATH", src, dst)
	case toSession:
		if why := api.CheckFilePath(dp); why != "" {
			return inv.usageError(c, "%q: the path under /work %s", dp, why)
		}
		return inv.upload(ctx, src, did, dp)
	default:
		if why := api.CheckFilePath(sp); why != "" {
			return inv.usageError(c, "%q: the path under /work %s", sp, why)
		}
		return inv.download(ctx, sid, sp, dst)
	}
}

// upload copies the local file src ("-": standard input) to p in session
// id.
func (inv *invocation) upload(ctx context.Context, src, id, p string) int {
	var r io.Reader
	var size int64
	if src == "-" {
		b, err := readLimited(ctx, inv.stdin, maxLocalFile)
		if err != nil {
			fmt.Fprintf(inv.stderr, "cellblock: read standard input: %v\n", err)
			return exitUsage
		}
		r, size = strings.NewReader(string(b)), int64(len(b))
	} else {
		f, err := os.Open(src)
		if err != nil {
			fmt.Fprintf(inv.stderr, "cellblock: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			fmt.Fprintf(inv.stderr, "cellblock: %s is not a regular file\n", src)
			return exitUsage
		}
		r, size = f, st.Size()
	}
	w, err := inv.newClient().PutSessionFile(ctx, id, p, r, size)
	if err != nil {
		return inv.failure(ctx, err)
	}
	fmt.Fprintf(inv.stderr, "cellblock: %s:/work/%s written (%s)\n", id, w.Path, formatSize(w.Size))
	return exitOK
}

// download copies p of session id to the local dst ("-": standard
// output; a directory: the file's name in it).
func (inv *invocation) download(ctx context.Context, id, p, dst string) int {
	rc, size, err := inv.newClient().OpenSessionFile(ctx, id, p)
	if err != nil {
		return inv.failure(ctx, err)
	}
	defer rc.Close()
	if dst == "-" {
		n, err := io.Copy(inv.stdout, io.LimitReader(rc, size+1))
		if err == nil && n != size {
			err = fmt.Errorf("got %d bytes of %d", n, size)
		}
		if err != nil {
			return inv.failure(ctx, fmt.Errorf("%s:%s: %w", id, p, err))
		}
		return exitOK
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, path.Base(p))
	}
	if err := writeAtomically(dst, rc, size, ""); err != nil {
		return inv.failure(ctx, fmt.Errorf("%s:%s -> %s: %w", id, p, dst, err))
	}
	fmt.Fprintf(inv.stderr, "cellblock: %s saved (%s)\n", dst, formatSize(size))
	return exitOK
}

// umask is this process's file mode creation mask, read once: files
// saved get the mode a file made here would.
var umask = sync.OnceValue(func() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
})
