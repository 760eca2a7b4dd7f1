package integration

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/nsjail/layout"
	runnerfiles "github.com/cellblock/cellblock/nsjail/runner"
)

// escape runs code that prints one line per attempt, "BLOCKED <what>" or
// "ESCAPED <what>", and fails the test on any ESCAPED or missing line.
func escape(t *testing.T, code string, attempts int) {
	t.Helper()
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: code})
	if res.Error != nil {
		t.Fatalf("run refused: %+v", res.Error)
	}
	blocked := 0
	for _, line := range strings.Split(res.Stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "ESCAPED"):
			t.Errorf("%s", line)
		case strings.HasPrefix(line, "BLOCKED"):
			blocked++
		}
	}
	if blocked != attempts {
		t.Errorf("%d of %d attempts reported BLOCKED; exit %d\nstdout:\n%s\nstderr:\n%s", blocked, attempts, res.ExitCode, res.Stdout, res.Stderr)
	}
}

const tryPrelude = `
def attempt(what, fn):
    try:
        r = fn()
    except OSError as e:
        print("BLOCKED", what, "-", e.__class__.__name__, e.errno)
        return
    print("ESCAPED", what, "->", repr(r)[:200])
`

func TestEscapeReadHostFiles(t *testing.T) {
	requireRoot(t)
	secret := "cellblock-host-secret-" + fmt.Sprint(os.Getpid())
	path := "/root/cellblock-it-secret"
	if err := os.WriteFile(path, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	d := daemon(t)
	res := run(t, d, &api.RunRequest{Code: fmt.Sprintf(`
import os
paths = [%q, "/proc/1/root%s", "/etc/shadow", "/proc/1/root/etc/shadow", "/root/.bash_history", "/var/lib/cellblock"]
for p in paths:
    try:
        with open(p, "rb") as f:
            print("READ", p, f.read(200))
    except OSError as e:
        print("BLOCKED", p, e.errno)
for root, dirs, files in os.walk("/"):
    if root.startswith("/proc"):
        dirs[:] = []
        continue
    for f in files:
        try:
            with open(os.path.join(root, f), "rb") as fh:
                if %q.encode() in fh.read():
                    print("ESCAPED found the secret in", os.path.join(root, f))
        except OSError:
            pass
`, path, path, secret)})
	if strings.Contains(res.Stdout, secret) || strings.Contains(res.Stdout, "ESCAPED") {
		t.Fatalf("the jail read a host file:\n%s", res.Stdout)
	}
	if strings.Count(res.Stdout, "BLOCKED") != 6 {
		t.Fatalf("expected every read to fail:\nstdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	}
}

func TestEscapeWriteRootfs(t *testing.T) {
	escape(t, tryPrelude+`
import os, sys
attempt("write /usr/lib", lambda: open("/usr/lib/evil", "w"))
attempt("write next to python", lambda: open(os.path.dirname(sys.executable) + "/evil", "w"))
attempt("write /etc/passwd", lambda: open("/etc/passwd", "a"))
attempt("chmod python", lambda: os.chmod(sys.executable, 0o777))
attempt("mkdir /evil", lambda: os.mkdir("/evil"))
attempt("write /.cellblock/init", lambda: open("/.cellblock/init", "ab"))
`, 6)
	// And the writable places really are writable, and sized.
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import os
for p in ("/tmp/x", "/work/x", "/dev/shm/x"):
    with open(p, "w") as f:
        f.write("ok")
st = os.statvfs("/tmp")
print(st.f_blocks * st.f_frsize)
`, TmpBytes: 8 << 20})
	if strings.TrimSpace(res.Stdout) != fmt.Sprint(8<<20) {
		t.Errorf("/tmp size %q, want %d", res.Stdout, 8<<20)
	}
}

func TestEscapeNetwork(t *testing.T) {
	requireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host listener"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	escape(t, tryPrelude+fmt.Sprintf(`
import socket
attempt("connect to the host's 127.0.0.1", lambda: socket.create_connection(("127.0.0.1", %d), timeout=2).recv(100))
attempt("connect to a public address", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
attempt("resolve a name", lambda: socket.getaddrinfo("example.com", 80))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
attempt("packet socket", lambda: socket.socket(17, socket.SOCK_RAW, 0))
`, port), 5)
}

func TestNetworkIsLoopbackOnly(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import socket, json
names = [n for _, n in socket.if_nameindex()]
routes = open("/proc/net/route").read().strip().splitlines()[1:]
routes6 = [l for l in open("/proc/net/ipv6_route").read().splitlines() if not l.endswith("lo")]
# loopback works inside the jail
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.create_connection(srv.getsockname()); s, _ = srv.accept(); c.send(b"ping")
print(json.dumps({"names": names, "routes": routes, "routes6": routes6, "loop": s.recv(4).decode()}))
`})
	var got struct {
		Names   []string
		Routes  []string
		Routes6 []string
		Loop    string
	}
	mustJSON(t, res.Stdout, &got)
	if len(got.Names) != 1 || got.Names[0] != "lo" {
		t.Errorf("interfaces %v, want only lo", got.Names)
	}
	if len(got.Routes) != 0 || len(got.Routes6) != 0 {
		t.Errorf("routes visible: %v %v", got.Routes, got.Routes6)
	}
	if got.Loop != "ping" {
		t.Errorf("loopback inside the jail does not work: %q", got.Loop)
	}
}

func TestEscapeSeeHost(t *testing.T) {
	requireRoot(t)
	t.Setenv("CELLBLOCK_IT_MARKER", "host-env-marker")
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(pids)
print(open("/proc/1/cmdline","rb").read().split(b"\0")[0].decode())
print(open("/proc/self/environ","rb").read().decode(errors="replace"))
print(os.uname().nodename)
try:
    open("/proc/1/environ","rb").read()
    print("init environ readable")
except PermissionError:
    print("init environ refused")
`})
	lines := strings.Split(res.Stdout, "\n")
	var pids []int
	mustJSON(t, lines[0], &pids)
	if len(pids) != 2 || pids[0] != 1 {
		t.Errorf("processes visible in the jail: %s (want only the init and python)", lines[0])
	}
	if lines[1] != "/.cellblock/init" {
		t.Errorf("pid 1 is %q", lines[1])
	}
	if strings.Contains(res.Stdout, "host-env-marker") || strings.Contains(res.Stdout, "SUDO") {
		t.Errorf("host environment visible:\n%s", res.Stdout)
	}
	if lines[3] != "cellblock" {
		t.Errorf("hostname %q", lines[3])
	}
	// The init is not dumpable: its environment is not the program's to
	// read (see TestInitIsNotReachableThroughProc).
	if lines[4] != "init environ refused" {
		t.Errorf("/proc/1/environ: %q", lines[4])
	}
}

func TestPrivilegesDropped(t *testing.T) {
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `
import os
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
for k in ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
    print(k, st[k].split()[0])
`})
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		got[k] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if got["Uid"] == "0" || got["Gid"] == "0" {
		t.Errorf("runs as uid %s gid %s", got["Uid"], got["Gid"])
	}
}

func TestEscapeProcAndCgroupFiles(t *testing.T) {
	escape(t, tryPrelude+`
import os
def write(p, data="1"):
    with open(p, "w") as f:
        f.write(data)
attempt("write /proc/sys/kernel/hostname", lambda: write("/proc/sys/kernel/hostname", "evil"))
attempt("write /proc/sys/vm/drop_caches", lambda: write("/proc/sys/vm/drop_caches", "3"))
attempt("write /proc/sysrq-trigger", lambda: write("/proc/sysrq-trigger", "h"))
attempt("open /sys/fs/cgroup", lambda: os.listdir("/sys/fs/cgroup"))
attempt("mount cgroup2", lambda: __import__("ctypes").CDLL(None, use_errno=True).mount(b"none", b"/tmp", b"cgroup2", 0, None) == 0 or (_ for _ in ()).throw(OSError(__import__("ctypes").get_errno(), "mount")))
attempt("read /proc/kcore", lambda: open("/proc/kcore", "rb").read(10) or (_ for _ in ()).throw(OSError(1, "empty")))
`, 6)
}

func TestEscapeDevices(t *testing.T) {
	escape(t, tryPrelude+`
import os
for dev in ("/dev/kvm", "/dev/mem", "/dev/kmem", "/dev/kmsg", "/dev/port", "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/tty", "/dev/console"):
    attempt("open " + dev, lambda: os.open(dev, os.O_RDWR))
attempt("mknod a disk", lambda: os.mknod("/tmp/disk", 0o600 | 0o060000, os.makedev(8, 0)))
attempt("mknod mem", lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))
`, 12)
	d := daemon(t)
	res := runOK(t, d, &api.RunRequest{Code: `import os; print(sorted(os.listdir("/dev")))`})
	if !strings.Contains(res.Stdout, "'null'") || strings.Contains(res.Stdout, "kvm") || strings.Contains(res.Stdout, "kmsg") {
		t.Errorf("/dev holds %s", res.Stdout)
	}
}

// TestWithoutUserNamespace runs the jail the way hosts that refuse user
// namespaces get it: as the host's nobody, still without capabilities,
// under seccomp and in every other namespace.
func TestWithoutUserNamespace(t *testing.T) {
	d := startDaemon(t, "--userns", "off")
	res := runOK(t, d, &api.RunRequest{Code: `
import os
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
open("/work/x", "w").write("ok"); open("/tmp/x", "w").write("ok")
try:
    open("/usr/lib/evil", "w")
    print("ESCAPED")
except OSError:
    pass
print(os.getuid(), st["CapEff"].strip(), st["NoNewPrivs"].strip(), st["Seccomp"].strip())
`})
	if got := strings.TrimSpace(res.Stdout); got != "65534 0000000000000000 1 2" {
		t.Errorf("without a user namespace: %q", got)
	}
}

// The runner's directory is bind-mounted read-only in every jail: a run can
// change neither the runner nor the cellblock package, for itself or for
// the runs after it (every jail mounts the same host directory), and the
// next run imports them intact.
func TestEscapeWriteRunnerDir(t *testing.T) {
	escape(t, tryPrelude+fmt.Sprintf(`
import os
R = %q
P = R + "/cellblock"
attempt("append to the runner", lambda: open(R + "/_cellblock_runner.py", "a"))
attempt("truncate the runner", lambda: os.truncate(R + "/_cellblock_runner.py", 0))
attempt("create a module in the runner dir", lambda: open(R + "/sitecustomize.py", "x"))
attempt("mkdir in the runner dir", lambda: os.mkdir(R + "/evil"))
attempt("chmod the runner", lambda: os.chmod(R + "/_cellblock_runner.py", 0o777))
attempt("chmod the runner dir", lambda: os.chmod(R, 0o777))
attempt("rename the runner", lambda: os.rename(R + "/_cellblock_runner.py", R + "/old.py"))
attempt("unlink the runner", lambda: os.unlink(R + "/_cellblock_runner.py"))
attempt("touch the runner", lambda: os.utime(R + "/_cellblock_runner.py", (0, 0)))
attempt("overwrite cellblock/__init__.py", lambda: open(P + "/__init__.py", "w"))
attempt("create cellblock/evil.py", lambda: open(P + "/evil.py", "x"))
attempt("create cellblock/__pycache__", lambda: os.mkdir(P + "/__pycache__"))
attempt("chmod cellblock/_channel.py", lambda: os.chmod(P + "/_channel.py", 0o666))
attempt("chmod the package dir", lambda: os.chmod(P, 0o777))
attempt("rename cellblock/_channel.py", lambda: os.rename(P + "/_channel.py", P + "/_old.py"))
attempt("rename the package", lambda: os.rename(P, R + "/cb"))
attempt("symlink into the package", lambda: os.symlink("/tmp/x", P + "/_evil.py"))
# And the mount itself is read-only, whatever the files' modes.
mounts = [l.split() for l in open("/proc/self/mountinfo")]
opts = [m[5].split(",") for m in mounts if m[4] == R]
if opts and "ro" in opts[-1]:
    print("BLOCKED the mount is read-only")
else:
    print("ESCAPED the mount's options are", opts)
`, layout.RunnerDir), 18)

	// A run after that finds every file as the daemon installed it, and
	// nothing more, and cellblock works.
	want := map[string]string{}
	err := fs.WalkDir(runnerfiles.Files(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(runnerfiles.Files(), p)
		want[p] = fmt.Sprintf("%x", sha256.Sum256(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	d := daemon(t)
	res, err := d.Client.Run(context.Background(), &api.RunRequest{Mode: api.ModeCell, Code: fmt.Sprintf(`
import hashlib, os, cellblock
found = {}
for root, dirs, files in os.walk(%q):
    for f in dirs + files:
        p = os.path.join(root, f)
        found[os.path.relpath(p, %q)] = "dir" if os.path.isdir(p) else hashlib.sha256(open(p, "rb").read()).hexdigest()
cellblock.display({"shown": True})
{"files": found, "module": cellblock.__file__}
`, layout.RunnerDir, layout.RunnerDir)})
	if err != nil || res.Error != nil || res.ExitCode != 0 || res.Value == nil {
		t.Fatalf("import cellblock after the attempts: %+v %v", res, err)
	}
	var got struct {
		Files  map[string]string `json:"files"`
		Module string            `json:"module"`
	}
	if err := json.Unmarshal(res.Value.JSON, &got); err != nil {
		t.Fatalf("value %s: %v", res.Value.JSON, err)
	}
	delete(got.Files, "cellblock") // the package's directory
	if !maps.Equal(got.Files, want) {
		t.Errorf("the runner's files in a jail:\n%v\nwant the daemon's:\n%v", got.Files, want)
	}
	if got.Module != layout.RunnerDir+"/cellblock/__init__.py" || len(res.Display) != 1 {
		t.Errorf("cellblock from %q, %d display items", got.Module, len(res.Display))
	}
}
