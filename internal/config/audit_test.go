package config

import (
	"strings"
	"testing"
)

func TestAuditLogSettings(t *testing.T) {
	c := Default()
	c.StateDir = "/srv/cellblock"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.AuditLog != "/srv/cellblock/audit.log" {
		t.Errorf("default audit log %q, want it in the state dir", c.AuditLog)
	}
	for _, v := range []string{AuditLogOff, "/var/log/cellblock/audit.log"} {
		c := Default()
		c.AuditLog = v
		if err := c.Validate(); err != nil || c.AuditLog != v {
			t.Errorf("--audit-log %q: %v, became %q", v, err, c.AuditLog)
		}
	}
	for flag, set := range map[string]func(*Config){
		"--audit-log":          func(c *Config) { c.AuditLog = "relative/audit.log" },
		"--audit-log-max-size": func(c *Config) { c.AuditLogMaxBytes = 100 },
		"--audit-log-keep":     func(c *Config) { c.AuditLogKeep = -1 },
	} {
		c := Default()
		set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: error %v does not name the flag", flag, err)
		}
	}
}
