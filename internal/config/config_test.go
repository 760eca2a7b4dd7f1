package config

import (
	"strings"
	"testing"
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
		"--socket":         func(c *Config) { c.Socket = "rel.sock" },
		"--state-dir":      func(c *Config) { c.StateDir = "state" },
		"--cgroup-name":    func(c *Config) { c.CgroupName = "../evil" },
		"--max-concurrent": func(c *Config) { c.MaxConcurrent = -1 },
		"--queue":          func(c *Config) { c.QueueSize = -1 },
		"--prestart":       func(c *Config) { c.Prestart = MaxPrestart + 1 },
		"--userns":         func(c *Config) { c.UserNS = "maybe" },
		"--userns-base":    func(c *Config) { c.UserNSBase = 0 },
		"--log-format":     func(c *Config) { c.LogFormat = "xml" },
		"--no-index":       func(c *Config) { c.NoIndex, c.IndexURL = true, "https://x" },
		"default limits":   func(c *Config) { c.Defaults.TimeoutMs = c.Maxima.TimeoutMs + 1 },
	} {
		c := Default()
		mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: %v", flag, err)
		}
	}
}
