package integration

import (
	"context"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// A program may open its own standard streams again by name, as on any
// host: /dev/stdout, /dev/stderr and /proc/self/fd/N lead to pipes its
// user owns.
func TestReopenStandardStreams(t *testing.T) {
	d := daemon(t)
	code := `
open("/dev/stdout", "w").write("stdout again\n")
with open("/proc/self/fd/2", "w") as f:
    f.write("stderr again\n")
print(repr(open("/dev/stdin").read()))
`
	res, err := d.Client.Run(context.Background(), &api.RunRequest{Code: code, Stdin: "in"})
	if err != nil || res.Error != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if res.Stdout != "stdout again\n'in'\n" || res.Stderr != "stderr again\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}
