package nsjail

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/cellblock/cellblock/nsjail/layout"
	"github.com/cellblock/cellblock/nsjail/runner"
)

func validSpec() *Spec {
	return &Spec{
		ID: "r1", Rootfs: "/var/lib/cellblock/rootfs/x", Python: "/usr/bin/python3",
		Script: []byte("print(1)"), ScriptName: "main.py",
		Limits: Limits{Timeout: time.Second, MemoryBytes: 64 << 20, Pids: 16, CPUs: 1.5, OutputBytes: 1024, TmpBytes: 1 << 20, OpenFiles: 64},
	}
}

func TestValidate(t *testing.T) {
	if err := validSpec().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Spec){
		"id":                     func(s *Spec) { s.ID = "../x" },
		"long id":                func(s *Spec) { s.ID = strings.Repeat("a", 65) },
		"rootfs":                 func(s *Spec) { s.Rootfs = "rel" },
		"python":                 func(s *Spec) { s.Python = "python3" },
		"script name":            func(s *Spec) { s.ScriptName = "a/b.py" },
		"dot name":               func(s *Spec) { s.ScriptName = ".x" },
		"mount":                  func(s *Spec) { s.Mounts = []Mount{{Source: "/a", Destination: "/"}} },
		"mount dirty":            func(s *Spec) { s.Mounts = []Mount{{Source: "/a", Destination: "/x/../y"}} },
		"timeout":                func(s *Spec) { s.Limits.Timeout = 0 },
		"memory":                 func(s *Spec) { s.Limits.MemoryBytes = 0 },
		"pids":                   func(s *Spec) { s.Limits.Pids = 0 },
		"cpus":                   func(s *Spec) { s.Limits.CPUs = 0 },
		"output":                 func(s *Spec) { s.Limits.OutputBytes = 0 },
		"tmp":                    func(s *Spec) { s.Limits.TmpBytes = 0 },
		"nofile":                 func(s *Spec) { s.Limits.OpenFiles = 0 },
		"preload without runner": func(s *Spec) { s.Preload = []string{"json"} },
		"preload name": func(s *Spec) {
			s.Runner = &RunnerSpec{Mode: "script", Limits: runner.DefaultLimits()}
			s.Preload = []string{"json,os"}
		},
		"preload count": func(s *Spec) {
			s.Runner = &RunnerSpec{Mode: "script", Limits: runner.DefaultLimits()}
			s.Preload = slices.Repeat([]string{"json"}, runner.MaxPreload+1)
		},
	} {
		s := validSpec()
		mutate(s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidatePreload(t *testing.T) {
	s := validSpec()
	s.Runner = &RunnerSpec{Mode: "script", Limits: runner.DefaultLimits()}
	s.Preload = []string{"json", "xml.dom.minidom"}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEnvironAndArgv(t *testing.T) {
	s := validSpec()
	s.Env = map[string]string{"OMP_NUM_THREADS": "7", "MINE": "x"}
	s.Args = []string{"a"}
	env := strings.Join(s.environ(), "\n")
	for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8", "OPENBLAS_NUM_THREADS=2", "OMP_NUM_THREADS=7", "MINE=x", "PYTHONDONTWRITEBYTECODE=1"} {
		if !strings.Contains(env, want+"\n") && !strings.HasSuffix(env, want) {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	// The proxy's variables win over the caller's.
	s.Env["HTTPS_PROXY"] = "http://elsewhere:1"
	s.egressEnv = map[string]string{"HTTPS_PROXY": "http://127.0.0.1:3128"}
	if env := strings.Join(s.environ(), "\n"); !strings.Contains(env, "HTTPS_PROXY=http://127.0.0.1:3128") || strings.Contains(env, "elsewhere") {
		t.Errorf("proxy environment:\n%s", env)
	}
	s.Stdin = []byte("in")
	l := s.launch()
	want := []string{"/usr/bin/python3", "/work/main.py", "a"}
	if strings.Join(l.Argv, " ") != strings.Join(want, " ") || l.ScriptPath != "/work/main.py" || string(l.Stdin) != "in" || string(l.Script) != string(s.Script) {
		t.Errorf("launch %+v, want argv %v", l, want)
	}
	for cpus, n := range map[float64]int{0.1: 1, 1: 1, 1.01: 2, 2: 2, 3.5: 4} {
		if threads(cpus) != n {
			t.Errorf("threads(%g) = %d, want %d", cpus, threads(cpus), n)
		}
	}
}

func TestConfigContainment(t *testing.T) {
	r := &Runner{initBinary: "/usr/lib/cellblock/cellblock-init", seccomp: &configs.Seccomp{DefaultAction: configs.Errno}, userns: &IDMap{HostID: 1e9, Size: 65536}, uid: layout.UID, gid: layout.GID}
	s := validSpec()
	s.Mounts = []Mount{{Source: "/envs/abc", Destination: "/opt/env"}}
	cfg := s.libcontainerConfig(r, "cellblock/r1")
	for _, ns := range []configs.NamespaceType{configs.NEWNS, configs.NEWPID, configs.NEWNET, configs.NEWIPC, configs.NEWUTS, configs.NEWCGROUP, configs.NEWUSER} {
		if !cfg.Namespaces.Contains(ns) {
			t.Errorf("namespace %s missing", ns)
		}
	}
	if !cfg.Readonlyfs || !cfg.NoNewPrivileges || cfg.Seccomp == nil || cfg.Capabilities == nil || len(cfg.Capabilities.Bounding) != 0 {
		t.Errorf("containment incomplete: ro %v nnp %v seccomp %v caps %+v", cfg.Readonlyfs, cfg.NoNewPrivileges, cfg.Seccomp != nil, cfg.Capabilities)
	}
	if cfg.Cgroups.Path != "cellblock/r1" || cfg.Cgroups.Resources.Memory != 0 || cfg.Cgroups.Resources.PidsLimit != nil {
		t.Errorf("libcontainer must only join the cgroup, not limit it: %+v", cfg.Cgroups)
	}
	seen := map[string]*configs.Mount{}
	for _, m := range cfg.Mounts {
		seen[m.Destination] = m
	}
	for _, dst := range []string{"/proc", "/dev", "/dev/shm", "/tmp", "/work", layout.Init, "/opt/env"} {
		if seen[dst] == nil {
			t.Errorf("mount %s missing", dst)
		}
	}
	if m := seen["/tmp"]; m == nil || !strings.Contains(m.Data, "size=1048576") {
		t.Errorf("/tmp is not size-limited: %+v", m)
	}
	for _, dst := range []string{layout.Init, "/opt/env"} {
		if m := seen[dst]; m == nil || m.Flags&unix.MS_RDONLY == 0 {
			t.Errorf("%s is not read-only", dst)
		}
	}
	limits := map[int]uint64{}
	for _, rl := range cfg.Rlimits {
		limits[rl.Type] = rl.Hard
	}
	if limits[unix.RLIMIT_CORE] != 0 || limits[unix.RLIMIT_NOFILE] != 64 || limits[unix.RLIMIT_FSIZE] != 1<<20 {
		t.Errorf("rlimits %v", limits)
	}
	if m := seen[layout.Work]; m == nil || !strings.Contains(m.Data, "uid=1000,gid=1000") {
		t.Errorf("the working directory is not the jail user's: %+v", m)
	}
	r.userns, r.uid, r.gid = nil, layout.Nobody, layout.Nobody
	cfg = s.libcontainerConfig(r, "x")
	if cfg.Namespaces.Contains(configs.NEWUSER) {
		t.Errorf("user namespace without a mapping")
	}
	for _, m := range cfg.Mounts {
		if m.Destination == layout.Work && !strings.Contains(m.Data, "uid=65534,gid=65534") {
			t.Errorf("without a user namespace the working directory must belong to %d: %+v", layout.Nobody, m)
		}
	}
}

func TestCappedBuffer(t *testing.T) {
	c := newCappedBuffer(10)
	var streamed bytes.Buffer
	c.drain(io.MultiReader(strings.NewReader("hello "), strings.NewReader("world, and more")), "stdout", func(s string, p []byte) {
		streamed.Write(p)
	})
	got, truncated := c.bytes()
	if string(got) != "hello worl" || !truncated || streamed.String() != "hello worl" {
		t.Errorf("kept %q truncated %v streamed %q", got, truncated, streamed.String())
	}
	c = newCappedBuffer(10)
	c.drain(strings.NewReader("short"), "stdout", nil)
	if got, truncated := c.bytes(); string(got) != "short" || truncated {
		t.Errorf("kept %q truncated %v", got, truncated)
	}
}

// Shape is equal exactly when sameJail says two specs share jails.
func TestShapeMatchesSameJail(t *testing.T) {
	base := validSpec()
	base.Runner = &RunnerSpec{Mode: "script"}
	same := map[string]func(*Spec){
		"code":   func(s *Spec) { s.Script = []byte("print(2)") },
		"env":    func(s *Spec) { s.Env = map[string]string{"A": "b"} },
		"limits": func(s *Spec) { s.Limits.MemoryBytes, s.Limits.Pids, s.Limits.Timeout = 1<<30, 3, time.Hour },
		"stdin":  func(s *Spec) { s.Stdin = []byte("x") },
		"id":     func(s *Spec) { s.ID = "other" },
		// The proxy's socket is made at the hand-over, in any jail.
		"network": func(s *Spec) { s.Egress = stubEgress{} },
	}
	other := map[string]func(*Spec){
		"rootfs":   func(s *Spec) { s.Rootfs = "/var/lib/cellblock/rootfs/y" },
		"python":   func(s *Spec) { s.Python = "/usr/bin/python3.12" },
		"tmp":      func(s *Spec) { s.Limits.TmpBytes = 2 << 20 },
		"nofile":   func(s *Spec) { s.Limits.OpenFiles = 65 },
		"mount":    func(s *Spec) { s.Mounts = []Mount{{Source: "/env/a", Destination: "/usr/lib/cellblock-env"}} },
		"writable": func(s *Spec) { s.Mounts = []Mount{{Source: "/env/a", Destination: "/d", Writable: true}} },
		"runner":   func(s *Spec) { s.Runner = nil },
		"preload":  func(s *Spec) { s.Preload = []string{"json"} },
	}
	for want, cases := range map[bool]map[string]func(*Spec){true: same, false: other} {
		for what, mutate := range cases {
			o := *base
			mutate(&o)
			if got := base.sameJail(&o); got != want {
				t.Errorf("%s: sameJail %v, want %v", what, got, want)
			}
			if got := base.Shape() == o.Shape(); got != want {
				t.Errorf("%s: equal shapes %v, want %v:\n%s\n%s", what, got, want, base.Shape(), o.Shape())
			}
		}
	}
	// Mounts that differ only in their writable flag are other jails.
	a, b := *base, *base
	a.Mounts = []Mount{{Source: "/e", Destination: "/d"}}
	b.Mounts = []Mount{{Source: "/e", Destination: "/d", Writable: true}}
	if a.Shape() == b.Shape() || a.sameJail(&b) {
		t.Errorf("a writable mount shares jails with a read-only one")
	}
	// A changed preload list, or another order (the order the modules
	// are imported in), is another jail.
	a, b = *base, *base
	a.Preload = []string{"json", "csv"}
	for _, p := range [][]string{{"json"}, {"csv", "json"}, {"json", "csv", "ast"}, nil} {
		b.Preload = p
		if a.Shape() == b.Shape() || a.sameJail(&b) {
			t.Errorf("preload %q shares jails with %q", p, a.Preload)
		}
	}
	b.Preload = []string{"json", "csv"}
	if a.Shape() != b.Shape() || !a.sameJail(&b) {
		t.Errorf("the same preload list: other jails")
	}
}
