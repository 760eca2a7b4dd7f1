package cli

import (
	"fmt"
	"strconv"

	"github.com/cellblock/cellblock/internal/flagvalue"
)

// Binary size units, as flagvalue reads them.
const (
	kib = flagvalue.KiB
	mib = flagvalue.MiB
	gib = flagvalue.GiB
	tib = flagvalue.TiB
)

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
