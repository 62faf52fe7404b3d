// Package parallel runs loops across the CPU cores on a pool of long-lived worker goroutines
// that spin for a short while between loops before they park. A decode step of a model runs
// hundreds of short parallel loops (one per weight matrix, attention, element-wise work); waking
// a parked thread for each one costs tens of microseconds on a virtual machine, which at batch 1
// added 10-15% to the time of the matrix products.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long an idle worker polls for the next loop before it parks: longer than the
// serial gaps inside a forward step (norms, the last projection's tail), short enough that an
// idle engine gives its cores back at once.
const spinFor = 200 * time.Microsecond

// waitFor is how long the caller of For polls for the workers to finish their last indices
// before it blocks.
const waitFor = 50 * time.Microsecond

// job is one call of For on the pool.
type job struct {
	// fn is the loop body; n the number of indices; workers bounds the ids that may run it.
	fn      func(w, i int)
	n       int64
	workers int
	// next is the next index to claim; done counts the indices finished.
	next, done atomic.Int64
	// finished is closed by whoever finishes the last index.
	finished chan struct{}
}

// run claims and runs indices of j as worker w until none are left.
func (j *job) run(w int) {
	for {
		i := j.next.Add(1) - 1
		if i >= j.n {
			return
		}
		j.fn(w, int(i))
		if j.done.Add(1) == j.n {
			close(j.finished)
		}
	}
}

// worker is one pool goroutine.
type worker struct {
	// id is the worker id it passes to loop bodies (the caller of For is 0).
	id int
	// sleeping is set while the worker is parked, or about to park, on wake.
	sleeping atomic.Bool
	// wake receives one value from the caller that cleared sleeping.
	wake chan struct{}
}

// pool is the process's worker pool.
var pool struct {
	// mu is held by the one For call running on the pool; a call that finds it held (a nested
	// or concurrent loop) runs on goroutines of its own.
	mu sync.Mutex
	// current is the latest job; workers compare it with the last one they ran.
	current atomic.Pointer[job]
	// workers are the started pool goroutines (ids 1, 2, ...); guarded by mu.
	workers []*worker
}

// For calls fn(w, i) for every i in [0, n) on up to workers goroutines, the caller's included,
// which take the next index from a shared counter (so uneven items balance themselves). w in
// [0, workers) names the goroutine, for per-worker scratch: no two calls with the same w run at
// once. workers <= 1 runs inline with w = 0. At most GOMAXPROCS goroutines take part.
func For(n, workers int, fn func(w, i int)) {
	workers = min(workers, n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			fn(0, i)
		}
		return
	}
	if !pool.mu.TryLock() {
		spawn(n, workers, fn)
		return
	}
	defer pool.mu.Unlock()
	for len(pool.workers) < workers-1 {
		wk := &worker{id: len(pool.workers) + 1, wake: make(chan struct{}, 1)}
		pool.workers = append(pool.workers, wk)
		go wk.loop()
	}
	j := &job{fn: fn, n: int64(n), workers: workers, finished: make(chan struct{})}
	pool.current.Store(j)
	for _, wk := range pool.workers[:workers-1] {
		if wk.sleeping.Load() && wk.sleeping.Swap(false) {
			wk.wake <- struct{}{}
		}
	}
	j.run(0)
	start := time.Now()
	// The indices left are running on workers and take microseconds, unless the OS has taken
	// a worker's core for something else: poll a little, then block. (No runtime.Gosched here
	// or in the workers' polling: a yielded goroutine goes to the global run queue without
	// waking an idle P, and the caller and a worker can then end up sharing one P.)
	for spins := 0; j.done.Load() < j.n; spins++ {
		if spins%64 == 63 && time.Since(start) > waitFor {
			<-j.finished
			return
		}
	}
}

// loop runs jobs as they are published.
func (wk *worker) loop() {
	var last *job
	for {
		j := wk.next(last)
		last = j
		if wk.id < j.workers {
			j.run(wk.id)
		}
	}
}

// next returns the first job published after last: it polls for spinFor, then parks until a
// caller wakes it.
func (wk *worker) next(last *job) *job {
	start := time.Now()
	for spins := 0; ; spins++ {
		if j := pool.current.Load(); j != last {
			return j
		}
		if spins%64 == 63 && time.Since(start) > spinFor {
			break
		}
	}
	wk.sleeping.Store(true)
	// A job published between the last poll and the store above may have seen sleeping unset:
	// look again, and take the flag back unless its caller already took it (then it sends).
	if j := pool.current.Load(); j != last && wk.sleeping.Swap(false) {
		return j
	}
	<-wk.wake
	return pool.current.Load()
}

// spawn is For on goroutines of its own, for calls that find the pool busy.
func spawn(n, workers int, fn func(w, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(w, i)
			}
		})
	}
	wg.Wait()
}
