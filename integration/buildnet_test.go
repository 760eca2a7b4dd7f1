package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// sneakyBackend is the in-tree PEP 517 build backend of the test's sdist:
// it needs nothing installed (build-system.requires is empty), so pip
// builds it in its isolated build environment with no index at all. While
// it builds the wheel it tries to reach the canary, a server on the host's
// loopback that is not the index: with a raw socket, and with urllib,
// which goes through whatever proxy the environment names. The wheel
// records what came of each.
const sneakyBackend = `import base64, hashlib, os, socket, urllib.request, zipfile

CANARY = %d
ABSTRACT = %q

def _probe():
    out = []
    try:
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.settimeout(5)
        u.connect("\0" + ABSTRACT)
        u.close()
        out.append("abstract reached")
    except OSError as e:
        out.append("abstract refused: %%s" %% e)
    try:
        socket.create_connection(("127.0.0.1", CANARY), timeout=5).close()
        out.append("socket reached")
    except OSError as e:
        out.append("socket refused: %%s" %% e)
    try:
        urllib.request.urlopen("http://127.0.0.1:%%d/" %% CANARY, timeout=5).read()
        out.append("urllib reached")
    except Exception as e:
        out.append("urllib refused: %%s" %% e)
    return out

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "cbsneaky-1.0-py3-none-any.whl"
    di = "cbsneaky-1.0.dist-info"
    files = {
        "cbsneaky/__init__.py": "PROBES = %%r\n" %% (_probe(),),
        di + "/METADATA": "Metadata-Version: 2.1\nName: cbsneaky\nVersion: 1.0\n",
        di + "/WHEEL": "Wheel-Version: 1.0\nGenerator: cellblock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%%s,sha256=%%s,%%d" %% (path, digest, len(text.encode())))
    record.append(di + "/RECORD,,")
    files[di + "/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return name
`

// sdist is a gzipped tar of a source distribution: files under the
// top-level directory NAME-VERSION/.
func sdist(t *testing.T, top string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testIndex is a PEP 503 simple index served on the host's 127.0.0.1:
// one page per project linking its files, with their hashes.
type testIndex struct {
	URL  string // .../simple/
	Port int
	hits atomic.Int64
}

// serveIndex serves files ("name-version.tar.gz" or a wheel's name ->
// content) for the projects named before the first '-' of each file.
func serveIndex(t *testing.T, files map[string][]byte) *testIndex {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ix := &testIndex{Port: ln.Addr().(*net.TCPAddr).Port}
	ix.URL = fmt.Sprintf("http://127.0.0.1:%d/simple/", ix.Port)
	pages := map[string]*strings.Builder{}
	for name, content := range files {
		project, _, _ := strings.Cut(name, "-")
		if pages[project] == nil {
			pages[project] = &strings.Builder{}
			pages[project].WriteString("<!DOCTYPE html><html><body>\n")
		}
		sum := sha256.Sum256(content)
		fmt.Fprintf(pages[project], "<a href=\"/files/%s#sha256=%s\">%s</a>\n", name, hex.EncodeToString(sum[:]), name)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/{project}/", func(w http.ResponseWriter, r *http.Request) {
		ix.hits.Add(1)
		page, ok := pages[r.PathValue("project")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, page.String()+"</body></html>\n")
	})
	mux.HandleFunc("/files/{name}", func(w http.ResponseWriter, r *http.Request) {
		ix.hits.Add(1)
		content, ok := files[r.PathValue("name")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(content)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ix
}

// canary is a TCP server on the host's 127.0.0.1 and a Unix socket in
// the host's abstract namespace that count the connections they accept.
type canary struct {
	Port     int
	Abstract string // the abstract socket's name, without its leading NUL
	count    atomic.Int64
}

func startCanary(t *testing.T) *canary {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &canary{Port: ln.Addr().(*net.TCPAddr).Port, Abstract: fmt.Sprintf("cellblock-canary-%d-%d", os.Getpid(), ln.Addr().(*net.TCPAddr).Port)}
	un, err := net.Listen("unix", "@"+c.Abstract)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, l := range []net.Listener{ln, un} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				c.count.Add(1)
				conn.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\ncanary\n"))
				conn.Close()
			}
		}()
	}
	t.Cleanup(func() { ln.Close(); un.Close(); wg.Wait() })
	return c
}

// A dependency build whose package runs code (an sdist, --allow-sdist)
// must not reach anything on the host's loopback but its index: build
// jails used to share the host's network namespace, where such code
// reached every service on 127.0.0.1 (and abstract Unix sockets).
func TestBuildJailCannotReachHostLoopback(t *testing.T) {
	requireRoot(t)
	can := startCanary(t)
	ix := serveIndex(t, map[string][]byte{
		"cbsneaky-1.0.tar.gz": sdist(t, "cbsneaky-1.0", map[string]string{
			"pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n",
			"backend.py":     fmt.Sprintf(sneakyBackend, can.Port, can.Abstract),
			"PKG-INFO":       "Metadata-Version: 2.1\nName: cbsneaky\nVersion: 1.0\n",
		}),
	})
	t.Setenv("PATH", pathWithout(t, "uv")) // pip, which builds sdists in-tree
	d := startDaemon(t, "--prestart", "0", "--index-url", ix.URL, "--allow-sdist")
	res := runOK(t, d, &api.RunRequest{Code: "import cbsneaky\nfor p in cbsneaky.PROBES: print(p)", Dependencies: []string{"cbsneaky"}})
	t.Logf("the build's probes:\n%s", res.Stdout)
	if ix.hits.Load() == 0 {
		t.Errorf("the build never asked the index")
	}
	if n := can.count.Load(); n != 0 {
		t.Errorf("the build jail reached a server on the host's loopback or an abstract socket %d times", n)
	}
	if log := d.Log(); !strings.Contains(log, "a dependency build was refused a connection") {
		t.Errorf("the daemon did not log the build's refused connection:\n%s", log)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "abstract refused") || !strings.HasPrefix(lines[1], "socket refused") || !strings.HasPrefix(lines[2], "urllib refused") {
		t.Errorf("the build's probes: %q", res.Stdout)
	}
}
