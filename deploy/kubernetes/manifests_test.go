// Package kubernetes holds the tests of the Kubernetes deployment beside
// it: every manifest decodes strictly into the real API types, and the
// security settings the deployment depends on are still what
// node-daemonset.yaml explains. It has no code of its own; nothing but its
// tests imports the Kubernetes modules.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// cellblockdCapabilities are exactly the capabilities cellblockd's
// container may add: node-daemonset.yaml says why each is needed.
var cellblockdCapabilities = []corev1.Capability{"SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "SYS_CHROOT", "SYS_PTRACE"}

// stateDir is the one host path a node may mount.
const stateDir = "/var/lib/cellblock"

// tokenSecret is the Secret that holds the MCP bearer token.
const tokenSecret = "cellblock-mcp-token"

// manifests is everything deploy/kubernetes applies, decoded.
type manifests struct {
	daemonSet  *appsv1.DaemonSet
	deployment *appsv1.Deployment
	services   map[string]*corev1.Service
	policies   []*networkingv1.NetworkPolicy
	budgets    []*policyv1.PodDisruptionBudget
	namespaces []*corev1.Namespace
	kust       kustomization
}

// kustomization is what this base uses of kustomize's Kustomization.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// load decodes the kustomization and every resource it lists, strictly:
// an unknown or misspelt field, a duplicate key or a kind this deployment
// does not use fails.
func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{services: map[string]*corev1.Service{}}
	strict(t, "kustomization.yaml", mustRead(t, "kustomization.yaml"), &m.kust)
	if m.kust.Kind != "Kustomization" || m.kust.Namespace == "" {
		t.Fatalf("kustomization.yaml: kind %q, namespace %q", m.kust.Kind, m.kust.Namespace)
	}
	for _, g := range m.kust.ConfigMapGenerator {
		for _, f := range g.Files {
			mustRead(t, f)
		}
	}
	for _, res := range m.kust.Resources {
		for i, doc := range bytes.Split(mustRead(t, res), []byte("\n---\n")) {
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s, document %d: %v", res, i+1, err)
			}
			where := fmt.Sprintf("%s, document %d (%s)", res, i+1, meta.Kind)
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 DaemonSet":
				m.daemonSet = &appsv1.DaemonSet{}
				strict(t, where, doc, m.daemonSet)
			case "apps/v1 Deployment":
				m.deployment = &appsv1.Deployment{}
				strict(t, where, doc, m.deployment)
			case "v1 Service":
				s := &corev1.Service{}
				strict(t, where, doc, s)
				m.services[s.Name] = s
			case "v1 Namespace":
				n := &corev1.Namespace{}
				strict(t, where, doc, n)
				m.namespaces = append(m.namespaces, n)
			case "networking.k8s.io/v1 NetworkPolicy":
				p := &networkingv1.NetworkPolicy{}
				strict(t, where, doc, p)
				m.policies = append(m.policies, p)
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				strict(t, where, doc, p)
				m.budgets = append(m.budgets, p)
			default:
				t.Fatalf("%s: %s %s is not a kind this deployment uses (add it to the test)", where, meta.APIVersion, meta.Kind)
			}
		}
	}
	if m.daemonSet == nil || m.deployment == nil {
		t.Fatal("the base has no DaemonSet or no router Deployment")
	}
	return m
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func strict(t *testing.T, where string, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

// Every YAML file here is either listed by the kustomization or is the
// Prometheus configuration: nothing is left out of the base by mistake.
func TestEveryManifestIsInTheBase(t *testing.T) {
	m := load(t)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(m.kust.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
}

func TestManifests(t *testing.T) {
	if problems := check(load(t)); len(problems) > 0 {
		t.Errorf("the manifests break the deployment's rules:\n%s", strings.Join(problems, "\n"))
	}
}

// Each check can fail: the rules catch the changes they are there for.
func TestChecksCatch(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(m *manifests)
		want   string
	}{
		{"hostNetwork", func(m *manifests) { m.daemonSet.Spec.Template.Spec.HostNetwork = true }, "hostNetwork"},
		{"hostPID", func(m *manifests) { m.daemonSet.Spec.Template.Spec.HostPID = true }, "hostPID"},
		{"privileged", func(m *manifests) {
			yes := true
			daemon(m).SecurityContext.Privileged = &yes
		}, "privileged"},
		{"a capability more", func(m *manifests) {
			c := daemon(m).SecurityContext.Capabilities
			c.Add = append(c.Add, "NET_ADMIN")
		}, "NET_ADMIN"},
		{"capabilities not dropped", func(m *manifests) { daemon(m).SecurityContext.Capabilities.Drop = nil }, "drop ALL"},
		{"a capability for cellblock-mcp", func(m *manifests) {
			mcp(m).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}, "cellblock-mcp"},
		{"cellblock-mcp as root", func(m *manifests) {
			root := int64(0)
			mcp(m).SecurityContext.RunAsUser = &root
		}, "cellblock-mcp"},
		{"no token", func(m *manifests) {
			c := mcp(m)
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--token-file") })
		}, "token"},
		{"token not from the Secret", func(m *manifests) {
			for i := range m.daemonSet.Spec.Template.Spec.Volumes {
				v := &m.daemonSet.Spec.Template.Spec.Volumes[i]
				if v.Secret != nil {
					v.Secret = nil
					v.EmptyDir = &corev1.EmptyDirVolumeSource{}
				}
			}
		}, "token"},
		{"another host path", func(m *manifests) {
			m.daemonSet.Spec.Template.Spec.Volumes = append(m.daemonSet.Spec.Template.Spec.Volumes,
				corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "hostPath"},
		{"MCP port open to all", func(m *manifests) {
			for _, p := range m.policies {
				for i := range p.Spec.Ingress {
					p.Spec.Ingress[i].From = nil
				}
			}
		}, "MCP port"},
		{"a service account token", func(m *manifests) {
			yes := true
			m.daemonSet.Spec.Template.Spec.AutomountServiceAccountToken = &yes
		}, "automountServiceAccountToken"},
		{"jails on any node", func(m *manifests) { m.daemonSet.Spec.Template.Spec.NodeSelector = nil }, "nodeSelector"},
		{"router privileged", func(m *manifests) {
			yes := true
			m.deployment.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes
		}, "router"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := load(t)
			c.change(m)
			problems := strings.Join(check(m), "\n")
			if !strings.Contains(problems, c.want) {
				t.Errorf("the checks did not catch it; they said:\n%s", problems)
			}
		})
	}
}

func daemon(m *manifests) *corev1.Container {
	return findContainer(m.daemonSet.Spec.Template.Spec.InitContainers, "cellblockd")
}

func mcp(m *manifests) *corev1.Container {
	return findContainer(m.daemonSet.Spec.Template.Spec.Containers, "cellblock-mcp")
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// flag returns a container's --name=value argument, or "".
func flag(c *corev1.Container, name string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// check returns what in m breaks the deployment's rules, one line each.
func check(m *manifests) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	spec := m.daemonSet.Spec.Template.Spec

	// The pod: none of the node's namespaces, no API token, jails only on
	// the nodes meant for them.
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		fail("the DaemonSet's pod shares the node's namespaces (hostNetwork %v, hostPID %v, hostIPC %v)", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		fail("the DaemonSet's pod mounts a service account token (automountServiceAccountToken must be false)")
	}
	if spec.NodeSelector["cellblock.io/jails"] != "true" {
		fail("the DaemonSet's pod has no nodeSelector cellblock.io/jails=true: jails would run on every node")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && (v.HostPath.Path != stateDir || v.Name != "state") {
			fail("hostPath volume %s (%s): only the state directory %s may come from the node", v.Name, v.HostPath.Path, stateDir)
		}
	}

	// cellblockd: root with exactly its capabilities, never privileged.
	d := daemon(m)
	if d == nil {
		return append(bad, "no cellblockd init container")
	}
	if d.RestartPolicy == nil || *d.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		fail("cellblockd is not a native sidecar (restartPolicy: Always): it must start before cellblock-mcp and stop after it")
	}
	sc := d.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		return append(bad, "cellblockd has no securityContext.capabilities")
	}
	if sc.Privileged != nil && *sc.Privileged {
		fail("cellblockd is privileged")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		fail("cellblockd does not drop ALL capabilities before adding its own: %v", sc.Capabilities.Drop)
	}
	for _, c := range sc.Capabilities.Add {
		if !slices.Contains(cellblockdCapabilities, c) {
			fail("cellblockd adds %s, which it does not need (allowed: %v)", c, cellblockdCapabilities)
		}
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		fail("cellblockd's root filesystem is writable")
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		fail("cellblockd asks for procMount %s (the entrypoint unmasks /proc in its own namespace)", *sc.ProcMount)
	}

	// cellblock-mcp: unprivileged, with the token from the Secret.
	c := mcp(m)
	if c == nil {
		return append(bad, "no cellblock-mcp container")
	}
	msc := c.SecurityContext
	switch {
	case msc == nil || msc.RunAsUser == nil || *msc.RunAsUser == 0 || msc.RunAsNonRoot == nil || !*msc.RunAsNonRoot:
		fail("cellblock-mcp may run as root")
	case msc.Privileged != nil && *msc.Privileged,
		msc.AllowPrivilegeEscalation == nil || *msc.AllowPrivilegeEscalation,
		msc.Capabilities == nil || !slices.Equal(msc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(msc.Capabilities.Add) > 0,
		msc.SeccompProfile == nil || msc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault,
		msc.ReadOnlyRootFilesystem == nil || !*msc.ReadOnlyRootFilesystem:
		fail("cellblock-mcp is not unprivileged: it must drop every capability, add none, forbid privilege escalation, keep the runtime's seccomp filter and a read-only root")
	}
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.HostPath != nil {
				fail("cellblock-mcp mounts the host path %s", v.HostPath.Path)
			}
		}
	}
	if flag(c, "http") == "" || strings.HasPrefix(flag(c, "http"), "unix:") {
		fail("cellblock-mcp does not serve MCP over HTTP on TCP (--http)")
	}
	tokenFile := flag(c, "token-file")
	if tokenFile == "" {
		fail("cellblock-mcp has no --token-file: anyone who reaches the port would run code")
	} else if !fromSecret(spec, c, tokenFile) {
		fail("cellblock-mcp's --token-file %s is not in a volume of the Secret %s", tokenFile, tokenSecret)
	}
	statusPort := flag(c, "status-listen")
	if !strings.HasSuffix(statusPort, ":9464") || flag(c, "drain-timeout") == "" {
		fail("cellblock-mcp does not serve its status on :9464 (--status-listen) or does not drain (--drain-timeout): the router's health check needs both")
	}

	// Only the router reaches the MCP port.
	bad = append(bad, checkPolicies(m)...)

	// The router: unprivileged.
	for _, rc := range m.deployment.Spec.Template.Spec.Containers {
		rsc := rc.SecurityContext
		if rsc == nil || rsc.Privileged != nil && *rsc.Privileged || rsc.AllowPrivilegeEscalation == nil || *rsc.AllowPrivilegeEscalation ||
			rsc.RunAsNonRoot == nil || !*rsc.RunAsNonRoot || rsc.Capabilities == nil || len(rsc.Capabilities.Add) > 0 {
			fail("the router's container %s is not unprivileged", rc.Name)
		}
	}
	if m.deployment.Spec.Template.Spec.AutomountServiceAccountToken == nil || *m.deployment.Spec.Template.Spec.AutomountServiceAccountToken {
		fail("the router mounts a service account token (automountServiceAccountToken must be false)")
	}
	return bad
}

