package daemon

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/config"
)

// The display flags reach the runner's limits of every run: sizes in the
// flags' syntax, checked by config.Validate, and a frame big enough for
// the largest item with its JSON escaping, within the runner's bounds.
func TestDisplayFlags(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		item, total int
		valid       bool
	}{
		{nil, config.DefaultDisplayItemBytes, config.DefaultDisplayTotalBytes, true},
		{[]string{"--display-item-bytes", "2K", "--display-total-bytes", "3KiB"}, 2 << 10, 3 << 10, true},
		{[]string{"--display-item-bytes", "1M", "--display-total-bytes", "256M"}, 1 << 20, 256 << 20, true},
		{[]string{"--display-item-bytes", "256M", "--display-total-bytes", "256M"}, 256 << 20, 256 << 20, true},
		{[]string{"--display-item-bytes", "512"}, 512, config.DefaultDisplayTotalBytes, false},
		{[]string{"--display-item-bytes", "4K", "--display-total-bytes", "2K"}, 4 << 10, 2 << 10, false},
		{[]string{"--display-total-bytes", "1G"}, config.DefaultDisplayItemBytes, 1 << 30, false},
	} {
		cfg := config.Default()
		fs := flag.NewFlagSet("cellblockd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		flags(fs, &cfg, new(intList), new([]string))
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if cfg.DisplayItemBytes != int64(tc.item) || cfg.DisplayTotalBytes != int64(tc.total) {
			t.Errorf("%q: item %d total %d, want %d and %d", tc.args, cfg.DisplayItemBytes, cfg.DisplayTotalBytes, tc.item, tc.total)
		}
		if err := cfg.Validate(); (err == nil) != tc.valid {
			t.Errorf("%q: Validate: %v, want valid %v", tc.args, err, tc.valid)
		}
		if !tc.valid {
			continue
		}
		l := reportLimits(cfg)
		if l.DisplayItemBytes != tc.item || l.DisplayTotalBytes != tc.total {
			t.Errorf("%q: the runner's limits carry item %d total %d", tc.args, l.DisplayItemBytes, l.DisplayTotalBytes)
		}
		if err := l.Validate(); err != nil {
			t.Errorf("%q: the runner's limits %+v: %v", tc.args, l, err)
		}
		if want := min(6*tc.item, 1<<30); l.FrameBytes < want {
			t.Errorf("%q: frame_bytes %d, under %d: an item at the cap may not fit a frame", tc.args, l.FrameBytes, want)
		}
	}
	for _, bad := range []string{"lots", "-1K", "1X", "1e9", "0x1p30", "NaN", "+1M"} {
		cfg := config.Default()
		fs := flag.NewFlagSet("cellblockd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		flags(fs, &cfg, new(intList), new([]string))
		if err := fs.Parse([]string{"--display-item-bytes", bad}); err == nil {
			t.Errorf("--display-item-bytes %q parsed as %d", bad, cfg.DisplayItemBytes)
		}
	}
}

// The network flags: repeatable patterns checked by config.Validate, the
// private switch, and the caps in the flags' syntax.
func TestNetworkFlags(t *testing.T) {
	cfg := config.Default()
	fs := flag.NewFlagSet("cellblockd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags(fs, &cfg, new(intList), new([]string))
	if err := fs.Parse([]string{"--network-allow", "api.example.org:443", "--network-allow", "*.example.net:443",
		"--network-allow-private", "--network-max-connections", "8", "--network-max-connections-total", "100", "--network-max-bytes", "64M"}); err != nil {
		t.Fatal(err)
	}
	if len(cfg.NetworkAllow) != 2 || !cfg.NetworkAllowPrivate || cfg.NetworkMaxConnections != 8 ||
		cfg.NetworkMaxConnectionsTotal != 100 || cfg.NetworkMaxBytes != 64<<20 {
		t.Errorf("config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	if len(def.NetworkAllow) != 0 || def.NetworkAllowPrivate || def.NetworkMaxConnections != config.DefaultNetworkMaxConnections ||
		def.NetworkMaxConnectionsTotal != config.DefaultNetworkMaxConnectionsTotal || def.NetworkMaxBytes != config.DefaultNetworkMaxBytes {
		t.Errorf("defaults %+v", def)
	}
	cfg.NetworkAllow = append(cfg.NetworkAllow, "no-port.example")
	if err := cfg.Validate(); err == nil {
		t.Error("a pattern without a port passed")
	}
}

// The secret flags, in any order, make one declaration per name; a
// secret with no host, or a host beyond --network-allow, stops the daemon
// before it starts, naming the flag.
func TestSecretFlags(t *testing.T) {
	t.Setenv("CREDENTIALS_DIRECTORY", "")
	parse := func(args ...string) (config.Config, error) {
		cfg := config.Default()
		fs := flag.NewFlagSet("cellblockd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		flags(fs, &cfg, new(intList), new([]string))
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		return cfg, cfg.Validate()
	}
	cfg, err := parse("--network-allow", "api.github.com:443", "--network-allow", "*.example.org:443",
		"--secret-host", "GH=api.github.com:443", "--secret", "GH=/run/credentials/cellblockd.service/GH",
		"--secret-allow-uid", "GH=1000", "--secret-allow-uid", "GH=1001",
		"--secret", "EX=/etc/ex", "--secret-host", "EX=*.example.org:443", "--secret-host", "EX=a.example.org:443",
		"--egress-trust", "/etc/extra.pem", "--egress-ca-cert", "/ca.pem", "--egress-ca-key", "/ca-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Secret{
		{Name: "GH", File: "/run/credentials/cellblockd.service/GH", Hosts: []string{"api.github.com:443"}, AllowUIDs: []int{1000, 1001}},
		{Name: "EX", File: "/etc/ex", Hosts: []string{"*.example.org:443", "a.example.org:443"}},
	}
	if fmt.Sprint(cfg.Secrets) != fmt.Sprint(want) || fmt.Sprint(cfg.EgressTrust) != "[/etc/extra.pem]" ||
		cfg.EgressCACert != "/ca.pem" || cfg.EgressCAKey != "/ca-key.pem" {
		t.Errorf("config: %+v %v %q %q", cfg.Secrets, cfg.EgressTrust, cfg.EgressCACert, cfg.EgressCAKey)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--network-allow", "a.example:443", "--secret", "T=/t"}, "--secret T has no --secret-host"},
		{[]string{"--network-allow", "a.example:443", "--secret", "T=/t", "--secret-host", "T=b.example:443"}, "--secret-host T=b.example:443 is beyond --network-allow"},
		{[]string{"--secret", "T=/t", "--secret-host", "T=b.example:443"}, "is beyond --network-allow"},
		{[]string{"--network-allow", "a.example:443", "--secret-host", "T=a.example:443"}, "no --secret T=FILE declares it"},
		{[]string{"--network-allow", "a.example:443", "--secret", "T=t", "--secret-host", "T=a.example:443"}, "must be an absolute path"},
		{[]string{"--network-allow", "a.example:443", "--secret", "HTTPS_PROXY=/t", "--secret-host", "HTTPS_PROXY=a.example:443"}, "the jail sets that variable itself"},
		{[]string{"--network-allow", "a.example:443", "--secret", "1T=/t", "--secret-host", "1T=a.example:443"}, "a secret's name is a variable name"},
		{[]string{"--network-allow", "a.example:443", "--secret", "T=/t", "--secret-host", "T=a.example"}, "--secret-host T=a.example"},
		{[]string{"--secret", "T=/t", "--secret", "T=/u"}, "declared twice"},
		{[]string{"--secret", "T"}, "want NAME=FILE"},
		{[]string{"--secret-allow-uid", "T=root"}, "not a uid"},
		{[]string{"--egress-ca-cert", "/ca.pem"}, "--egress-ca-cert and --egress-ca-key go together"},
		{[]string{"--secret", "T=${CREDENTIALS_DIRECTORY}/T"}, "LoadCredential"},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	// Under systemd: the credentials' directory, as the unit's comments
	// show it.
	t.Setenv("CREDENTIALS_DIRECTORY", "/run/credentials/cellblockd.service")
	cfg, err = parse("--network-allow", "api.github.com:443", "--secret", "GH=${CREDENTIALS_DIRECTORY}/GH", "--secret-host", "GH=api.github.com:443")
	if err != nil || cfg.Secrets[0].File != "/run/credentials/cellblockd.service/GH" {
		t.Errorf("${CREDENTIALS_DIRECTORY}: %v %+v", err, cfg.Secrets)
	}
}
