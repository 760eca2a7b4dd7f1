package cli

import "testing"

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{formatSize(0), "0 B"},
		{formatSize(512), "512 B"},
		{formatSize(1024), "1 KiB"},
		{formatSize(128 << 20), "128 MiB"},
		{formatSize(3 << 29), "1.5 GiB"},
		{formatSize(100000000), "95.4 MiB"},
		{formatSize(2 << 40), "2 TiB"},
		{formatUnits(128<<20, mib), "128"},
		{formatUnits(100000000, mib), "95.4"},
		{formatMillis(0), "0s"},
		{formatMillis(250), "250ms"},
		{formatMillis(1500), "1.5s"},
		{formatMillis(2000), "2s"},
		{formatMillis(90000), "90s"},
		{formatMillis(300000), "5m"},
		{formatMillis(7200000), "2h"},
		{formatCPUs(1.5), "1.5"},
		{formatCPUs(2), "2"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
