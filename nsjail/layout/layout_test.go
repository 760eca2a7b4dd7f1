package layout

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtc pins the /etc files byte for byte: every rootfs built carries
// them, and the accounts must match the ids the jail runs as.
func TestEtc(t *testing.T) {
	want := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"sandbox:x:1000:1000:sandbox:/work:/usr/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group": "root:x:0:\n" +
			"sandbox:x:1000:\n" +
			"nogroup:x:65534:\n",
		"hosts": "127.0.0.1\tlocalhost\n" +
			"::1\tlocalhost\n",
		"nsswitch.conf": "passwd: files\n" +
			"group: files\n" +
			"shadow: files\n" +
			"hosts: files dns\n" +
			"networks: files\n" +
			"protocols: files\n" +
			"services: files\n",
		"resolv.conf": "",
	}
	got := Etc()
	if len(got) != len(want) {
		t.Errorf("Etc has %d files, want %d", len(got), len(want))
	}
	for _, f := range got {
		w, ok := want[f.Name]
		if !ok {
			t.Errorf("unexpected /etc/%s", f.Name)
			continue
		}
		if f.Content != w {
			t.Errorf("/etc/%s:\n got %q\nwant %q", f.Name, f.Content, w)
		}
	}
}

func TestMountPoints(t *testing.T) {
	if got := strings.Join(MountPoints, " "); got != "/tmp /work /dev /proc /.cellblock /usr/lib/cellblock" {
		t.Errorf("MountPoints = %s", got)
	}
	for _, p := range append(MaskedPaths, ReadonlyPaths...) {
		if !strings.HasPrefix(p, Proc+"/") {
			t.Errorf("%s is not in %s", p, Proc)
		}
	}
	for _, d := range Devices {
		if filepath.Dir(d.Path) != Dev {
			t.Errorf("device %s is not in %s", d.Path, Dev)
		}
	}
	if filepath.Dir(Shm) != Dev {
		t.Errorf("%s is not in %s", Shm, Dev)
	}
}

// TestStandardLibraryOnly keeps the package linkable into the static,
// cgo-free init: it may import nothing outside the standard library.
func TestStandardLibraryOnly(t *testing.T) {
	// go test puts its own toolchain's bin first on PATH.
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available")
	}
	const self = "github.com/cellblock/cellblock/nsjail/layout"
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", self).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		n++
		if f[0] != self && f[1] != "true" {
			t.Errorf("imports %s, which is not in the standard library", f[0])
		}
		if f[0] == self && f[2] != "0" {
			t.Errorf("uses cgo")
		}
	}
	if n < 2 {
		t.Errorf("go list listed %d packages; the check saw nothing", n)
	}
}
