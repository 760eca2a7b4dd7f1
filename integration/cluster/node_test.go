package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// A node runs as the DaemonSet runs it: the node image under podman, one
// container for cellblockd and one for cellblock-mcp, sharing the node's
// network namespace (the pod's) and a socket directory (the emptyDir), with
// the commands, arguments, users, capabilities, seccomp and read-only root
// of deploy/kubernetes/node-daemonset.yaml, translated to podman's flags.

// daemonSet reads the shipped DaemonSet.
func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kubernetes/node-daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("node-daemonset.yaml: %v", err)
	}
	return &ds
}

// container finds the DaemonSet's container (init or main) by name.
func container(t *testing.T, ds *appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	spec := ds.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("the DaemonSet has no container %q", name)
	return corev1.Container{}
}

// limits are the rlimits podman gives containers. Left to itself, podman
// asks for more than a root without CAP_SYS_RESOURCE (as on these
// machines) may have, and runc fails to start the container.
var limits = []string{"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"}

// podmanArgs translates c's security context, command and arguments into
// `podman run` flags; env expands $(NAME) in the arguments as the kubelet
// does, mounts are (host dir, container path) pairs.
func podmanArgs(t *testing.T, c corev1.Container, env map[string]string, mounts [][2]string) []string {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil {
		t.Fatalf("container %s: no securityContext.runAsUser", c.Name)
	}
	args := append([]string{}, limits...)
	gid := int64(0)
	if sc.RunAsGroup != nil {
		gid = *sc.RunAsGroup
	}
	args = append(args, "--user", fmt.Sprintf("%d:%d", *sc.RunAsUser, gid))
	if sc.Privileged != nil && *sc.Privileged {
		t.Fatalf("container %s is privileged", c.Name)
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", string(d))
		}
		for _, a := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(a))
		}
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
		args = append(args, "--security-opt", "seccomp=unconfined")
	}
	// No AppArmor or SELinux on these machines: nothing to translate.
	for k, v := range env {
		args = append(args, "--env", k+"="+v)
	}
	for _, m := range mounts {
		args = append(args, "--volume", m[0]+":"+m[1])
	}
	if len(c.Command) == 0 {
		t.Fatalf("container %s has no command", c.Name)
	}
	ep, _ := json.Marshal(c.Command)
	args = append(args, "--entrypoint", string(ep))
	return args
}

// expand replaces $(NAME) as the kubelet does in a container's arguments.
func expand(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		out[i] = a
	}
	return out
}

// node is one cellblock node of the test.
type node struct {
	name    string // "a", "b"
	netns   string
	addr    string
	dir     string // its host directories: state, socket, token, tmp
	daemon  string // container names
	mcp     string
	started time.Time
}

// podman runs podman and returns its stdout, failing the test on error.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command("podman", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return strings.TrimSpace(out.String())
}

