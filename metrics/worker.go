package metrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// Per-worker series: a value each process sharing a store knows only of itself (its in-flight
// requests, its connections, its memory). Each process publishes its values into its own slot
// (at every scrape it answers and every PublishEvery), and whichever process answers a scrape
// writes every live process's value, labelled worker="i": the series do not depend on which
// worker a scraper's connection reached. A slot not refreshed for StaleAfter (its process died or
// hangs) is left out.

// PublishEvery is how often Publish refreshes this process's per-worker values.
const PublishEvery = time.Second

// StaleAfter is how old another process's published values may be and still be written.
const StaleAfter = 5 * PublishEvery

// workerFunc is a per-worker series: fn is this process's value.
type workerFunc struct {
	reg  *Registry
	base Labels // the labels without worker
	fn   func() float64
	own  []atomic.Uint64            // this process's cell (float64 bits)
	all  func() []indexedCells      // the cell in every slot of this layout
	lbls func(worker string) string // the labels with worker
}

// indexedCells are one slot's cells of a series with the slot's worker index.
type indexedCells struct {
	index int
	cells []atomic.Uint64
}

// NewWorkerGaugeFunc registers a per-worker gauge: fn is this process's value. labels must not
// hold worker; it is added.
func (r *Registry) NewWorkerGaugeFunc(name, help string, labels Labels, fn func() float64) {
	r.addWorkerFunc(name, help, kindGauge, labels, fn)
}

// NewWorkerCounterFunc registers a per-worker counter (see NewWorkerGaugeFunc).
func (r *Registry) NewWorkerCounterFunc(name, help string, labels Labels, fn func() float64) {
	r.addWorkerFunc(name, help, kindCounter, labels, fn)
}

func (r *Registry) addWorkerFunc(name, help string, k kind, labels Labels, fn func() float64) {
	wf := &workerFunc{reg: r, base: labels, fn: fn}
	wf.lbls = func(worker string) string {
		return append(append(Labels(nil), labels...), [2]string{"worker", worker}).String()
	}
	r.mu.Lock()
	r.workerFuncs = append(r.workerFuncs, wf)
	needBeat := r.shared != nil && r.heartbeat == nil
	r.mu.Unlock()
	if r.shared == nil {
		r.add(name, help, k, wf)
		return
	}
	if needBeat {
		// The slot's freshness: when this process last published (unix nanoseconds).
		hb, hbAll := r.shared.allocIndexed("heartbeat", 1)
		r.mu.Lock()
		r.heartbeat, r.heartbeatAll = hb, hbAll
		r.mu.Unlock()
	}
	wf.own, wf.all = r.shared.allocIndexed(fmt.Sprintf("%s %s %s", k, name, labels), 1)
	r.add(name, help, k, wf)
}

// Publish refreshes this process's per-worker values every PublishEvery until ctx ends.
func (r *Registry) Publish(ctx context.Context) {
	t := time.NewTicker(PublishEvery)
	defer t.Stop()
	for {
		r.publish()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publish stores every per-worker value of this process and the time it did.
func (r *Registry) publish() {
	r.mu.Lock()
	wfs := append([]*workerFunc(nil), r.workerFuncs...)
	hb := r.heartbeat
	r.mu.Unlock()
	for _, wf := range wfs {
		if wf.own != nil {
			wf.own[0].Store(math.Float64bits(wf.fn()))
		}
	}
	if hb != nil {
		hb[0].Store(uint64(time.Now().UnixNano()))
	}
}

// live is the worker indexes whose values are fresh.
func (r *Registry) live() map[int]bool {
	r.mu.Lock()
	hbAll := r.heartbeatAll
	r.mu.Unlock()
	out := map[int]bool{}
	if hbAll == nil {
		return out
	}
	now := time.Now().UnixNano()
	for _, s := range hbAll() {
		if now-int64(s.cells[0].Load()) < int64(StaleAfter) || s.index == r.shared.index {
			out[s.index] = true
		}
	}
	return out
}

func (w *workerFunc) labels() string { return w.base.String() }

func (w *workerFunc) write(out io.Writer, name string) {
	if w.all == nil { // a registry of its own: this process only
		fmt.Fprintf(out, "%s%s %s\n", name, w.base.String(), fmtFloat(w.fn()))
		return
	}
	live := w.reg.live()
	for _, s := range w.all() {
		if live[s.index] {
			v := math.Float64frombits(s.cells[0].Load())
			fmt.Fprintf(out, "%s%s %s\n", name, w.lbls(strconv.Itoa(s.index)), fmtFloat(v))
		}
	}
}
