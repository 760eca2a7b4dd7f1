// Package integration runs the real cellblockd, as root, over its real Unix
// socket: real kernel, real Python, real jails. Nothing here is mocked.
// Every test skips with a reason when not run as root.
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/daemontest"
)

// repoRoot is the repository's top directory.
var repoRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}()

// binDir holds the binaries `make build` made.
var binDir = filepath.Join(repoRoot, "bin")

// sharedState is one state directory for the whole test binary, so that the
// default rootfs is built once.
var (
	sharedStateOnce sync.Once
	sharedStateDir  string
	sharedStateErr  error
)

func stateDir(t *testing.T) string {
	t.Helper()
	sharedStateOnce.Do(func() {
		sharedStateDir, sharedStateErr = os.MkdirTemp("", "cellblock-it-state-")
		if sharedStateErr == nil {
			sharedStateErr = os.Chmod(sharedStateDir, 0o755)
		}
	})
	if sharedStateErr != nil {
		t.Fatalf("state dir: %v", sharedStateErr)
	}
	return sharedStateDir
}

// requireRoot skips a privileged test, saying why.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon builds namespaces, mounts and cgroups (run `sudo make test`)")
	}
}

func bin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make build` first (%v)", p, err)
	}
	return p
}

// Daemon is a cellblockd started by a test (package daemontest owns its
// process), with the state directory it was given.
type Daemon struct {
	*daemontest.Daemon
	StateDir string
}

// readyTimeout bounds a daemon's start-up: it may be building a rootfs.
const readyTimeout = 120 * time.Second

// stopGrace is how long a daemon may take to exit after SIGTERM.
const stopGrace = 60 * time.Second

// daemonConfig is how the suite starts cellblockd: its log next to its
// socket, args completed with the shared or a fresh state directory and a
// cgroup name of the test's own, which the leftover checks look at.
func daemonConfig(t *testing.T, socket string, args ...string) (daemontest.Config, string) {
	t.Helper()
	state := flagValue(args, "--state-dir")
	if state == "" {
		state = freshStateDir(t)
		args = append(args, "--state-dir", state)
	}
	if flagValue(args, "--cgroup-name") == "" {
		args = append(args, "--cgroup-name", freshCgroupName(t))
	}
	ourCgroupNames.Store(flagValue(args, "--cgroup-name"), true)
	return daemontest.Config{
		Binary:  bin(t, "cellblockd"),
		Socket:  socket,
		Args:    args,
		LogPath: filepath.Join(filepath.Dir(socket), "daemon.log"),
	}, state
}

// launch starts a daemon as cfg says, without waiting for it. It is
// stopped with SIGTERM when the test ends.
func launch(t *testing.T, cfg daemontest.Config, state string) *Daemon {
	t.Helper()
	dd, err := daemontest.Launch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Daemon: dd, StateDir: state}
	t.Cleanup(func() { d.Stop(t) })
	return d
}

// waitReady waits until d says it is ready, failing the test if it
// exits first or takes longer than readyTimeout.
func (d *Daemon) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := d.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// startDaemon starts cellblockd with a fresh state dir (unless args set
// --state-dir) on a private socket and waits until it is ready. It is
// stopped with SIGTERM when the test ends.
func startDaemon(t *testing.T, args ...string) *Daemon {
	t.Helper()
	requireRoot(t)
	dir, err := os.MkdirTemp("", "cellblock-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg, state := daemonConfig(t, filepath.Join(dir, "cellblockd.sock"), args...)
	d := launch(t, cfg, state)
	d.waitReady(t)
	return d
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// cgroupName gives a test's own daemon its own cgroup subtree, so that its
// start-up sweep cannot touch the shared daemon's runs.
func cgroupName(t *testing.T) string {
	var b strings.Builder
	for _, c := range t.Name() {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("cellblock-%d-%s", os.Getpid(), name)
}

// freshCgroupName is cgroupName(t) for the test's first daemon, and the
// same with a number after it for each later one: two daemons may not
// share a cgroup name while both live (the second refuses to start).
func freshCgroupName(t *testing.T) string {
	name := cgroupName(t)
	for i := 2; ; i++ {
		if _, used := ourCgroupNames.Load(name); !used {
			return name
		}
		name = fmt.Sprintf("%s-%d", cgroupName(t), i)
	}
}

// sharedCgroupName is the shared daemon's --cgroup-name: this process's
// own, so that two suites on one machine never count each other's jails.
var sharedCgroupName = fmt.Sprintf("cellblock-it%d", os.Getpid())

// searchableDir is a new directory that every user may search (0755),
// removed when the test ends: a state directory whose rootfs jails in a
// user namespace must reach, or a socket's home for another uid.
func searchableDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// freshStateDir is a new state directory holding a hard-linked copy of the
// shared daemon's rootfs store, so that a test's own daemon starts without
// building a rootfs again yet shares no jail state.
func freshStateDir(t *testing.T) string {
	t.Helper()
	daemon(t) // the shared daemon has built the store
	dir := searchableDir(t, "cellblock-it-state-")
	out, err := exec.Command("cp", "-al", filepath.Join(stateDir(t), "rootfs"), filepath.Join(dir, "rootfs")).CombinedOutput()
	if err != nil {
		t.Fatalf("copy rootfs store: %v\n%s", err, out)
	}
	return dir
}

// Stop sends SIGTERM and waits; it fails the test if the daemon does not
// exit 0 within stopGrace. A daemon that has exited already is left alone.
func (d *Daemon) Stop(t *testing.T) {
	t.Helper()
	if d.Exited() {
		return
	}
	if err := d.Daemon.Stop(stopGrace); err != nil {
		t.Errorf("%v\n%s", err, d.Log())
	}
}

// shared is one daemon for the tests that don't need their own.
var (
	sharedMu     sync.Mutex
	sharedDaemon *Daemon
)

// daemon returns the shared daemon, starting it on first use. It lives
// until the test binary exits (TestMain stops it).
func daemon(t *testing.T) *Daemon {
	t.Helper()
	requireRoot(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedDaemon != nil {
		if sharedDaemon.Exited() {
			t.Fatalf("the shared daemon died earlier:\n%s", sharedDaemon.Log())
		}
		return sharedDaemon
	}
	// Started outside any test's cleanup so that it outlives the test.
	d, err := startShared()
	if err != nil {
		t.Fatal(err)
	}
	sharedDaemon = d
	return d
}

func startShared() (*Daemon, error) {
	dir, err := os.MkdirTemp("", "cellblock-it-shared-")
	if err != nil {
		return nil, err
	}
	// Other uids must reach the socket for the peer-credential tests.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	sharedStateOnce.Do(func() {
		sharedStateDir, sharedStateErr = os.MkdirTemp("", "cellblock-it-state-")
		if sharedStateErr == nil {
			sharedStateErr = os.Chmod(sharedStateDir, 0o755)
		}
	})
	if sharedStateErr != nil {
		return nil, sharedStateErr
	}
	socket := filepath.Join(dir, "cellblockd.sock")
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	dd, err := daemontest.Start(ctx, daemontest.Config{
		Binary:  filepath.Join(binDir, "cellblockd"),
		Socket:  socket,
		Args:    []string{"--state-dir", sharedStateDir, "--cgroup-name", sharedCgroupName, "--max-concurrent", "8", "--allow-uid", "65533"},
		LogPath: filepath.Join(dir, "daemon.log"),
	})
	if err != nil {
		return nil, fmt.Errorf("shared daemon: %w", err)
	}
	return &Daemon{Daemon: dd, StateDir: sharedStateDir}, nil
}

// afterSuite registers f to run when every test is over (fixtures that
// tests share, such as a wheelhouse, are removed so).
func afterSuite(f func()) {
	afterSuiteMu.Lock()
	defer afterSuiteMu.Unlock()
	afterSuiteFuncs = append(afterSuiteFuncs, f)
}

var (
	afterSuiteMu    sync.Mutex
	afterSuiteFuncs []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	afterSuiteMu.Lock()
	for _, f := range afterSuiteFuncs {
		f()
	}
	afterSuiteMu.Unlock()
	if sharedDaemon != nil {
		if err := sharedDaemon.Daemon.Stop(stopGrace); err != nil {
			fmt.Fprintf(os.Stderr, "shared %v\n", err)
			code = 1
		}
		// Every daemon is gone now, with its prestarted jails: nothing
		// of ours may be left at all.
		if leftovers := leftoverCgroups(); len(leftovers) > 0 {
			fmt.Fprintf(os.Stderr, "run cgroups left behind: %v\n", leftovers)
			code = 1
		}
		if procs := ourJailProcesses(); len(procs) > 0 {
			fmt.Fprintf(os.Stderr, "jail processes left behind: %v\n", procs)
			code = 1
		}
	}
	if sharedStateDir != "" {
		os.RemoveAll(sharedStateDir)
	}
	os.Exit(code)
}

// run carries out req on d and fails the test if the daemon could not be
// reached.
func run(t *testing.T, d *Daemon, req *api.RunRequest) *api.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := d.Client.Run(ctx, req)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, d.Log())
	}
	return res
}

// runOK runs code and fails unless it exited 0 without an error.
func runOK(t *testing.T, d *Daemon, req *api.RunRequest) *api.Result {
	t.Helper()
	res := run(t, d, req)
	if res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("run failed: exit %d, error %+v\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.Error, res.Stdout, res.Stderr)
	}
	return res
}

// ourCgroupNames are the --cgroup-name values of the daemons this test
// binary started (sharedCgroupName for the shared one), so that the leftover
// checks look only at our own subtrees.
var ourCgroupNames = func() *sync.Map {
	var m sync.Map
	m.Store(sharedCgroupName, true)
	return &m
}()

// leftoverCgroups lists run cgroups that our daemons left in any hierarchy:
// directories below one of our subtrees (v1) or below its "runs" (v2).
func leftoverCgroups() []string {
	return daemontest.JailCgroups(func(subtree string) bool {
		_, ours := ourCgroupNames.Load(subtree)
		return ours
	})
}

// jailProcesses lists live host processes of our daemons' jails: in one
// of our cgroup subtrees (so that another suite's or daemon's jails on the
// same machine do not count), with a uid in the jails' range or the
// no-userns jail uid. Zombies are not listed: they hold nothing but a pid,
// and the reaping of jail inits that outlived a killed daemon is up to the
// host's pid 1.
func jailProcesses() []string {
	var ours []string
	for _, p := range anyJailProcesses() {
		if inCgroup(p, func(name string) bool { _, ok := ourCgroupNames.Load(name); return ok }) {
			ours = append(ours, p)
		}
	}
	return ours
}

// anyJailProcesses is jailProcesses on the whole machine.
func anyJailProcesses() []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "Name:") {
				name = strings.TrimSpace(strings.TrimPrefix(line, "Name:"))
			}
			if strings.HasPrefix(line, "State:") && strings.Contains(line, "zombie") {
				break
			}
			if strings.HasPrefix(line, "Uid:") {
				fields := strings.Fields(line)
				if len(fields) > 1 {
					uid, _ := strconv.ParseInt(fields[1], 10, 64)
					if uid >= 1_000_000_000 && uid < 1_000_000_000+65536 {
						found = append(found, fmt.Sprintf("%d(%s uid %d)", pid, name, uid))
					}
				}
			}
		}
		f.Close()
	}
	return found
}

// prestartPrefix starts the names of jails a daemon builds ahead of
// requests (nsjail.Pool).
const prestartPrefix = "pre-"

// idleInit and idleJailMember are daemontest's, for the pids the suite
// reads from /proc and cgroup.procs as strings.
func idleInit(pid string) bool {
	n, err := strconv.Atoi(pid)
	return err == nil && daemontest.IdleInit(n)
}

func idleJailMember(pid string) bool {
	n, err := strconv.Atoi(pid)
	return err == nil && daemontest.IdleJailMember(n)
}

// ourJailProcesses is jailProcesses limited to those in a cgroup of one
// of our daemons, so that a cellblockd running on the same machine does
// not fail the suite.
func ourJailProcesses() []string {
	var found []string
	for _, p := range jailProcesses() {
		if inCgroup(p, func(name string) bool { _, ours := ourCgroupNames.Load(name); return ours }) {
			found = append(found, p)
		}
	}
	return found
}

// inCgroup reports whether the process p (an entry of jailProcesses) sits
// in a cgroup with a path component that match accepts. A process that is
// gone is in none.
func inCgroup(p string, match func(name string) bool) bool {
	pid, _, _ := strings.Cut(p, "(")
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return false
	}
	for _, part := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '/' || r == '\n' || r == ':' }) {
		if match(part) {
			return true
		}
	}
	return false
}

// runProcesses is jailProcesses without the processes of prestarted
// jails that wait for a run: what runs left behind while their daemon
// lives.
func runProcesses() []string {
	var found []string
	for _, p := range jailProcesses() {
		pid, _, _ := strings.Cut(p, "(")
		if !idleJailMember(pid) {
			found = append(found, p)
		}
	}
	return found
}

// runCgroups is leftoverCgroups without the cgroups of prestarted jails
// that wait for a run (holding nothing but their idle init and runner).
func runCgroups() []string {
	var found []string
	for _, p := range leftoverCgroups() {
		if !idleJailCgroup(p) {
			found = append(found, p)
		}
	}
	return found
}

// idleJailCgroup reports whether dir is a prestarted jail's cgroup holding
// nothing but its idle init and its runner.
func idleJailCgroup(dir string) bool {
	if !strings.HasPrefix(filepath.Base(dir), prestartPrefix) {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	pids := strings.Fields(string(b))
	if err != nil || len(pids) == 0 || len(pids) > 2 {
		return false
	}
	for _, p := range pids {
		if !idleJailMember(p) {
			return false
		}
	}
	return true
}

// mountCount is the number of mounts in the test's mount namespace.
func mountCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}