// startNode starts a node's two containers in its namespace, with token as
// the Secret's content, and waits until cellblock-mcp serves (which it
// starts, as in the pod, once cellblockd answers its health).
func startNode(t *testing.T, ds *appsv1.DaemonSet, image string, n *node, token string) {
	t.Helper()
	for _, d := range []string{"state", "socket", "token", "tmp"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The Secret's file as the kubelet writes it with fsGroup 10001 and
	// defaultMode 0440.
	tokenFile := filepath.Join(n.dir, "token", "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o440); err != nil {
		t.Fatal(err)
	}
	fsGroup := int(*ds.Spec.Template.Spec.SecurityContext.FSGroup)
	if err := os.Chown(tokenFile, 0, fsGroup); err != nil {
		t.Fatal(err)
	}
	network := "ns:/run/netns/" + n.netns
	env := map[string]string{"POD_IP": n.addr}

	d := container(t, ds, "cellblockd")
	args := append([]string{"run", "-d", "--name", n.daemon, "--network", network},
		podmanArgs(t, d, nil, [][2]string{
			{filepath.Join(n.dir, "state"), "/var/lib/cellblock"},
			{filepath.Join(n.dir, "socket"), "/run/cellblock"},
			{filepath.Join(n.dir, "tmp"), "/tmp"},
		})...)
	args = append(append(args, image), expand(d.Args, env)...)
	t.Cleanup(func() { removeContainer(t, n.daemon) })
	n.started = time.Now()
	for attempt := 1; ; attempt++ {
		podman(t, args...)
		err := startupProbe(n, d.StartupProbe.Exec.Command, 3*time.Minute)
		if err == nil {
			break
		}
		// Seen 3 times in about 50 runs on the development VM (podman 4.3,
		// runc 1.1.5, cgroup v1): every `podman exec` into a daemon that
		// is up fails in runc's exec init with "open /proc/self/fd: no such
		// file or directory", until the container is replaced. Not
		// understood yet. The kubelet would restart the container after
		// its liveness probe's failures; so does the test, once, saying so.
		if attempt == 1 && running(n.daemon) && strings.Contains(err.Error(), "/proc/self/fd") {
			t.Logf("node %s: podman exec into cellblockd failed (%v); replacing the container once, as the kubelet's liveness probe would", n.name, err)
			removeContainer(t, n.daemon)
			continue
		}
		t.Fatalf("node %s: cellblockd did not become healthy: %v\n%s", n.name, err, logs(n.daemon))
	}

	m := container(t, ds, "cellblock-mcp")
	args = append([]string{"run", "-d", "--name", n.mcp, "--network", network},
		podmanArgs(t, m, env, [][2]string{
			{filepath.Join(n.dir, "socket"), "/run/cellblock"},
			{filepath.Join(n.dir, "token"), "/etc/cellblock-mcp:ro"},
		})...)
	args = append(append(args, image), expand(m.Args, env)...)
	podman(t, args...)
	t.Cleanup(func() { removeContainer(t, n.mcp) })
}

// startupProbe runs the startup probe's command in the daemon's container,
// as the kubelet does, until it succeeds, the container exits or the time
// is up; the error says what the probe said last.
func startupProbe(n *node, probe []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, "podman", append([]string{"exec", n.daemon}, probe...)...).CombinedOutput()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || !running(n.daemon) {
			return fmt.Errorf("the probe says %v: %s", err, bytes.TrimSpace(out))
		}
		time.Sleep(time.Second)
	}
}

func running(name string) bool {
	out, err := exec.Command("podman", "inspect", "--format", "{{.State.Running}}", name).Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

func logs(name string) string {
	out, _ := exec.Command("podman", "logs", "--tail", "40", name).CombinedOutput()
	return string(out)
}

// stopGracefully stops a container as the kubelet does (SIGTERM, then
// SIGKILL after the grace) and reports how it exited.
func stopGracefully(t *testing.T, name string, grace time.Duration) {
	t.Helper()
	podman(t, "stop", "--time", fmt.Sprint(int(grace.Seconds())), name)
	code := podman(t, "inspect", "--format", "{{.State.ExitCode}}", name)
	if code != "0" {
		t.Errorf("%s exited %s after SIGTERM\n%s", name, code, logs(name))
	}
}

// waitExit waits until a container has exited by itself and checks that it
// exited 0.
func waitExit(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", "wait", name).CombinedOutput()
	if err != nil {
		t.Fatalf("%s did not exit within %v: %v %s\n%s", name, timeout, err, out, logs(name))
	}
	if code := strings.TrimSpace(string(out)); code != "0" {
		t.Errorf("%s exited %s\n%s", name, code, logs(name))
	}
}

// removeContainer removes a container (killing it if it runs).
func removeContainer(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "podman", "rm", "--force", "--time", "10", name).CombinedOutput(); err != nil {
		t.Errorf("podman rm %s: %v\n%s", name, err, out)
	}
}

// powerOff makes a node vanish as a machine that loses power does: its
// link goes down first, so that nothing of it reaches the router again
// (no reset, no FIN: packets to it are dropped), then its processes are
// killed.
func powerOff(t *testing.T, n *node) {
	t.Helper()
	run(t, "ip", "-n", n.netns, "link", "set", "eth0", "down")
	podman(t, "kill", "--signal", "KILL", n.mcp)
	podman(t, "kill", "--signal", "KILL", n.daemon)
}
