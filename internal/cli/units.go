package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Binary size units. The CLI reads every unit as a power of 1024, as
// docker does for memory: 128M and 128MiB are both 134217728 bytes.
const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
	gib int64 = 1 << 30
	tib int64 = 1 << 40
)

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": kib, "ki": kib, "kb": kib, "kib": kib,
	"m": mib, "mi": mib, "mb": mib, "mib": mib,
	"g": gib, "gi": gib, "gb": gib, "gib": gib,
	"t": tib, "ti": tib, "tb": tib, "tib": tib,
}

var errSize = errors.New("not a size such as 128M, 1.5G or 512MiB")

// parseSize reads a byte count: a plain number of bytes, or a number
// (possibly with a fraction) followed by K, M, G or T, optionally with
// "i", "B" or "iB", in any case. Fractions of a byte are dropped.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	mult, ok := sizeUnits[unit]
	if !ok || num == "" || num == "." || strings.Count(num, ".") > 1 {
		return 0, errSize
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, errSize
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// parseTimeout reads a Go duration ("5s", "1m30s", "250ms") or a bare
// number of seconds ("2", "0.5") and returns whole milliseconds, rounded
// up so that a tiny positive timeout never becomes 0 (the daemon's
// default).
func parseTimeout(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if isDecimal(s) {
		s += "s"
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration such as 5s, 1m30s, 500ms or 2.5 (seconds)")
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms, nil
}

// isDecimal reports whether s is digits with at most one decimal point.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// formatSize renders a byte count in the largest binary unit it reaches:
// "128 MiB", "1.5 GiB", "512 B".
func formatSize(b int64) string {
	for _, u := range []struct {
		n    int64
		name string
	}{{tib, "TiB"}, {gib, "GiB"}, {mib, "MiB"}, {kib, "KiB"}} {
		if b >= u.n {
			return formatUnits(b, u.n) + " " + u.name
		}
	}
	return fmt.Sprintf("%d B", b)
}

// formatUnits renders b/unit: whole when it divides, else to one decimal.
func formatUnits(b, unit int64) string {
	if b%unit == 0 {
		return strconv.FormatInt(b/unit, 10)
	}
	return strconv.FormatFloat(float64(b)/float64(unit), 'f', 1, 64)
}

// formatMillis renders a millisecond count the way a user would type it:
// "30s", "5m", "1h", "1.5s", "250ms".
func formatMillis(ms int64) string {
	switch {
	case ms == 0:
		return "0s"
	case ms%3600000 == 0:
		return fmt.Sprintf("%dh", ms/3600000)
	case ms%60000 == 0:
		return fmt.Sprintf("%dm", ms/60000)
	case ms >= 1000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s"
	default:
		return fmt.Sprintf("%dms", ms)
	}
}

// formatCPUs renders a CPU quota in cores.
func formatCPUs(c float64) string {
	return strconv.FormatFloat(c, 'f', -1, 64)
}