// fromSecret reports whether path, as container c sees it, is in a volume
// of the token Secret.
func fromSecret(spec corev1.PodSpec, c *corev1.Container, path string) bool {
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == tokenSecret {
				return true
			}
		}
	}
	return false
}

// checkPolicies: some policy selects the node pods for ingress, and every
// rule that opens the MCP port admits the router's pods and nothing else.
func checkPolicies(m *manifests) []string {
	var bad []string
	nodeLabels := m.daemonSet.Spec.Template.Labels
	routerLabels := m.deployment.Spec.Template.Labels
	selected := false
	for _, p := range m.policies {
		if !matches(p.Spec.PodSelector.MatchLabels, nodeLabels) || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		selected = true
		for _, rule := range p.Spec.Ingress {
			opensMCP := len(rule.Ports) == 0
			for _, port := range rule.Ports {
				if port.Port == nil || *port.Port == intstr.FromString("mcp") || *port.Port == intstr.FromInt32(8808) {
					opensMCP = true
				}
			}
			if !opensMCP {
				continue
			}
			if len(rule.From) == 0 {
				bad = append(bad, fmt.Sprintf("NetworkPolicy %s opens the MCP port to everyone", p.Name))
			}
			for _, peer := range rule.From {
				if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil ||
					len(peer.PodSelector.MatchLabels) == 0 || !matches(peer.PodSelector.MatchLabels, routerLabels) {
					bad = append(bad, fmt.Sprintf("NetworkPolicy %s opens the MCP port to more than the router's pods", p.Name))
				}
			}
		}
	}
	if !selected {
		bad = append(bad, "no NetworkPolicy restricts ingress to the node pods: anyone in the cluster reaches their MCP port")
	}
	return bad
}

