// Package vm proves cellblock's cgroup v2 path on a real cgroup v2 kernel,
// from a host that may itself be hybrid or v1. The test boots Debian's
// generic kernel under qemu (TCG: nested KVM does not run stock kernels
// here) with cgroup v1 disabled, shares the host's /usr, /etc, the built
// binaries and a scratch directory over virtio-9p, and runs the real
// cellblockd with real jails inside. The guest (package guest, built as a
// static /init) reports one line per check; every check becomes a subtest
// here.
//
// The test needs root (it runs apt-get and the daemon needs it in the
// guest's image of the host) and skips without it. Outside CI it skips
// when qemu or the kernel cannot be had; in CI (CI set) that is a failure,
// so that the proof never passes silently. Run it with `sudo make vmtest`.
package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellblock/cellblock/integration/vm/guest"
)

// Limits of one VM run. Under TCG the guest boots in seconds and the
// whole suite takes a few minutes; these only bound a hang.
const (
	guestTimeout = 6 * time.Minute // the guest reports what is left as failed
	qemuTimeout  = 8 * time.Minute // then qemu is killed
	// stallTimeout: the guest prints a line for every step; the longest
	// normal silence is the daemon building its rootfs (10-16 s, about a
	// minute on a busy host).
	stallTimeout = 150 * time.Second
	guestMemory  = "2048" // MiB: more than the 1 GiB the OOM check asks for
	guestCPUs    = "2"
)

// Paths in the guest.
const (
	guestBin = "/opt/cellblock/bin" // the repository's bin/
	guestOut = "/vmtest"            // the writable scratch share
)

// defaultCacheDir keeps the unpacked kernel between runs.
const defaultCacheDir = "/var/cache/cellblock-vm"

// repoRoot is the repository's top directory.
var repoRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}()

// unavailable ends the test when the VM's ingredients cannot be had: a skip
// on a developer's machine, a failure in CI.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set: the cgroup v2 proof must run)", msg)
	}
	t.Skipf("%s; install qemu-system-x86, xz-utils and zstd, or run `sudo make vmtest`", msg)
}

func TestCgroupV2InVM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it downloads a kernel with apt-get and boots a VM whose jails need root (run `sudo make vmtest`)")
	}
	t0 := time.Now()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		unavailable(t, "qemu-system-x86_64 not found")
	}
	cacheDir := os.Getenv("CELLBLOCK_VM_CACHE")
	if cacheDir == "" {
		cacheDir = defaultCacheDir
	}
	wanted := vmKernels
	if env := os.Getenv("CELLBLOCK_VM_KERNEL"); env != "" {
		wanted = []vmKernel{{meta: env, required: true}} // that kernel alone
	}
	var kernels []*kernel
	var pkgs []string
	for _, vk := range wanted {
		k, err := ensureKernel(cacheDir, vk.meta, t.Logf)
		switch {
		case err != nil && errors.Is(err, errSetup) && !vk.required:
			t.Logf("not booting %s: %v", vk.meta, err)
			continue
		case err != nil && errors.Is(err, errSetup):
			unavailable(t, "kernel: %v", err)
		case err != nil:
			t.Fatalf("kernel: %v", err)
		}
		if !slices.Contains(pkgs, k.pkg) {
			kernels = append(kernels, k)
			pkgs = append(pkgs, k.pkg)
		}
	}
	pruneKernels(cacheDir, pkgs)
	t.Logf("kernels %v ready after %v", pkgs, time.Since(t0).Round(time.Millisecond))
	for _, k := range kernels {
		t.Run(strings.TrimPrefix(k.pkg, "linux-image-"), func(t *testing.T) { bootAndCheck(t, qemu, k) })
	}
}

