package flagvalue

import (
	"flag"
	"io"
	"testing"
)

// parseMillis is ParseDuration in milliseconds, as the Duration flag keeps it.
func parseMillis(s string) (int64, error) {
	d, err := ParseDuration(s)
	return Millis(d), err
}

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
		// What cellblockd's own grammar took before the two were one.
		{in: "1e9", bad: true},
		{in: "1E9", bad: true},
		{in: "0x1p30", bad: true},
		{in: "+1M", bad: true},
		{in: "NaN", bad: true},
		{in: "Inf", bad: true},
		{in: "1I", bad: true},
	} {
		got, err := ParseSize(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("ParseSize(%q) = %d, want an error", tc.in, got)
		case !tc.bad && err != nil:
			t.Errorf("ParseSize(%q): %v", tc.in, err)
		case !tc.bad && got != tc.want:
			t.Errorf("ParseSize(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
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
		got, err := parseMillis(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("ParseDuration(%q) = %d, want an error", tc.in, got)
		case !tc.bad && err != nil:
			t.Errorf("ParseDuration(%q): %v", tc.in, err)
		case !tc.bad && got != tc.want:
			t.Errorf("ParseDuration(%q) = %d ms, want %d", tc.in, got, tc.want)
		}
	}
}

// The flag types on a flag set: each reads its grammar, and Duration with
// Positive refuses 0.
func TestFlagTypes(t *testing.T) {
	var size, ms, positive, count int64
	var cpus float64
	var list []string
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(Size{&size}, "size", "")
	fs.Var(Duration{P: &ms}, "ms", "")
	fs.Var(Duration{P: &positive, Positive: true}, "positive", "")
	fs.Var(Count{&count}, "count", "")
	fs.Var(CPUs{&cpus}, "cpus", "")
	fs.Var(List{&list}, "list", "")
	err := fs.Parse([]string{"--size", "1.5G", "--ms", "0", "--positive", "1m30s", "--count", "64", "--cpus", "0.5", "--list", "a", "--list", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if size != 3<<29 || ms != 0 || positive != 90000 || count != 64 || cpus != 0.5 || len(list) != 2 {
		t.Errorf("size %d ms %d positive %d count %d cpus %v list %q", size, ms, positive, count, cpus, list)
	}
	for _, bad := range [][]string{{"--positive", "0"}, {"--count", "-1"}, {"--count", "0x40"}, {"--cpus", "NaN"}, {"--cpus", "-1"}, {"--size", "1e9"}, {"--ms", "-1s"}} {
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
