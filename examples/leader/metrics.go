package main

import (
	"errors"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics turns the events of a fencing.Observer into Prometheus metrics.
//
// Every metric says what this process has noticed, when it noticed it. In
// particular leasehold_owner is 1 from the reported acquisition to the
// reported release or loss: during a partition it still reads 1 after etcd
// has handed the name to another process, until the session's ValidUntil
// passes. It is for dashboards and alerts; writes are made safe by fencing
// them with the token, not by this gauge.
//
// The name label is the lock or election name, so there are as many series
// as names: use a fixed set of names, never one per request or per job run.
//
// The fields are set by newMetrics and never changed; the collectors are safe
// for concurrent use, as the observer's callbacks run on many goroutines.
type metrics struct {
	owner       *prometheus.GaugeVec     // kind, name
	transitions *prometheus.CounterVec   // kind, name, event
	wait        *prometheus.HistogramVec // kind, name
	held        *prometheus.HistogramVec // kind, name
	losses      *prometheus.CounterVec   // kind, name, cause
	early       *prometheus.HistogramVec // kind
	roundTrip   prometheus.Histogram
	margin      prometheus.Gauge
	renewFails  prometheus.Counter
	rejections  *prometheus.CounterVec // name, cause
}

// newMetrics registers the leasehold_* metrics on reg. It panics, as
// MustRegister does, if reg already holds any of them: make one per registry.
func newMetrics(reg prometheus.Registerer) *metrics {
	const ns = "leasehold"
	// 1 ms to 60 s: from an uncontended Lock to a long queue, and up to a
	// TTL for how early a loss was noticed.
	short := prometheus.ExponentialBucketsRange(0.001, 60, 12)
	// 10 ms to a day: a leader may lead for days.
	long := prometheus.ExponentialBucketsRange(0.01, 24*60*60, 12)
	m := &metrics{
		owner: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "owner",
			Help: "Ownerships of the lock or election this process has acquired and not yet seen end: 1 while it holds or leads, 0 after."},
			[]string{"kind", "name"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "transitions_total",
			Help: "Ownerships acquired, released on purpose, and lost."},
			[]string{"kind", "name", "event"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "acquire_wait_seconds",
			Help: "Time from the Lock or Campaign call to ownership.", Buckets: short},
			[]string{"kind", "name"}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "hold_seconds",
			Help: "Time from acquisition to release, or to the loss being noticed.", Buckets: long},
			[]string{"kind", "name"}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "losses_total",
			Help: "Ownerships lost without being given up, by cause."},
			[]string{"kind", "name", "cause"}),
		early: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "loss_early_seconds",
			Help: "How long before the session's ValidUntil a loss was noticed: about 0 when ValidUntil passed without a renewal.", Buckets: short},
			[]string{"kind"}),
		roundTrip: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "renewal_round_trip_seconds",
			Help: "Round trip of successful lease renewals.", Buckets: short}),
		margin: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "renewal_margin_seconds",
			Help: "After the last renewal attempt, how long the session could still vouch for its lease without another."}),
		renewFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "renewal_failures_total",
			Help: "Lease renewal attempts that failed (each is retried)."}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rejections_total",
			Help: "Writes refused for a lost ownership (not_owner) or a stale token (stale_token)."},
			[]string{"name", "cause"}),
	}
	reg.MustRegister(m.owner, m.transitions, m.wait, m.held, m.losses, m.early,
		m.roundTrip, m.margin, m.renewFails, m.rejections)
	return m
}

// observer returns the hook to pass to fencing.WithObserver. The renewal
// metrics have no label: they describe one session, so give each session of
// a process its own registry, or they mix.
func (m *metrics) observer() fencing.Observer {
	return fencing.Observer{
		OnAcquire: m.acquired,
		OnRelease: m.released,
		OnLoss:    m.lost,
		OnRenew:   m.renewed,
		OnReject:  m.rejected,
	}
}

// The owner gauge moves by one, never to a value: one name can be owned
// twice at once, when a newer ownership is acquired before an older one's
// loss is noticed, and setting 0 at that loss would hide the newer one. Each
// ownership reports one acquisition and exactly one end, so the gauge counts
// the live ones: normally 0 or 1.

func (m *metrics) acquired(e fencing.AcquireEvent) {
	kind, name := string(e.Kind), e.Token.Name
	m.owner.WithLabelValues(kind, name).Inc()
	m.transitions.WithLabelValues(kind, name, "acquired").Inc()
	m.wait.WithLabelValues(kind, name).Observe(e.Wait.Seconds())
}

func (m *metrics) released(e fencing.ReleaseEvent) {
	kind, name := string(e.Kind), e.Token.Name
	m.owner.WithLabelValues(kind, name).Dec()
	m.transitions.WithLabelValues(kind, name, "released").Inc()
	m.held.WithLabelValues(kind, name).Observe(e.Held.Seconds())
}

func (m *metrics) lost(e fencing.LossEvent) {
	kind, name := string(e.Kind), e.Token.Name
	m.owner.WithLabelValues(kind, name).Dec()
	m.transitions.WithLabelValues(kind, name, "lost").Inc()
	m.held.WithLabelValues(kind, name).Observe(e.Held.Seconds())
	m.losses.WithLabelValues(kind, name, causeLabel(e.Cause)).Inc()
	// Negative when noticed after ValidUntil (a late timer): count it as 0.
	m.early.WithLabelValues(kind).Observe(max(e.Early, 0).Seconds())
}

func (m *metrics) renewed(e fencing.RenewEvent) {
	m.margin.Set(e.Left.Seconds())
	if e.Err != nil {
		// A failed attempt's round trip is mostly its timeout: keep it out
		// of the latency histogram.
		m.renewFails.Inc()
		return
	}
	m.roundTrip.Observe(e.RoundTrip.Seconds())
}

func (m *metrics) rejected(e fencing.RejectEvent) {
	m.rejections.WithLabelValues(e.Token.Name, rejectLabel(e.Cause)).Inc()
}

// causeLabel names the cause of a loss. The order matters: a key deleted with
// its lease wraps both fencing.ErrKeyDeleted and fencing.ErrLeaseExpired, and
// is counted as lease_expired. Releases (fencing.ErrNotHeld and the like)
// never come here: they are not losses.
func causeLabel(err error) string {
	switch {
	case errors.Is(err, fencing.ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(err, fencing.ErrLeaseUnconfirmed):
		return "lease_unconfirmed"
	case errors.Is(err, fencing.ErrSessionClosed):
		return "session_closed"
	case errors.Is(err, fencing.ErrKeyDeleted):
		return "key_gone"
	default:
		return "other"
	}
}

// rejectLabel names the cause of a refused write.
func rejectLabel(err error) string {
	switch {
	case errors.Is(err, guard.ErrNotOwner):
		return "not_owner"
	case errors.Is(err, fencing.ErrStaleToken):
		return "stale_token"
	default:
		return "other"
	}
}