// bootAndCheck boots kernel k with the daemon and the cgroup tests and
// turns each of the guest's checks into a subtest.
func bootAndCheck(t *testing.T, qemu string, k *kernel) {
	t0 := time.Now()
	bin := filepath.Join(repoRoot, "bin")
	for _, b := range []string{"cellblockd", "cellblock-init"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s is missing: run `make build` first (%v)", filepath.Join(bin, b), err)
		}
	}
	python, pyShare := guestPython(t)

	// The scratch share: built binaries in, results and logs out. Kept
	// when the test fails.
	out, err := os.MkdirTemp("", "cellblock-vm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM files kept in %s (console.log, daemon.log, cgroup-test.log, results)", out)
			return
		}
		os.RemoveAll(out)
	})
	tb := time.Now()
	goBuild(t, filepath.Join(out, "init"), "build", "./integration/vm/guestinit")
	goBuild(t, filepath.Join(out, "cgroup.test"), "test", "-c", "./cgroup")
	t.Logf("guest init and cgroup test binary built in %v", time.Since(tb).Round(time.Millisecond))

	shares := []guest.Share{
		{Tag: "usr", Path: "/usr"},
		{Tag: "etc", Path: "/etc"},
		{Tag: "cellblock-bin", Path: guestBin},
		{Tag: "out", Path: guestOut, Writable: true},
	}
	hostPaths := map[string]string{"usr": "/usr", "etc": "/etc", "cellblock-bin": bin, "out": out}
	if pyShare != "" {
		shares = append(shares, guest.Share{Tag: "python", Path: pyShare})
		hostPaths["python"] = pyShare
	}
	cfg := guest.Config{
		Shares:     shares,
		Daemon:     guestBin + "/cellblockd",
		Python:     python,
		CgroupTest: guestOut + "/cgroup.test",
		OutDir:     guestOut,
		TimeoutSec: int(guestTimeout / time.Second),
	}
	initrd := filepath.Join(out, "initramfs.gz")
	if err := buildInitramfs(initrd, filepath.Join(out, "init"), k, &cfg); err != nil {
		t.Fatal(err)
	}

	args := []string{
		// One host thread for both vCPUs: with multi-threaded TCG, 6.12
		// died of an unexpected int3 in its scheduler (text patching
		// racing another vCPU), and 6.1 froze now and then.
		"-M", "microvm", "-accel", "tcg,thread=single", "-cpu", "max",
		"-m", guestMemory, "-smp", guestCPUs,
		"-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot",
		"-kernel", k.vmlinux, "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyS0 quiet panic=-1 pci=off cgroup_no_v1=all random.trust_cpu=on tsc_early_khz=%d", hostTSCkHz()),
	}
	for i, s := range shares {
		p := hostPaths[s.Tag]
		if strings.Contains(p, ",") {
			t.Fatalf("cannot share %s with qemu: the path has a comma", p)
		}
		ro := ",readonly=on"
		if s.Writable {
			ro = ""
		}
		args = append(args,
			"-fsdev", fmt.Sprintf("local,id=fs%d,path=%s,security_model=none%s", i, p, ro),
			"-device", fmt.Sprintf("virtio-9p-device,fsdev=fs%d,mount_tag=%s", i, s.Tag))
	}

	consolePath := filepath.Join(out, "console.log")
	tv := time.Now()
	qerr := runQemu(t, qemu, args, consolePath)
	if errors.Is(qerr, errStalled) {
		// Seen once in a dozen boots under TCG: the whole guest froze
		// right after starting the daemon (no console output, not even
		// the guest's own timeouts firing) and the same build passed
		// on the next boot. One fresh VM is allowed; a guest that
		// stalls twice fails the test.
		first := filepath.Join(out, "console-stalled.log")
		_ = os.Rename(consolePath, first)
		_ = os.Remove(filepath.Join(out, guest.ResultsFile))
		t.Logf("the guest stalled (%v); its console is kept in %s; booting a fresh VM once", qerr, first)
		tv = time.Now()
		qerr = runQemu(t, qemu, args, consolePath)
	}
	vmTime := time.Since(tv)
	t.Logf("VM ran for %v (boot to power-off); whole test so far %v", vmTime.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	res, perr := readResults(filepath.Join(out, guest.ResultsFile), consolePath)
	var failed []string
	for _, name := range guest.Checks {
		t.Run(name, func(t *testing.T) {
			r, ok := res.Checks[name]
			switch {
			case !ok:
				t.Errorf("the guest never reported this check (see %s)", consolePath)
				failed = append(failed, name+": never reported")
			case !r.Pass:
				t.Error(r.Detail)
				failed = append(failed, name+": "+r.Detail)
			default:
				t.Log(r.Detail)
			}
		})
	}
	// Repeated where a reader of only the output's end (CI) sees it.
	defer func() {
		if len(failed) > 0 {
			t.Logf("failed checks:\n  %s", strings.Join(failed, "\n  "))
		}
	}()
	if qerr != nil {
		t.Errorf("qemu: %v", qerr)
	}
	if perr != nil {
		t.Errorf("results: %v", perr)
	}
	if !res.Done {
		t.Error("the guest did not finish its run")
	}
	if t.Failed() {
		logTail(t, consolePath, 80)
		logTail(t, filepath.Join(out, "daemon.log"), 40)
		if r, ok := res.Checks[guest.CheckCgroupTests]; !ok || !r.Pass {
			logTail(t, filepath.Join(out, guest.CgroupTestLog), 60)
		}
	}
}

