package cgroup

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// detectMode reports the cgroup layout of the host, as OpenRoot decides it,
// or ModeNone when mountinfo cannot be read.
func detectMode() Mode {
	mounts, err := readMountinfo()
	if err != nil {
		return ModeNone
	}
	return modeFromMounts(mounts)
}

// hybridMountinfo is this project's development machine (systemd-less
// hybrid: v1 controllers, name=systemd, empty cgroup2 at unified).
const hybridMountinfo = `22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
37 30 0:34 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridProcCgroup = `9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/d1facf4c4c0c883165ce5f7d9f2c9db8
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`

// v2Mountinfo is a typical systemd cgroup v2 host.
const v2Mountinfo = `24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

// comountedMountinfo is a systemd v1 host with cpu,cpuacct co-mounted and
// a daemon in a service cgroup.
const comountedMountinfo = `30 22 0:27 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
32 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
33 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
34 30 0:31 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices
35 30 0:32 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
36 30 0:33 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
37 30 0:34 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio
`

const comountedProcCgroup = `7:net_cls,net_prio:/
6:freezer:/
5:pids:/system.slice/cellblockd.service
4:devices:/system.slice/cellblockd.service
3:memory:/system.slice/cellblockd.service
2:cpu,cpuacct:/system.slice/cellblockd.service
1:name=systemd:/system.slice/cellblockd.service
`

func mustMounts(t *testing.T, s string) []mountEntry {
	t.Helper()
	m, err := parseMountinfo(strings.NewReader(s))
	if err != nil {
		t.Fatalf("parseMountinfo: %v", err)
	}
	return m
}

func mustOwn(t *testing.T, s string) map[string]string {
	t.Helper()
	m, err := parseProcCgroup(strings.NewReader(s))
	if err != nil {
		t.Fatalf("parseProcCgroup: %v", err)
	}
	return m
}

func TestParseMountinfo(t *testing.T) {
	m := mustMounts(t, hybridMountinfo)
	if len(m) != 10 {
		t.Fatalf("got %d cgroup mounts, want 10 (tmpfs and ext4 skipped): %+v", len(m), m)
	}
	want := mountEntry{root: "/", mountpoint: "/sys/fs/cgroup/memory", fstype: "cgroup", superOpts: []string{"rw", "memory"}}
	if !reflect.DeepEqual(m[3], want) {
		t.Errorf("memory mount = %+v, want %+v", m[3], want)
	}
	if m[9].fstype != "cgroup2" || m[9].mountpoint != hybridMountpoint {
		t.Errorf("unified mount = %+v", m[9])
	}

	esc := mustMounts(t, `50 1 0:40 /a\040b /mnt/x\134y rw - cgroup cgroup rw,pids`+"\n")
	if esc[0].root != "/a b" || esc[0].mountpoint != `/mnt/x\y` {
		t.Errorf("unescape: %+v", esc[0])
	}
	if _, err := parseMountinfo(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("malformed line accepted")
	}
}

