package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
)

// What cellblock run prints besides the program's output: the streamed
// output as it comes, and the notes after it (why the run ended, what was
// truncated, the display items a terminal cannot show, the denials).

// liveOutput copies streamed output to the client's stdout and stderr as
// it arrives.
type liveOutput struct {
	stdout, stderr io.Writer
	// seen records the streams that delivered at least one chunk.
	seen map[string]bool
	// last is the last byte written to either stream, 0 before any:
	// notes start on a line of their own.
	last byte
}

func (l *liveOutput) write(stream, data string) {
	if l.seen == nil {
		l.seen = make(map[string]bool)
	}
	l.seen[stream] = true
	if data == "" {
		return
	}
	w := l.stdout
	if stream == "stderr" {
		w = l.stderr
	} else if stream != "stdout" {
		return
	}
	// A failed write (a closed pipe) must not end the wait for the
	// result; the exit status still reports the run.
	_, _ = io.WriteString(w, data)
	l.last = data[len(data)-1]
}

// notes are the lines cellblock adds on stderr after the program's
// output, saying why the run ended as it did.
func notes(res *api.Result, req *api.RunRequest) []string {
	var limits api.Limits
	if res.Limits != nil {
		limits = *res.Limits
	}
	pick := func(applied, asked int64) int64 {
		if applied > 0 {
			return applied
		}
		return asked
	}
	var n []string
	if res.Error != nil {
		n = append(n, "cellblock: "+res.Error.Error())
	}
	for _, t := range []struct {
		name      string
		truncated bool
	}{{"stdout", res.StdoutTruncated}, {"stderr", res.StderrTruncated}} {
		if !t.truncated {
			continue
		}
		if b := pick(limits.OutputBytes, req.OutputBytes); b > 0 {
			n = append(n, fmt.Sprintf("cellblock: %s truncated at %d bytes", t.name, b))
		} else {
			n = append(n, fmt.Sprintf("cellblock: %s truncated at the output limit", t.name))
		}
	}
	for i, d := range res.Display {
		n = append(n, "cellblock: "+describeDisplay(i, d, "--json has the data"))
	}
	if res.TimedOut {
		if ms := pick(limits.TimeoutMs, req.TimeoutMs); ms > 0 {
			n = append(n, "cellblock: timed out after "+formatMillis(ms))
		} else {
			n = append(n, "cellblock: timed out")
		}
	}
	if res.OOMKilled {
		if b := pick(limits.MemoryBytes, req.MemoryBytes); b > 0 {
			n = append(n, fmt.Sprintf("cellblock: killed: out of memory (limit %s MiB)", formatUnits(b, mib)))
		} else {
			n = append(n, "cellblock: killed: out of memory")
		}
	}
	for _, d := range res.Denials {
		n = append(n, "cellblock: "+describeDenial(d))
	}
	if s := res.Session; s != nil && s.State == api.SessionLost {
		n = append(n, fmt.Sprintf("cellblock: session %s lost its interpreter: its state is gone, and it refuses runs until deleted (cellblock session rm %s)", s.ID, s.ID))
	}
	return n
}

// describeDisplay is the note for a display item on a terminal, which
// cannot show it: its text/plain and what else it holds, and hint, where
// to get it.
func describeDisplay(i int, d api.DisplayItem, hint string) string {
	var text string
	_ = json.Unmarshal(d.Data["text/plain"], &text)
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	var kinds []string
	for mime, raw := range d.Data {
		if mime == "text/plain" {
			continue
		}
		size := len(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil {
			size = len(s)
			if strings.HasPrefix(mime, "image/") && mime != "image/svg+xml" {
				size = size * 3 / 4 // base64
			}
		}
		kinds = append(kinds, fmt.Sprintf("%s, %s", mime, formatSize(int64(size))))
	}
	slices.Sort(kinds)
	if len(kinds) == 0 {
		return fmt.Sprintf("display[%d]: %s", i, text)
	}
	return fmt.Sprintf("display[%d]: %s (%s; %s)", i, text, strings.Join(kinds, "; "), hint)
}
