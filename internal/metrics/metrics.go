// Package metrics keeps cellblockd's Prometheus metrics and serves them in
// the Prometheus text format. It learns about runs only from the server's
// run records and its admission counters: it does not reach into the jail,
// the cgroups or the environment store, so it counts dependency
// environments from what each result says about its environment.
//
// Besides cellblock's own metrics the registry holds the Go runtime's
// (go_goroutines and co.) and the process's (process_open_fds,
// process_resident_memory_bytes), which the soak test reads to prove the
// daemon leaks nothing.
package metrics

import (
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/peercred"
	"github.com/cellblock/cellblock/internal/record"
)

// secretMetricPrefix begins the names of the secrets' series, which only
// root is served (Handler).
const secretMetricPrefix = "cellblock_secret_"

// Metrics is the daemon's registry. Observe is safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	runs      *prometheus.CounterVec
	duration  prometheus.Histogram
	setup     prometheus.Histogram
	envHits   prometheus.Counter
	envMisses prometheus.Counter
	envBuilds prometheus.Counter
	prestart  prometheus.Counter
	sessions  *prometheus.CounterVec
	denials   *prometheus.CounterVec
	secrets   *prometheus.CounterVec
	tools     *toolMetrics
	load      atomic.Pointer[func() (running, queued int)]
	ready     atomic.Pointer[func() int]
	open      atomic.Pointer[func() int]
	fileMetrics
}

// Session events counted by cellblock_sessions_total.
var sessionEvents = []string{"created", "expired", "deleted", "lost", "ended"}

