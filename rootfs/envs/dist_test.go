package envs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cellblock/cellblock/rootfs"
)

// writeDist writes a minimal installed distribution into site.
func writeDist(t *testing.T, site, name, version string) {
	t.Helper()
	di := filepath.Join(site, name+"-"+version+".dist-info")
	if err := os.MkdirAll(di, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n\nName: not-a-header\n"
	for f, c := range map[string]string{"METADATA": meta, "RECORD": name + "/__init__.py,sha256=x,1\n"} {
		if err := os.WriteFile(filepath.Join(di, f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadInstalled(t *testing.T) {
	site := t.TempDir()
	writeDist(t, site, "Zeta_Pkg", "2.0")
	writeDist(t, site, "alpha", "1.0")
	if err := os.Mkdir(filepath.Join(site, "alpha"), 0o755); err != nil {
		t.Fatal(err)
	}
	pkgs, err := readInstalled(site, map[string]string{"zeta-pkg": "sha256:abc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 || pkgs[0].Name != "alpha" || pkgs[0].Version != "1.0" || pkgs[1].Name != "Zeta_Pkg" || pkgs[1].Version != "2.0" {
		t.Fatalf("packages %+v", pkgs)
	}
	if pkgs[1].Hash != "sha256:abc" {
		t.Errorf("reported wheel hash not used: %q", pkgs[1].Hash)
	}
	if !strings.HasPrefix(pkgs[0].Hash, "record-sha256:") || len(pkgs[0].Hash) != len("record-sha256:")+64 {
		t.Errorf("RECORD hash %q", pkgs[0].Hash)
	}

	// A METADATA that is a symbolic link is not followed.
	evil := filepath.Join(site, "evil-1.dist-info")
	if err := os.Mkdir(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(evil, "METADATA")); err != nil {
		t.Fatal(err)
	}
	if _, err := readInstalled(site, nil); err == nil {
		t.Errorf("read a METADATA through a symbolic link")
	}
}

func TestParseInstallReport(t *testing.T) {
	report := `{"version": "1", "install": [
	  {"metadata": {"name": "CBAlpha", "version": "1.0"},
	   "download_info": {"archive_info": {"hash": "sha256=30b7888504e4b6ddf4165a40bde9a5d869d05294058834bf3de6f26e83498f53",
	     "hashes": {"sha256": "30b7888504e4b6ddf4165a40bde9a5d869d05294058834bf3de6f26e83498f53"}}}},
	  {"metadata": {"name": "cb_beta", "version": "1.0"},
	   "download_info": {"archive_info": {"hash": "sha256=5534627d90ff9f764394442ea81070a3839eda5b5e8853797e62614988d60173"}}},
	  {"metadata": {"name": "nohash", "version": "1.0"}, "download_info": {"archive_info": {}}}]}`
	h, err := ParseInstallReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if h["cbalpha"] != "sha256:30b7888504e4b6ddf4165a40bde9a5d869d05294058834bf3de6f26e83498f53" ||
		h["cb-beta"] != "sha256:5534627d90ff9f764394442ea81070a3839eda5b5e8853797e62614988d60173" || len(h) != 2 {
		t.Errorf("hashes %v", h)
	}
	if _, err := ParseInstallReport([]byte("ERROR: not json")); err == nil {
		t.Errorf("parsed garbage")
	}
}

func TestSealAndSize(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "env")
	if err := os.MkdirAll(filepath.Join(dir, "site-packages", "pkg"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "site-packages", "pkg", "__init__.py"), []byte("x = 1\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "site-packages", "tool"), []byte("#!/bin/sh\n"), 0o775); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "outside")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "site-packages", "link")); err != nil {
		t.Fatal(err)
	}
	// Already 0555 apart from the setuid bit, which must go all the same.
	suid := filepath.Join(dir, "site-packages", "suid")
	if err := os.WriteFile(suid, nil, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o555|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "site-packages", "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := rootfs.Seal(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		"":                              0o555,
		"site-packages/pkg":             0o555,
		"site-packages/pkg/__init__.py": 0o444,
		"site-packages/tool":            0o555,
		"site-packages/suid":            0o555,
	} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
	if _, err := os.Lstat(fifo); !os.IsNotExist(err) {
		t.Errorf("a fifo survived sealing: %v", err)
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("seal followed a symbolic link: %v %v", fi.Mode(), err)
	}
	size, err := treeSize(dir)
	if err != nil || size <= 0 {
		t.Errorf("treeSize = %d, %v", size, err)
	}
	if err := rootfs.RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("removeTree left %s: %v", dir, err)
	}
}