func TestParseProcCgroup(t *testing.T) {
	got := mustOwn(t, comountedProcCgroup)
	for k, v := range map[string]string{
		"cpu": "/system.slice/cellblockd.service", "cpuacct": "/system.slice/cellblockd.service",
		"name=systemd": "/system.slice/cellblockd.service", "net_prio": "/", "freezer": "/",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got[""]; ok {
		t.Error("pure v1 file has a cgroup2 entry")
	}
	if v2 := mustOwn(t, "0::/system.slice/x.service\n"); v2[""] != "/system.slice/x.service" {
		t.Errorf("v2 entry = %q", v2[""])
	}
	if _, err := parseProcCgroup(strings.NewReader("garbage\n")); err == nil {
		t.Error("malformed line accepted")
	}
}

func TestModeFromMounts(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo string
		want            Mode
	}{
		{"hybrid", hybridMountinfo, ModeHybrid},
		{"v2", v2Mountinfo, ModeV2},
		{"v1", comountedMountinfo, ModeV1},
		{"none", "22 1 0:21 / / rw - ext4 /dev/vda rw\n", ModeNone},
		// cgroup2 mounted over the tmpfs of a former v1 layout: top one wins.
		{"v2 on top", "30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n31 30 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n41 22 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", ModeV2},
	} {
		if got := modeFromMounts(mustMounts(t, tc.mountinfo)); got != tc.want {
			t.Errorf("%s: mode %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestLayoutV1Hybrid(t *testing.T) {
	hs, err := layoutV1(mustMounts(t, hybridMountinfo), mustOwn(t, hybridProcCgroup), true)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string)
	var keys []string
	for _, h := range hs {
		got[h.key] = h.own
		keys = append(keys, h.key)
	}
	wantKeys := []string{"cpuset", "devices", "memory", "cpu", "cpuacct", "pids", "blkio", "freezer", "name=systemd", ""}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Errorf("hierarchies %q, want %q", keys, wantKeys)
	}
	for k, v := range map[string]string{
		"memory":       "/sys/fs/cgroup/memory/process_api/d1facf4c4c0c883165ce5f7d9f2c9db8",
		"cpu":          "/sys/fs/cgroup/cpu",
		"name=systemd": "/sys/fs/cgroup/systemd",
		"":             "/sys/fs/cgroup/unified",
	} {
		if got[k] != v {
			t.Errorf("own[%q] = %q, want %q", k, got[k], v)
		}
	}
}

func TestLayoutV1Comounted(t *testing.T) {
	hs, err := layoutV1(mustMounts(t, comountedMountinfo), mustOwn(t, comountedProcCgroup), false)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string)
	for _, h := range hs {
		got[h.key] = h.own
	}
	for k, v := range map[string]string{
		"cpu":          "/sys/fs/cgroup/cpu,cpuacct/system.slice/cellblockd.service",
		"cpuacct":      "/sys/fs/cgroup/cpu,cpuacct/system.slice/cellblockd.service",
		"net_prio":     "/sys/fs/cgroup/net_cls,net_prio",
		"name=systemd": "/sys/fs/cgroup/systemd/system.slice/cellblockd.service",
	} {
		if got[k] != v {
			t.Errorf("own[%q] = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got[""]; ok {
		t.Error("v1 layout joins cgroup2")
	}
	if _, ok := got["cpuset"]; ok {
		t.Error("unmounted cpuset in layout")
	}
}

func TestLayoutV1NeedsDevices(t *testing.T) {
	own := mustOwn(t, "1:memory:/\n")
	_, err := layoutV1(mustMounts(t, "34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"), own, false)
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("err = %v, want ErrUnsupported", err)
	}
}

func TestLayoutV1NestedMountRoot(t *testing.T) {
	// A container that sees only its own part of the memory hierarchy.
	mi := "34 30 0:31 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
		"35 30 0:32 /docker/abc /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
	own := mustOwn(t, "2:memory:/docker/abc/inner\n1:devices:/elsewhere\n")
	_, err := layoutV1(mustMounts(t, mi), own, false)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("cgroup outside the mount root: err = %v, want ErrUnsupported", err)
	}
	own = mustOwn(t, "2:memory:/docker/abc/inner\n1:devices:/docker/abc\n")
	hs, err := layoutV1(mustMounts(t, mi), own, false)
	if err != nil {
		t.Fatal(err)
	}
	if hs[0].key != "devices" || hs[0].own != "/sys/fs/cgroup/devices" || hs[1].own != "/sys/fs/cgroup/memory/inner" {
		t.Errorf("layout %+v", hs)
	}
}

func TestLayoutV2(t *testing.T) {
	mounts := mustMounts(t, v2Mountinfo)
	for _, tc := range []struct {
		name, procCgroup string
		want             v2Layout
	}{
		{"service", "0::/system.slice/cellblockd.service\n", v2Layout{ownPath: "/system.slice/cellblockd.service", ownDir: "/sys/fs/cgroup/system.slice/cellblockd.service"}},
		{"restart in leaf", "0::/system.slice/cellblockd.service/daemon\n", v2Layout{ownPath: "/system.slice/cellblockd.service", ownDir: "/sys/fs/cgroup/system.slice/cellblockd.service", inLeaf: true}},
		{"namespace root", "0::/\n", v2Layout{ownPath: "/", ownDir: "/sys/fs/cgroup"}},
	} {
		got, err := layoutV2(mounts, mustOwn(t, tc.procCgroup))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		tc.want.mountpoint, tc.want.mountRoot = "/sys/fs/cgroup", "/"
		if got != tc.want {
			t.Errorf("%s: layout %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if _, err := layoutV2(mustMounts(t, hybridMountinfo), mustOwn(t, hybridProcCgroup)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("hybrid host: err = %v, want ErrUnsupported", err)
	}
}

func TestMarkPrivate(t *testing.T) {
	private := func(mountinfo, procCgroup string, hybrid bool) []string {
		hs, err := layoutV1(mustMounts(t, mountinfo), mustOwn(t, procCgroup), hybrid)
		if err != nil {
			t.Fatal(err)
		}
		markPrivate(hs)
		var out []string
		for _, h := range hs {
			if h.private {
				out = append(out, h.key)
			}
		}
		return out
	}
	if got := private(hybridMountinfo, hybridProcCgroup, true); !reflect.DeepEqual(got, []string{"memory"}) {
		t.Errorf("hybrid dev machine: private %q, want [memory]", got)
	}
	want := []string{"devices", "memory", "cpu", "cpuacct", "pids", "name=systemd"}
	if got := private(comountedMountinfo, comountedProcCgroup, false); !reflect.DeepEqual(got, want) {
		t.Errorf("systemd service: private %q, want %q", got, want)
	}
	allRoot := strings.ReplaceAll(hybridProcCgroup, "/process_api/d1facf4c4c0c883165ce5f7d9f2c9db8", "/")
	if got := private(hybridMountinfo, allRoot, true); len(got) != 10 {
		t.Errorf("daemon at the root everywhere: private %q, want all", got)
	}
}
