package metrics

import (
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/record"
)

// TestFileMetrics: files in and out are counted with their bytes; the
// artifact store's size and evictions are there from the start.
func TestFileMetrics(t *testing.T) {
	m := New("v-test")
	before := scrape(t, m)
	for _, want := range []string{
		`cellblock_files_total{direction="in"} 0`, `cellblock_files_total{direction="out"} 0`,
		`cellblock_artifacts_evicted_total{reason="quota"} 0`, `cellblock_artifacts_bytes 0`, `cellblock_artifacts_files 0`,
	} {
		if !strings.Contains(before, want) {
			t.Errorf("no %q before anything happened", want)
		}
	}
	m.SetArtifacts(func() (int64, int) { return 12345, 3 })
	m.Observe(record.Run{
		Request: &api.RunRequest{Code: "x", Files: []api.FileInput{{Path: "a", Content: "1234"}}},
		Result:  &api.Result{RunID: "r1", Files: []api.File{{Path: "o", Size: 10}, {Path: "p", Size: 5}}},
	})
	// Refused before it ran: its files went nowhere.
	m.Observe(record.Run{
		Request: &api.RunRequest{Code: "x", Files: []api.FileInput{{Path: "a", Content: "1234"}}},
		Result:  &api.Result{Error: &api.Error{Type: api.ErrOverLimit}},
	})
	m.ObserveFile(record.FileOp{Op: record.FilePut, Size: 6})
	m.ObserveFile(record.FileOp{Op: record.FilePut, Size: 6, Error: &api.Error{Type: api.ErrSessionBusy}})
	m.ArtifactEvicted("expired")
	got := scrape(t, m)
	for _, want := range []string{
		`cellblock_files_total{direction="in"} 2`, `cellblock_file_bytes_total{direction="in"} 10`,
		`cellblock_files_total{direction="out"} 2`, `cellblock_file_bytes_total{direction="out"} 15`,
		`cellblock_artifacts_evicted_total{reason="expired"} 1`, `cellblock_artifacts_bytes 12345`, `cellblock_artifacts_files 3`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}
