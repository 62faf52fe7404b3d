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
	// mu guards families, byName, workerFuncs and the heartbeat (registration and scrapes).
	mu       sync.Mutex
	families []*family
	byName   map[string]*family
	// workerFuncs are the per-worker series (worker.go), published into the shared store.
	workerFuncs []*workerFunc
	// heartbeat is this process's publish time cell; heartbeatAll reads it in every slot.
	heartbeat    []atomic.Uint64
	heartbeatAll func() []indexedCells
	// shared, when set, holds the counters' and histograms' cells in a file every process of
	// the engine maps (see Shared); nil keeps them in this process's memory.
	shared *Shared
}

// NewRegistry returns an empty registry whose counters and histograms are this process's own.
func NewRegistry() *Registry { return &Registry{byName: map[string]*family{}} }

// NewSharedRegistry returns an empty registry whose counters and histograms live in this
// process's slot of s and are written out summed over every slot: whichever process answers a
// scrape shows the whole engine. Every process sharing s must register the same series in the
// same order (they run the same code); a slot whose layout differs is left out of the sums.
func NewSharedRegistry(s *Shared) *Registry {
	return &Registry{byName: map[string]*family{}, shared: s}
}

// cells returns n cells for a new series: its own (written by this process) and, for reading,
// the same cells in every slot whose layout matches.
func (r *Registry) cells(desc string, n int) (own []atomic.Uint64, all func() [][]atomic.Uint64) {
	if r.shared == nil {
		own = make([]atomic.Uint64, n)
		mine := [][]atomic.Uint64{own}
		return own, func() [][]atomic.Uint64 { return mine }
	}
	return r.shared.alloc(desc, n)
}

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
	// v is this process's count (float64 bits); all reads the count of every process sharing
	// the registry's store (just v without one).
	v   *atomic.Uint64
	all func() [][]atomic.Uint64
}

// NewCounter registers a counter series.
func (r *Registry) NewCounter(name, help string, labels Labels) *Counter {
	c := &Counter{lbl: labels.String()}
	own, all := r.cells("counter "+name+c.lbl, 1)
	c.v, c.all = &own[0], all
	r.add(name, help, kindCounter, c)
	return c
}

// Add adds v (>= 0).
func (c *Counter) Add(v float64) { addFloat(c.v, v) }

// addFloat adds v to the float64 whose bits cell holds.
func addFloat(cell *atomic.Uint64, v float64) {
	for {
		old := cell.Load()
		if cell.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Value returns the count, summed over every process sharing the registry's store.
func (c *Counter) Value() float64 {
	var v float64
	for _, cells := range c.all() {
		v += math.Float64frombits(cells[0].Load())
	}
	return v
}

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

// InfoFunc is an info-style gauge (value 1) whose labels are read from a function at scrape
// time, for facts known only once the engine runs (the ranks' KV cache geometry).
type InfoFunc struct {
	fn func() Labels
}

// NewInfoFunc registers a gauge written as name{labels} 1 with the labels fn returns at each
// scrape; it writes no sample while fn returns nil.
func (r *Registry) NewInfoFunc(name, help string, fn func() Labels) {
	r.add(name, help, kindGauge, &InfoFunc{fn: fn})
}

func (g *InfoFunc) labels() string { return "" }
func (g *InfoFunc) write(w io.Writer, name string) {
	if l := g.fn(); l != nil {
		fmt.Fprintf(w, "%s%s 1\n", name, l.String())
	}
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

// Histogram counts observations in cumulative buckets. Its cells are one count per bucket (the
// last is +Inf) and the sum of the observations (float64 bits); the count is the buckets' total,
// so a scrape never shows a count that disagrees with its buckets.
type Histogram struct {
	lbl    string
	bounds []float64
	// own are this process's cells; all reads every sharing process's.
	own []atomic.Uint64
	all func() [][]atomic.Uint64
}

// NewHistogram registers a histogram with the given upper bounds (sorted ascending).
func (r *Registry) NewHistogram(name, help string, labels Labels, bounds []float64) *Histogram {
	b := append([]float64(nil), bounds...)
	sort.Float64s(b)
	h := &Histogram{lbl: labels.String(), bounds: b}
	h.own, h.all = r.cells(fmt.Sprintf("histogram %s%s %v", name, h.lbl, b), len(b)+2)
	r.add(name, help, kindHistogram, h)
	return h
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	h.own[sort.SearchFloat64s(h.bounds, v)].Add(1)
	addFloat(&h.own[len(h.bounds)+1], v)
}

// snapshot sums the per-bucket counts and the sum over every sharing process.
func (h *Histogram) snapshot() (counts []uint64, sum float64) {
	counts = make([]uint64, len(h.bounds)+1)
	for _, cells := range h.all() {
		for i := range counts {
			counts[i] += cells[i].Load()
		}
		sum += math.Float64frombits(cells[len(h.bounds)+1].Load())
	}
	return counts, sum
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	counts, _ := h.snapshot()
	var n uint64
	for _, c := range counts {
		n += c
	}
	return n
}

func (h *Histogram) labels() string { return h.lbl }
func (h *Histogram) write(w io.Writer, name string) {
	counts, sum := h.snapshot()
	inner := strings.TrimSuffix(strings.TrimPrefix(h.lbl, "{"), "}")
	if inner != "" {
		inner += ","
	}
	var cum uint64
	for i, b := range h.bounds {
		cum += counts[i]
		fmt.Fprintf(w, "%s_bucket{%sle=\"%s\"} %d\n", name, inner, fmtFloat(b), cum)
	}
	cum += counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{%sle=\"+Inf\"} %d\n", name, inner, cum)
	fmt.Fprintf(w, "%s_sum%s %s\n", name, h.lbl, fmtFloat(sum))
	fmt.Fprintf(w, "%s_count%s %d\n", name, h.lbl, cum)
}

// LatencyBuckets suit request latencies from a millisecond to a few minutes, in seconds.
var LatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// WriteText writes every family in the Prometheus text format (version 0.0.4).
func (r *Registry) WriteText(w io.Writer) {
	r.publish() // this process's per-worker values as of now
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
