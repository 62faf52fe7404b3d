// Package metrics keeps counters, gauges and histograms and writes them in the Prometheus text
// exposition format for /metrics. It is small on purpose: lock-free counters on the hot path, and
// label sets fixed at registration so a scrape never allocates per series.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds metric families in registration order.
type Registry struct {
	mu       sync.Mutex
	families []*family
	byName   map[string]*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]*family{}} }

type kind string

const (
	kindCounter   kind = "counter"
	kindGauge     kind = "gauge"
	kindHistogram kind = "histogram"
)

type family struct {
	name, help string
	kind       kind
	series     []series
}

type series interface {
	labels() string
	write(w io.Writer, name string)
}

// Labels are a metric's label pairs, written in the order given.
type Labels [][2]string

func (l Labels) String() string {
	if len(l) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, kv := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[0])
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(kv[1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func (r *Registry) add(name, help string, k kind, s series) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.byName[name]
	if f == nil {
		f = &family{name: name, help: help, kind: k}
		r.byName[name] = f
		r.families = append(r.families, f)
	}
	if f.kind != k {
		panic(fmt.Sprintf("metrics: %s registered as %s and %s", name, f.kind, k))
	}
	f.series = append(f.series, s)
}

// Counter is a monotonically increasing value.
type Counter struct {
	lbl string
	v   atomic.Uint64 // float64 bits
}

// NewCounter registers a counter series.
func (r *Registry) NewCounter(name, help string, labels Labels) *Counter {
	c := &Counter{lbl: labels.String()}
	r.add(name, help, kindCounter, c)
	return c
}

// Add adds v (>= 0).
func (c *Counter) Add(v float64) {
	for {
		old := c.v.Load()
		if c.v.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Value returns the current count.
func (c *Counter) Value() float64 { return math.Float64frombits(c.v.Load()) }

func (c *Counter) labels() string { return c.lbl }
func (c *Counter) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s%s %s\n", name, c.lbl, fmtFloat(c.Value()))
}

// GaugeFunc is a gauge read from a function at scrape time.
type GaugeFunc struct {
	lbl string
	fn  func() float64
}

// NewGaugeFunc registers a gauge whose value fn returns at each scrape.
func (r *Registry) NewGaugeFunc(name, help string, labels Labels, fn func() float64) {
	r.add(name, help, kindGauge, &GaugeFunc{lbl: labels.String(), fn: fn})
}

func (g *GaugeFunc) labels() string { return g.lbl }
func (g *GaugeFunc) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s%s %s\n", name, g.lbl, fmtFloat(g.fn()))
}

// CounterFunc is a counter read from a function at scrape time: a count kept elsewhere (a rank's
// scheduler, reported with its load) that must be exposed as a counter.
type CounterFunc struct {
	lbl string
	fn  func() float64
}

// NewCounterFunc registers a counter whose value fn returns at each scrape; fn must never
// decrease except when the counted process restarts.
func (r *Registry) NewCounterFunc(name, help string, labels Labels, fn func() float64) {
	r.add(name, help, kindCounter, &CounterFunc{lbl: labels.String(), fn: fn})
}

func (c *CounterFunc) labels() string { return c.lbl }
func (c *CounterFunc) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s%s %s\n", name, c.lbl, fmtFloat(c.fn()))
}

// Histogram counts observations in cumulative buckets.
type Histogram struct {
	lbl     string
	bounds  []float64
	mu      sync.Mutex
	counts  []uint64 // per bucket, not cumulative; last is +Inf
	sum     float64
	samples uint64
}

// NewHistogram registers a histogram with the given upper bounds (sorted ascending).
func (r *Registry) NewHistogram(name, help string, labels Labels, bounds []float64) *Histogram {
	b := append([]float64(nil), bounds...)
	sort.Float64s(b)
	h := &Histogram{lbl: labels.String(), bounds: b, counts: make([]uint64, len(b)+1)}
	r.add(name, help, kindHistogram, h)
	return h
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.samples++
	h.mu.Unlock()
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samples
}

func (h *Histogram) labels() string { return h.lbl }
func (h *Histogram) write(w io.Writer, name string) {
	h.mu.Lock()
	counts := append([]uint64(nil), h.counts...)
	sum, n := h.sum, h.samples
	h.mu.Unlock()
	inner := strings.TrimSuffix(strings.TrimPrefix(h.lbl, "{"), "}")
	if inner != "" {
		inner += ","
	}
	var cum uint64
	for i, b := range h.bounds {
		cum += counts[i]
		fmt.Fprintf(w, "%s_bucket{%sle=\"%s\"} %d\n", name, inner, fmtFloat(b), cum)
	}
	fmt.Fprintf(w, "%s_bucket{%sle=\"+Inf\"} %d\n", name, inner, n)
	fmt.Fprintf(w, "%s_sum%s %s\n", name, h.lbl, fmtFloat(sum))
	fmt.Fprintf(w, "%s_count%s %d\n", name, h.lbl, n)
}

// LatencyBuckets suit request latencies from a millisecond to a few minutes, in seconds.
var LatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// WriteText writes every family in the Prometheus text format (version 0.0.4).
func (r *Registry) WriteText(w io.Writer) {
	r.mu.Lock()
	fams := append([]*family(nil), r.families...)
	r.mu.Unlock()
	for _, f := range fams {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		for _, s := range f.series {
			s.write(w, f.name)
		}
	}
}

func fmtFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
