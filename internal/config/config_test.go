package config

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxConcurrent < 1 {
		t.Errorf("MaxConcurrent %d after Validate", c.MaxConcurrent)
	}
	// --prestart 0 turns prestarting off; a negative count is refused.
	for n, ok := range map[int]bool{0: true, DefaultPrestart: true, MaxPrestart: true, -1: false} {
		c := Default()
		c.Prestart = n
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("--prestart %d: %v", n, err)
		}
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for flag, mutate := range map[string]func(*Config){
		"--socket":                        func(c *Config) { c.Socket = "rel.sock" },
		"--state-dir":                     func(c *Config) { c.StateDir = "state" },
		"--cgroup-name":                   func(c *Config) { c.CgroupName = "../evil" },
		"--max-concurrent":                func(c *Config) { c.MaxConcurrent = -1 },
		"--queue":                         func(c *Config) { c.QueueSize = -1 },
		"--prestart":                      func(c *Config) { c.Prestart = MaxPrestart + 1 },
		"--userns":                        func(c *Config) { c.UserNS = "maybe" },
		"--userns-base":                   func(c *Config) { c.UserNSBase = 0 },
		"--log-format":                    func(c *Config) { c.LogFormat = "xml" },
		"--no-index":                      func(c *Config) { c.NoIndex, c.IndexURL = true, "https://x" },
		"--display-item-bytes":            func(c *Config) { c.DisplayItemBytes = 1<<10 - 1 },
		"--display-total-bytes":           func(c *Config) { c.DisplayTotalBytes = MaxDisplayTotalBytes + 1 },
		"default limits":                  func(c *Config) { c.Defaults.TimeoutMs = c.Maxima.TimeoutMs + 1 },
		"--network-allow[1]":              func(c *Config) { c.NetworkAllow = []string{"ok.example:443", "no-port.example"} },
		"--network-max-connections":       func(c *Config) { c.NetworkMaxConnections = 0 },
		"--network-max-connections-total": func(c *Config) { c.NetworkMaxConnectionsTotal = -1 },
		"--network-max-bytes":             func(c *Config) { c.NetworkMaxBytes = 0 },
		"--files-in-max-count":            func(c *Config) { c.FilesInCount = MaxFilesCount + 1 },
		"--files-in-max-bytes":            func(c *Config) { c.FilesInBytes = -1 },
		"--files-out-max-count":           func(c *Config) { c.FilesOutCount = 0 },
		"--files-out-max-file-bytes":      func(c *Config) { c.FilesOutFileBytes = c.FilesOutBytes + 1 },
		"--files-out-max-bytes":           func(c *Config) { c.FilesOutBytes = c.ArtifactStoreBytes + 1 },
		"--files-inline-bytes":            func(c *Config) { c.FilesInlineBytes = MaxFilesInlineBytes + 1 },
		"--artifact-store-size":           func(c *Config) { c.ArtifactStoreBytes = 1 },
		"--artifact-ttl":                  func(c *Config) { c.ArtifactTTL = time.Second },
	} {
		c := Default()
		mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: %v", flag, err)
		}
	}
}

// The display caps: 1 KiB <= item <= total <= MaxDisplayTotalBytes, and
// nothing else is refused.
func TestValidateDisplayCaps(t *testing.T) {
	for _, tc := range []struct {
		item, total int64
		ok          bool
	}{
		{DefaultDisplayItemBytes, DefaultDisplayTotalBytes, true},
		{1 << 10, 1 << 10, true},
		{2 << 10, 3 << 10, true},
		{1 << 20, MaxDisplayTotalBytes, true},
		{MaxDisplayTotalBytes, MaxDisplayTotalBytes, true},
		{1<<10 - 1, 8 << 20, false},
		{0, 8 << 20, false},
		{-1, 8 << 20, false},
		{4 << 10, 2 << 10, false},
		{1 << 20, MaxDisplayTotalBytes + 1, false},
		{MaxDisplayTotalBytes + 1, MaxDisplayTotalBytes + 1, false},
	} {
		c := Default()
		c.DisplayItemBytes, c.DisplayTotalBytes = tc.item, tc.total
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("--display-item-bytes %d --display-total-bytes %d: %v, want ok %v", tc.item, tc.total, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--display-item-bytes") {
			t.Errorf("the error does not name the flags: %v", err)
		}
	}
}
