package jailinit

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the init when this variable is set.
const asInit = "CELLBLOCK_JAILINIT_TEST"

func TestMain(m *testing.M) {
	if os.Getenv(asInit) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// start runs the init with a socket on descriptor 3 and returns our end.
func start(t *testing.T) (*exec.Cmd, *os.File, *strings.Builder) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs, ours := os.NewFile(uintptr(fds[0]), "init"), os.NewFile(uintptr(fds[1]), "daemon")
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{asInit + "=1"}
	cmd.ExtraFiles = []*os.File{theirs}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() { ours.Close(); _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd, ours, &out
}

// launch waits for the init to say it is ready, sends l and returns the
// init's answer.
func launch(t *testing.T, ctl *os.File, l *Launch) string {
	t.Helper()
	rd := bufio.NewReader(ctl)
	if ready, err := rd.ReadString('\n'); ready != AckReady {
		t.Fatalf("the init said %q (%v), want %q", ready, err, AckReady)
	}
	if err := json.NewEncoder(ctl).Encode(l); err != nil {
		t.Fatal(err)
	}
	ack, err := rd.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer from the init: %v", err)
	}
	return ack
}

func TestLaunchRunsTheProgram(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "main.sh")
	cmd, ctl, out := start(t)
	ack := launch(t, ctl, &Launch{
		ScriptPath: script,
		// Descriptor 3 (the launch socket) must not reach the program.
		Script: []byte("read line; echo \"$line $MINE $0\"; if [ -e /proc/self/fd/3 ]; then echo leaked; fi; exit 7\n"),
		Argv:   []string{"/bin/sh", script},
		Env:    []string{"MINE=env"},
		Stdin:  []byte("from-stdin\n"),
	})
	if ack != AckStarted {
		t.Fatalf("answer %q, want %q", ack, AckStarted)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("exit %d (%v), want the program's 7; output %q", code, err, out)
	}
	if got := out.String(); got != "from-stdin env "+script+"\n" {
		t.Errorf("output %q", got)
	}
	if b, err := os.ReadFile(script); err != nil || !strings.HasPrefix(string(b), "read line") {
		t.Errorf("script not planted: %q %v", b, err)
	}
}

func TestSignalDeathIs128PlusN(t *testing.T) {
	dir := t.TempDir()
	cmd, ctl, out := start(t)
	if ack := launch(t, ctl, &Launch{ScriptPath: filepath.Join(dir, "s"), Argv: []string{"/bin/sh", "-c", "kill -ABRT $$"}}); ack != AckStarted {
		t.Fatalf("answer %q", ack)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+6 {
		t.Errorf("exit %d, want 134; output %q", code, out)
	}
}

func TestClosedWithoutMessage(t *testing.T) {
	cmd, ctl, _ := start(t)
	ctl.Close()
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != ExitNotLaunched {
		t.Errorf("exit %d, want ExitNotLaunched", code)
	}
}

func TestBadLaunchesFail(t *testing.T) {
	dir := t.TempDir()
	for name, l := range map[string]*Launch{
		"relative script": {ScriptPath: "main.py", Argv: []string{"/bin/true"}},
		"no argv":         {ScriptPath: filepath.Join(dir, "a")},
		"relative argv":   {ScriptPath: filepath.Join(dir, "b"), Argv: []string{"true"}},
		"missing program": {ScriptPath: filepath.Join(dir, "c"), Argv: []string{"/nonexistent/python"}},
	} {
		cmd, ctl, out := start(t)
		if ack := launch(t, ctl, l); ack != AckFailed {
			t.Errorf("%s: answer %q, want %q", name, ack, AckFailed)
		}
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != ExitSetupFailed || !strings.Contains(out.String(), "cellblock-init:") {
			t.Errorf("%s: exit %d output %q", name, code, out)
		}
	}
}

// startRunner runs the init in runner mode with argv as the runner, a
// launch socket on descriptor 3 and the runner's channel on 4. It returns
// the launch socket's and the channel's daemon ends.
func startRunner(t *testing.T, argv ...string) (*exec.Cmd, *os.File, *os.File, *strings.Builder) {
	t.Helper()
	pair := func() (theirs, ours *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fds[0]), "jail"), os.NewFile(uintptr(fds[1]), "daemon")
	}
	ctlTheirs, ctl := pair()
	chanTheirs, channel := pair()
	cmd := exec.Command(os.Args[0], append([]string{RunnerFlag}, argv...)...)
	cmd.Env = []string{asInit + "=1", "FROM_INIT=yes"}
	cmd.ExtraFiles = []*os.File{ctlTheirs, chanTheirs}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctlTheirs.Close()
	chanTheirs.Close()
	t.Cleanup(func() { ctl.Close(); channel.Close(); _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd, ctl, channel, &out
}

// In runner mode the runner starts before the Launch, with the init's
// environment, its channel on descriptor 3 (named in the environment) and
// nothing else of the init's; the Launch brings its stdin.
func TestRunnerModeStartsTheRunnerFirst(t *testing.T) {
	script := `echo "fd=$CELLBLOCK_RUNNER_FD env=$FROM_INIT" >&3
read line
echo "got $line"
if [ -e /proc/self/fd/4 ]; then echo leaked4; fi
exit 5`
	cmd, ctl, channel, out := startRunner(t, "/bin/sh", "-c", script)
	// The runner speaks before any Launch was sent.
	first, err := bufio.NewReader(channel).ReadString('\n')
	if err != nil || first != "fd=3 env=yes\n" {
		t.Fatalf("runner said %q (%v) before the launch", first, err)
	}
	if ack := launch(t, ctl, &Launch{Stdin: []byte("the input\n")}); ack != AckStarted {
		t.Fatalf("answer %q, want %q", ack, AckStarted)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 5 || out.String() != "got the input\n" {
		t.Errorf("exit %d, output %q; want 5 and the runner's stdout", code, out)
	}
}

// A runner that dies before its run has run nothing: the init exits
// without answering, so that the daemon gives the run to another jail.
func TestRunnerDeadBeforeLaunch(t *testing.T) {
	cmd, ctl, _, out := startRunner(t, "/bin/sh", "-c", "exit 3")
	rd := bufio.NewReader(ctl)
	if ready, err := rd.ReadString('\n'); ready != AckReady {
		t.Fatalf("the init said %q (%v), want %q", ready, err, AckReady)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != ExitNotLaunched || !strings.Contains(out.String(), "exit status 3") {
		t.Errorf("exit %d, output %q; want ExitNotLaunched and why", code, out)
	}
	if rest, _ := rd.ReadString('\n'); rest != "" {
		t.Errorf("the init answered %q after its runner died", rest)
	}
}
