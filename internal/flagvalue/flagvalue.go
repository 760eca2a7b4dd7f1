// Package flagvalue is the command-line grammar that cellblock and
// cellblockd share: how a size (128M, 1.5G, 512MiB), a duration (5s, 1m30s,
// or a plain number of seconds), a count, a CPU quota and a repeatable
// flag are written, and the flag.Value types that read them. The same
// limit is typed the same way to both programs.
//
// It must stay small, free of cgo and of anything but the standard
// library: the cellblock command starts once per run and links it.
package flagvalue

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Binary size units: every unit is a power of 1024, as docker reads
// memory sizes; 128M and 128MiB are both 134217728 bytes.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": KiB, "ki": KiB, "kb": KiB, "kib": KiB,
	"m": MiB, "mi": MiB, "mb": MiB, "mib": MiB,
	"g": GiB, "gi": GiB, "gb": GiB, "gib": GiB,
	"t": TiB, "ti": TiB, "tb": TiB, "tib": TiB,
}

var errSize = errors.New("not a size such as 128M, 1.5G or 512MiB")

// ParseSize reads a byte count: decimal digits, possibly with a fraction,
// then optionally (after spaces or not) a unit K, M, G or T, optionally
// followed by "i", "B" or "iB", or "B" alone, in any case. Fractions of a
// byte are dropped. Nothing else is a size: no sign, exponent (1e9), hex,
// Inf or NaN, and nothing past 2^63-1 bytes.
func ParseSize(s string) (int64, error) {
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

// ParseDuration reads a Go duration ("5s", "1m30s", "250ms") or a plain
// number of seconds ("2", "0.5"). A negative duration is refused.
func ParseDuration(s string) (time.Duration, error) {
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
	return d, nil
}

// Millis is d in whole milliseconds, rounded up, so that a tiny positive
// duration never becomes 0.
func Millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
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

// Size is a byte count flag (ParseSize): --memory 128M.
type Size struct{ P *int64 }

func (v Size) String() string {
	if v.P == nil {
		return ""
	}
	return strconv.FormatInt(*v.P, 10)
}

func (v Size) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v.P = n
	return nil
}

// Duration is a duration flag (ParseDuration) kept in whole milliseconds,
// rounded up: --timeout 5s. With Positive, 0 is refused too.
type Duration struct {
	P        *int64
	Positive bool
}

func (v Duration) String() string {
	if v.P == nil || *v.P == 0 {
		return ""
	}
	return (time.Duration(*v.P) * time.Millisecond).String()
}

func (v Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	if v.Positive && d == 0 {
		return errors.New("must be more than 0, such as 30s")
	}
	*v.P = Millis(d)
	return nil
}

// Count is a non-negative whole number flag, in decimal: --pids 64.
type Count struct{ P *int64 }

func (v Count) String() string {
	if v.P == nil {
		return ""
	}
	return strconv.FormatInt(*v.P, 10)
}

func (v Count) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return errors.New("not a whole number such as 64")
	}
	*v.P = n
	return nil
}

// CPUs is a CPU quota flag, in cores: --cpus 0.5. Negative numbers, Inf
// and NaN are refused.
type CPUs struct{ P *float64 }

func (v CPUs) String() string {
	if v.P == nil {
		return ""
	}
	return strconv.FormatFloat(*v.P, 'f', -1, 64)
}

func (v CPUs) Set(s string) error {
	c, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return errors.New("not a number of cores such as 0.5 or 2")
	}
	*v.P = c
	return nil
}

// List collects a repeatable string flag: --with requests --with rich.
type List struct{ P *[]string }

func (v List) String() string {
	if v.P == nil {
		return ""
	}
	return strings.Join(*v.P, ",")
}

func (v List) Set(s string) error {
	*v.P = append(*v.P, s)
	return nil
}