// matches reports whether labels carry every pair of selector.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The router's configuration agrees with the manifests: the nodes' name,
// ports and the settings it reads from its environment.
func TestRouterMatchesTheManifests(t *testing.T) {
	m := load(t)
	cfg := string(mustRead(t, "router/haproxy.cfg"))
	svc := m.services["cellblock-nodes"]
	if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Fatal("cellblock-nodes must be a headless Service that lists pods not ready too (the router's health check decides)")
	}
	env := map[string]string{}
	rc := m.deployment.Spec.Template.Spec.Containers[0]
	for _, e := range rc.Env {
		env[e.Name] = e.Value
	}
	if want := "cellblock-nodes." + m.kust.Namespace + ".svc.cluster.local"; env["CELLBLOCK_NODES"] != want {
		t.Errorf("the router's CELLBLOCK_NODES is %q, want %q", env["CELLBLOCK_NODES"], want)
	}
	for _, name := range regexp.MustCompile(`\$\{([A-Z_]+)\}`).FindAllStringSubmatch(cfg, -1) {
		if _, ok := env[name[1]]; !ok {
			t.Errorf("haproxy.cfg reads %s, which the router's Deployment does not set", name[1])
		}
	}
	ports := map[string]int32{}
	for _, p := range mcp(m).Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, want := range []string{
		fmt.Sprintf(`"${CELLBLOCK_NODES}:%d"`, ports["mcp"]),
		fmt.Sprintf("check port %d", ports["status"]),
		"option httpchk GET /readyz",
		"http-check disable-on-404",
		"stick match req.hdr(Mcp-Session-Id)",
		"stick store-response res.hdr(Mcp-Session-Id)",
		"on-marked-down shutdown-sessions",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("haproxy.cfg has no %q", want)
		}
	}
	if !strings.Contains(flag(mcp(m), "http"), fmt.Sprint(ports["mcp"])) {
		t.Errorf("cellblock-mcp's --http %q is not its mcp port %d", flag(mcp(m), "http"), ports["mcp"])
	}
	// The Prometheus job keeps the status port.
	var prom struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	strict(t, "prometheus/scrape-config.yaml", mustRead(t, "prometheus/scrape-config.yaml"), &prom)
	if len(prom.ScrapeConfigs) == 0 || !strings.Contains(string(mustRead(t, "prometheus/scrape-config.yaml")), "regex: status") {
		t.Error("prometheus/scrape-config.yaml does not scrape the nodes' status port")
	}
}
