package integration

import (
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// A run ends at its runner's exit message once the runner's channel and
// the output pipes have ended, without waiting for the process's end
// (nsjail's supervise). These cases hold that early end to python's
// semantics, and show that a program forging the message or keeping the
// output open gets no other result than its own exit would give.
func TestRunEndsAtTheRunnersExit(t *testing.T) {
	d := daemon(t)
	for _, c := range []struct {
		name, code string
		exit       int
		stdout     string // the whole of it, or with a "..." suffix its start
	}{
		{"status and output", "print(1)\nraise SystemExit(3)", 3, "1\n"},
		{"atexit after the code", "import atexit\natexit.register(lambda: print('late', flush=True))\nprint('first')", 0, "first\nlate\n"},
		{"a subprocess's output before the exit", "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(\"x\" * 200000)'])\nprint('done')", 0,
			strings.Repeat("x", 200000) + "\ndone\n"},
		// A child that holds the output and never ends: the run ends when
		// the program does (its init's exit), as before.
		{"a child holding the output", `import os, sys
r, w = os.pipe()
if os.fork() == 0:
    os.close(w)
    os.read(r, 1)  # never: nobody writes
    os._exit(0)
print("parent")
sys.exit(5)`, 5, "parent\n"},
		// A forged exit message while the output and channel stay open
		// changes nothing: the runner's own comes last.
		{"a forged exit message", `import sys
from cellblock import _channel
_channel.channel.send_raw('{"type":"exit","exit_code":9}')
print("after")
sys.exit(4)`, 4, "after\n"},
		// Forging all of it (message, output and channel closed) ends the
		// program's own run with the status it forged, as exiting would.
		{"a forged end", `import os, sys, time
from cellblock import _channel
print("before", flush=True)
os.close(1)
os.close(2)
ch = _channel.channel
ch.send_raw('{"type":"exit","exit_code":9}')
os.close(ch.fd)
time.sleep(600)`, 9, "before\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, d, &api.RunRequest{Code: c.code, TimeoutMs: 60000})
			if res.Error != nil || res.TimedOut {
				t.Fatalf("error %+v timed out %v\nstderr %s", res.Error, res.TimedOut, res.Stderr)
			}
			if res.ExitCode != c.exit || res.Stdout != c.stdout {
				t.Errorf("exit %d stdout %.100q; want %d %.100q\nstderr %s", res.ExitCode, res.Stdout, c.exit, c.stdout, res.Stderr)
			}
		})
	}
}