// New returns the registry of a daemon of the given version.
func New(version string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellblock_runs_total",
			Help: "Run requests by outcome: ok, exit_nonzero, timeout, oom, refused (bad request, over a limit, unknown Python), busy (queue full), dependency_error, canceled, unavailable (shutting down), error (the daemon failed).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cellblock_run_duration_seconds",
			Help:    "Time from request to result of the runs that were carried out: queueing, jail set-up, the program and teardown.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14), // 50 ms to about 7 min
		}),
		setup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cellblock_jail_setup_seconds",
			Help:    "Time to create a run's cgroup and start its jail, up to the program's start.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 11), // 5 ms to about 5 s
		}),
		envHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellblock_env_cache_hits_total",
			Help: "Runs whose dependency environment was already built.",
		}),
		envMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellblock_env_cache_misses_total",
			Help: "Runs with dependencies whose environment was not cached: the builds, and the attempts that failed.",
		}),
		envBuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellblock_env_cache_builds_total",
			Help: "Dependency environments built successfully.",
		}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellblock_sessions_total",
			Help: "Session events: created, expired (idle timeout or maximum lifetime), deleted, lost (its interpreter died: out of memory, killed after a timeout, exited), ended (the daemon stopped).",
		}, []string{"event"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellblock_network_denials_total",
			Help: "Connections the network proxies of runs, sessions and dependency builds refused, by reason: not_allowed (not in the allowlist), private_address, forbidden_address (cloud metadata and the like), connection_limit, byte_limit.",
		}, []string{"reason"}),
		secrets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: secretMetricPrefix + "uses_total",
			Help: "Uses of the operator's secrets by runs and sessions, by secret and outcome: injected (a request went to the secret's host with its value), refused (a request carried its placeholder to another host or over plain HTTP), redacted (a response carried its value, and the program got the placeholder instead).",
		}, []string{"secret", "outcome"}),
		prestart: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellblock_runs_prestarted_total",
			Help: "Runs carried out in a jail built before their request (--prestart); the others had a jail built for them.",
		}),
		tools: newToolMetrics(),
	}
	for _, o := range record.Outcomes {
		m.runs.WithLabelValues(o)
	}
	for _, e := range sessionEvents {
		m.sessions.WithLabelValues(e)
	}
	for _, r := range api.DenyReasons {
		m.denials.WithLabelValues(r)
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "cellblock_build_info",
		Help:        "The daemon's version, as a label; the value is always 1.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	m.reg.MustRegister(
		m.runs, m.duration, m.setup, m.envHits, m.envMisses, m.envBuilds, m.prestart, m.sessions, m.denials, m.secrets, info,
		m.tools.calls, m.tools.duration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellblock_runs_in_flight",
			Help: "Runs executing now.",
		}, func() float64 { r, _ := m.readLoad(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellblock_queue_length",
			Help: "Runs waiting for a slot now.",
		}, func() float64 { _, q := m.readLoad(); return float64(q) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellblock_prestarted_jails_ready",
			Help: "Jails built ahead of requests and waiting for a run now.",
		}, func() float64 {
			if f := m.ready.Load(); f != nil {
				return float64((*f)())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellblock_sessions_open",
			Help: "Sessions alive now (lost ones until deleted or expired included).",
		}, func() float64 {
			if f := m.open.Load(); f != nil {
				return float64((*f)())
			}
			return 0
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.registerFiles()
	return m
}

// SetLoad gives the registry the server's admission counters, read at
// every scrape for the in-flight and queue gauges.
func (m *Metrics) SetLoad(load func() (running, queued int)) { m.load.Store(&load) }

// SetPrestartReady gives the registry the count of prestarted jails ready,
// read at every scrape.
func (m *Metrics) SetPrestartReady(ready func() int) { m.ready.Store(&ready) }

// SetSessionsOpen gives the registry the count of sessions alive, read at
// every scrape.
func (m *Metrics) SetSessionsOpen(open func() int) { m.open.Store(&open) }

// SessionEvent counts one session event (see sessionEvents); others are
// ignored.
func (m *Metrics) SessionEvent(kind string) {
	for _, e := range sessionEvents {
		if e == kind {
			m.sessions.WithLabelValues(kind).Inc()
			return
		}
	}
}

// NetworkDenial counts one refused connection by its reason (api.Deny*);
// other reasons are ignored, so that the labels stay bounded.
func (m *Metrics) NetworkDenial(reason string) {
	for _, r := range api.DenyReasons {
		if r == reason {
			m.denials.WithLabelValues(reason).Inc()
			return
		}
	}
}

// DeclareSecrets gives every declared secret its series from the start,
// at zero.
func (m *Metrics) DeclareSecrets(names []string) {
	for _, n := range names {
		for _, o := range api.SecretOutcomes {
			m.secrets.WithLabelValues(n, o)
		}
	}
}

// SecretUse counts one use of a secret by its outcome (api.Secret*);
// other outcomes are ignored. Names are the operator's, a bounded set.
func (m *Metrics) SecretUse(name, outcome string) {
	for _, o := range api.SecretOutcomes {
		if o == outcome {
			m.secrets.WithLabelValues(name, outcome).Inc()
			return
		}
	}
}

func (m *Metrics) readLoad() (running, queued int) {
	if f := m.load.Load(); f != nil {
		return (*f)()
	}
	return 0, 0
}

// Observe counts one run record; it is the server's Observer (or part of it).
func (m *Metrics) Observe(rec record.Run) {
	res := rec.Result
	m.runs.WithLabelValues(record.Outcome(res)).Inc()
	m.tools.observe(rec)
	m.observeFiles(rec)
	if res == nil || res.RunID == "" {
		return // refused before it ran: nothing was timed or built
	}
	m.duration.Observe(rec.Duration.Seconds())
	if p := res.Phases; p != nil && p.CreateUs+p.StartUs > 0 {
		m.setup.Observe(float64(p.CreateUs+p.StartUs) / 1e6)
	}
	if p := res.Phases; p != nil && p.Prestarted {
		m.prestart.Inc()
	}
	switch env := res.Environment; {
	case env != nil && env.CacheHit:
		m.envHits.Inc()
	case env != nil:
		m.envMisses.Inc()
		m.envBuilds.Inc()
	case res.Error != nil && res.Error.Type == api.ErrDependency:
		m.envMisses.Inc() // a build that failed
	}
}

// Handler serves the registry in the Prometheus text format: all of it to
// root, and to other callers all but the secrets' series, whose names are
// the operator's secrets and whose counts are other users' uses of them,
// root's to see as info's secrets are. The caller's credentials are the
// request context's (peercred); a request without them is no root's.
func (m *Metrics) Handler() http.Handler {
	all := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	others := promhttp.HandlerFor(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := m.reg.Gather()
		kept := mfs[:0]
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), secretMetricPrefix) {
				kept = append(kept, mf)
			}
		}
		return kept, err
	}), promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := peercred.FromContext(r.Context()); ok && p.UID == 0 {
			all.ServeHTTP(w, r)
			return
		}
		others.ServeHTTP(w, r)
	})
}