// guestPython picks the interpreter the guest's daemon builds its rootfs
// from: $CELLBLOCK_VM_PYTHON or /usr/bin/python3. One outside /usr (pyenv,
// /opt) is shared at its own path: the returned share is its prefix.
func guestPython(t *testing.T) (python, share string) {
	t.Helper()
	python = os.Getenv("CELLBLOCK_VM_PYTHON")
	if python == "" {
		python = "/usr/bin/python3"
	}
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		t.Fatalf("python for the guest: %v (install python3 or set CELLBLOCK_VM_PYTHON)", err)
	}
	if strings.HasPrefix(real, "/usr/") {
		return python, ""
	}
	// <prefix>/bin/python3.x
	return real, filepath.Dir(filepath.Dir(real))
}

// goBuild runs `go <args...> -o dst` in the repository, statically (the
// guest has the host's /usr, but a static binary needs nothing of it).
func goBuild(t *testing.T, dst string, args ...string) {
	t.Helper()
	// go test puts the bin directory of its own GOROOT first in PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{args[0], "-o", dst}, args[1:]...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}

// buildInitramfs packs the guest's /init, the modules and the config.
func buildInitramfs(dst, initBin string, k *kernel, cfg *guest.Config) error {
	initData, err := os.ReadFile(initBin)
	if err != nil {
		return err
	}
	files := []initramfsFile{{name: "init", perm: 0o755, data: initData}}
	for _, m := range guestModules {
		data, err := os.ReadFile(filepath.Join(k.modules, m+".ko"))
		if errors.Is(err, os.ErrNotExist) {
			continue // built in, or part of another (copyModules checked)
		}
		if err != nil {
			return fmt.Errorf("module %s: %w", m, err)
		}
		name := m + ".ko"
		cfg.Modules = append(cfg.Modules, name)
		files = append(files, initramfsFile{name: strings.TrimPrefix(guest.ModuleDir, "/") + "/" + name, perm: 0o644, data: data})
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	files = append(files, initramfsFile{name: strings.TrimPrefix(guest.ConfigPath, "/"), perm: 0o644, data: js})
	return writeInitramfs(dst, files)
}

// runQemu runs the VM to its end, copying the console to consolePath and
// the guest's progress and result lines to the test log as they come.
func runQemu(t *testing.T, qemu string, args []string, consolePath string) error {
	t.Helper()
	console, err := os.Create(consolePath)
	if err != nil {
		return err
	}
	defer console.Close()
	ctx, cancel := context.WithTimeout(context.Background(), qemuTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", qemu, err)
	}
	started := time.Now()
	// The stall watchdog: the guest reports every step on the console, so
	// a long silence means it froze.
	var lastLine atomic.Int64
	lastLine.Store(time.Now().UnixNano())
	var stalled atomic.Bool
	watchdogDone := make(chan struct{})
	defer close(watchdogDone)
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-watchdogDone:
				return
			case <-tick.C:
				if time.Since(time.Unix(0, lastLine.Load())) > stallTimeout {
					stalled.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			lastLine.Store(time.Now().UnixNano())
			line := strings.TrimRight(sc.Text(), "\r")
			fmt.Fprintf(console, "[host %6.1fs] %s\n", time.Since(started).Seconds(), line)
			if strings.Contains(line, "vmtest ") || strings.Contains(line, "VMTEST ") {
				t.Logf("[host %6.1fs] %s", time.Since(started).Seconds(), line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err = cmd.Wait()
	pw.Close()
	<-copied
	if stalled.Load() {
		return fmt.Errorf("%w: no console output for %v", errStalled, stallTimeout)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("killed after %v", qemuTimeout)
	}
	return err
}

// errStalled: the guest printed nothing for stallTimeout.
var errStalled = errors.New("guest stalled")

// readResults parses the results file the guest wrote on the share, or the
// console if the file never appeared.
func readResults(file, console string) (guest.Results, error) {
	f, err := os.Open(file)
	if err != nil {
		f, err = os.Open(console)
		if err != nil {
			return guest.Results{}, err
		}
	}
	defer f.Close()
	return guest.ParseResults(f)
}

// logTail logs the last n lines of a file.
func logTail(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("last %d lines of %s:\n%s", len(lines), path, strings.Join(lines, "\n"))
}
