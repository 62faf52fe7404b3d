// Package parallel runs the loops of the model's forward pass over a set of worker goroutines
// that stay alive between loops.
//
// A decode step at batch 1 is about 150 short parallel loops (every projection, attention),
// each a few hundred microseconds, separated by a few microseconds of serial work. Starting
// goroutines for each loop makes the runtime wake a sleeping thread every time (a futex call
// and a scheduler hand-off, 10-15% of a BF16 decode step measured here). The workers here spin
// for a short while after a loop, so the next loop finds them awake, and then sleep; the spin
// is bounded so that an idle engine, or a machine whose other cores are busy, does not lose a
// core to waiting.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long a worker keeps polling for the next loop before it sleeps: longer than
// the serial work between two loops of a decode step, far shorter than a step.
const spinFor = 50 * time.Microsecond

// For calls fn(w, i) for every i in [0, n) on up to workers goroutines, the caller's included,
// each taking the next index from a shared counter (so uneven items balance themselves and a
// descheduled goroutine holds back at most the item it took); w in [0, workers) names the
// goroutine, for per-worker scratch. It returns when every call has returned. workers <= 1
// runs inline with w = 0. Calls may nest or run concurrently: a call that finds the shared
// workers busy starts goroutines of its own.
func For(n, workers int, fn func(w, i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			fn(0, i)
		}
		return
	}
	if !shared.mu.TryLock() {
		spawn(n, workers, fn)
		return
	}
	defer shared.mu.Unlock()
	shared.run(n, workers, fn)
}

// spawn runs the loop on goroutines started for this call.
func spawn(n, workers int, fn func(w, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Go(func() { claim(&next, n, w, fn) })
	}
	claim(&next, n, 0, fn)
	wg.Wait()
}

// claim calls fn(w, i) for each index it takes from next until none are left.
func claim(next *atomic.Int64, n, w int, fn func(w, i int)) {
	for {
		i := int(next.Add(1) - 1)
		if i >= n {
			return
		}
		fn(w, i)
	}
}

// shared is the process's pool; its workers start on first use.
var shared pool

// pool is a set of helper goroutines that For's caller hands loops to.
type pool struct {
	// mu is held by the For call that owns the helpers, for the whole loop.
	mu sync.Mutex
	// helpers are the started helper goroutines; helper h runs as worker h+1. Grown, never
	// shrunk, under mu.
	helpers []*helper
}

// loop is one For call handed to helpers.
type loop struct {
	// fn is the loop body; n the index count.
	fn func(w, i int)
	n  int
	// next is the next unclaimed index.
	next atomic.Int64
	// state counts the helpers working on the loop, with closedBit set once the caller has run
	// out of items: no helper joins after that, so one that was descheduled before it joined
	// never holds the caller up.
	state atomic.Int32
	// done is closed by the last helper to leave after closedBit is set.
	done chan struct{}
}

// closedBit marks a loop that takes no more helpers.
const closedBit = 1 << 30

// join adds a helper to l unless l is closed.
func (l *loop) join() bool {
	for {
		s := l.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if l.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// leave removes a helper from l, waking the caller if it was the last of a closed loop.
func (l *loop) leave() {
	if l.state.Add(-1) == closedBit {
		close(l.done)
	}
}

// helper is one worker goroutine of the pool.
type helper struct {
	// w is the worker index it passes to loop bodies.
	w int
	// posted is the latest loop handed to the helper; it runs each one once.
	posted atomic.Pointer[loop]
	// sleeping is set while the helper waits on wake (or is about to).
	sleeping atomic.Bool
	// wake has room for one token: a poster that sees sleeping set leaves one there.
	wake chan struct{}
}

// run hands the loop to workers-1 helpers, runs its own share, and waits for them.
func (p *pool) run(n, workers int, fn func(w, i int)) {
	for len(p.helpers) < workers-1 {
		h := &helper{w: len(p.helpers) + 1, wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		go h.serve()
	}
	l := &loop{fn: fn, n: n, done: make(chan struct{})}
	for _, h := range p.helpers[:workers-1] {
		h.posted.Store(l)
		if h.sleeping.Load() {
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}
	}
	claim(&l.next, n, 0, fn)
	if l.state.Or(closedBit) == 0 {
		return // no helper joined, and none will
	}
	// The helpers hold at most one item each by now: poll briefly, then sleep.
	if !poll(func() bool { return l.state.Load() == closedBit }) {
		<-l.done
	}
}

// serve runs every loop posted to h, spinning for spinFor after each before it sleeps.
func (h *helper) serve() {
	var last *loop
	for {
		l := h.posted.Load()
		if l == last {
			if !poll(func() bool { return h.posted.Load() != last }) {
				// Announce the sleep, then look again: a poster stores the loop before it
				// reads sleeping, so either it sees the flag and leaves a token, or this load
				// sees its loop.
				h.sleeping.Store(true)
				if h.posted.Load() == last {
					<-h.wake
				}
				h.sleeping.Store(false)
			}
			continue // load the loop that arrived
		}
		last = l
		if l.join() {
			claim(&l.next, l.n, h.w, l.fn)
			l.leave()
		}
	}
}

// poll reports whether ready returned true within spinFor, yielding the processor between
// checks so other goroutines run while it waits. A poller that finds it was descheduled (a
// gap between two checks longer than the whole spin) has lost its core to another thread:
// spinning then takes cores from the goroutines that have work, so nobody spins for backoff.
func poll(ready func() bool) bool {
	start := time.Now()
	if start.UnixNano() < quietUntil.Load() {
		return ready()
	}
	prev := start
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i%64 == 63 {
			now := time.Now()
			if now.Sub(prev) > preempted {
				quietUntil.Store(now.Add(backoff).UnixNano())
				return false
			}
			if now.Sub(start) > spinFor {
				return false
			}
			prev = now
			runtime.Gosched()
		}
	}
}

// preempted is the gap between two checks that means the poller lost its core to another
// thread (a scheduler time slice, milliseconds); shorter gaps (tens of microseconds, a
// virtual machine's hypervisor or an interrupt) happen on a quiet machine too.
const preempted = 500 * time.Microsecond

// backoff is how long nobody spins after a poller was descheduled.
const backoff = 200 * time.Millisecond

// quietUntil is the time (Unix nanoseconds) before which poll does not spin.
var quietUntil atomic.Int64
