package cli

import "testing"

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "1024", want: 1024},
		{in: "100b", want: 100},
		{in: "1K", want: 1 << 10},
		{in: "1k", want: 1 << 10},
		{in: "2KiB", want: 2 << 10},
		{in: "128M", want: 128 << 20},
		{in: "128m", want: 128 << 20},
		{in: "128Mi", want: 128 << 20},
		{in: "128MB", want: 128 << 20},
		{in: "128MiB", want: 128 << 20},
		{in: "128mib", want: 128 << 20},
		{in: "128 MiB", want: 128 << 20},
		{in: " 64M ", want: 64 << 20},
		{in: "1g", want: 1 << 30},
		{in: "1.5G", want: 3 << 29},
		{in: "0.5GiB", want: 1 << 29},
		{in: ".5k", want: 512},
		{in: "2T", want: 2 << 40},
		{in: "0.1K", want: 102}, // fractions of a byte are dropped
		{in: "8388607T", want: 8388607 << 40},
		{in: "8388608T", bad: true}, // 2^63
		{in: "99999999999999999999", bad: true},
		{in: "", bad: true},
		{in: "M", bad: true},
		{in: "-1M", bad: true},
		{in: "1.2.3M", bad: true},
		{in: ".", bad: true},
		{in: "12Q", bad: true},
		{in: "1e3", bad: true},
		{in: "1MM", bad: true},
		{in: "0x10", bad: true},
		{in: "1P", bad: true},
	} {
		got, err := parseSize(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("parseSize(%q) = %d, want an error", tc.in, got)
		case !tc.bad && err != nil:
			t.Errorf("parseSize(%q): %v", tc.in, err)
		case !tc.bad && got != tc.want:
			t.Errorf("parseSize(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // milliseconds
		bad  bool
	}{
		{in: "5s", want: 5000},
		{in: "1m30s", want: 90000},
		{in: "250ms", want: 250},
		{in: "1h", want: 3600000},
		{in: "2", want: 2000},
		{in: "0.5", want: 500},
		{in: "0.3", want: 300}, // no float rounding up to 301
		{in: ".25", want: 250},
		{in: "10.", want: 10000},
		{in: "0", want: 0},
		{in: "0s", want: 0},
		{in: "1us", want: 1},           // rounded up, never to 0
		{in: "1500us", want: 2},        // rounded up
		{in: "0.0001", want: 1},        // rounded up
		{in: " 3s ", want: 3000},       // spaces are trimmed
		{in: "-1s", bad: true},         // negative
		{in: "-2", bad: true},          // negative
		{in: "", bad: true},            // empty
		{in: "5 s", bad: true},         // not a duration
		{in: "five", bad: true},        // not a duration
		{in: "1e3", bad: true},         // no exponents
		{in: "1.2.3", bad: true},       // not a number
		{in: "inf", bad: true},         // not a number
		{in: "NaN", bad: true},         // not a number
		{in: "3000000h", bad: true},    // overflows a Duration
		{in: "99999999999", bad: true}, // overflows a Duration
	} {
		got, err := parseTimeout(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("parseTimeout(%q) = %d, want an error", tc.in, got)
		case !tc.bad && err != nil:
			t.Errorf("parseTimeout(%q): %v", tc.in, err)
		case !tc.bad && got != tc.want:
			t.Errorf("parseTimeout(%q) = %d ms, want %d", tc.in, got, tc.want)
		}
	}
}

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
