package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellblock/cellblock/internal/record"
)

// fileMetrics count files in and out of runs and sessions, and keep the
// artifact store's size.
type fileMetrics struct {
	files     *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	evictions *prometheus.CounterVec
	store     atomic.Pointer[func() (bytes int64, files int)]
}

// Directions of cellblock_files_total.
var fileDirections = []string{"in", "out"}

// Eviction reasons of cellblock_artifacts_evicted_total.
var evictReasons = []string{"expired", "quota"}

func (m *Metrics) registerFiles() {
	f := &m.fileMetrics
	f.files = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cellblock_files_total",
		Help: "Files put into runs and sessions (in: a request's files, a session's PUT) and given back by them (out: a run's /work/out).",
	}, []string{"direction"})
	f.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cellblock_file_bytes_total",
		Help: "Bytes of the files counted by cellblock_files_total.",
	}, []string{"direction"})
	f.evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cellblock_artifacts_evicted_total",
		Help: "Artifacts a uid lost from the store (its file is deleted when no uid holds it any more): expired (not produced again within the TTL) or quota (to make room: the committing uid's own least recently produced, else the biggest uid's).",
	}, []string{"reason"})
	for _, d := range fileDirections {
		f.files.WithLabelValues(d)
		f.bytes.WithLabelValues(d)
	}
	for _, r := range evictReasons {
		f.evictions.WithLabelValues(r)
	}
	m.reg.MustRegister(f.files, f.bytes, f.evictions,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellblock_artifacts_bytes",
			Help: "Bytes counted against the artifact store's quota now: content, and 4 KiB per artifact for its record, for each uid that holds it (content several uids hold is stored once).",
		}, func() float64 { b, _ := f.readStore(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellblock_artifacts_files",
			Help: "Artifacts the store holds now, counted for each uid that holds them.",
		}, func() float64 { _, n := f.readStore(); return float64(n) }),
	)
}

func (f *fileMetrics) readStore() (int64, int) {
	if s := f.store.Load(); s != nil {
		return (*s)()
	}
	return 0, 0
}

// SetArtifacts gives the registry the artifact store's size, read at
// every scrape.
func (m *Metrics) SetArtifacts(stats func() (bytes int64, files int)) {
	m.fileMetrics.store.Store(&stats)
}

// ArtifactEvicted counts one artifact deleted from the store, for reason
// (artifacts.EvictExpired or EvictQuota).
func (m *Metrics) ArtifactEvicted(reason string) {
	m.fileMetrics.evictions.WithLabelValues(reason).Inc()
}

// observeFiles counts a run's files in and out.
func (m *Metrics) observeFiles(rec record.Run) {
	f := &m.fileMetrics
	if req := rec.Request; req != nil && rec.Result != nil && rec.Result.RunID != "" {
		for i := range req.Files {
			n, _ := req.Files[i].Size()
			f.files.WithLabelValues("in").Inc()
			f.bytes.WithLabelValues("in").Add(float64(n))
		}
	}
	if res := rec.Result; res != nil {
		for _, file := range res.Files {
			f.files.WithLabelValues("out").Inc()
			f.bytes.WithLabelValues("out").Add(float64(file.Size))
		}
	}
}

// ObserveFile counts a file put into a session; it is the server's
// FileObserver (or part of it).
func (m *Metrics) ObserveFile(op record.FileOp) {
	if op.Op == record.FilePut && op.Error == nil {
		m.fileMetrics.files.WithLabelValues("in").Inc()
		m.fileMetrics.bytes.WithLabelValues("in").Add(float64(op.Size))
	}
}
