package parallel

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkLoop runs For and checks that every index ran once, on a worker index in range, with no
// two goroutines sharing a worker index at the same time.
func checkLoop(t *testing.T, n, workers int) {
	t.Helper()
	counts := make([]atomic.Int32, n)
	busy := make([]atomic.Int32, max(workers, 1))
	var bad atomic.Int32
	For(n, workers, func(w, i int) {
		if w < 0 || w >= max(workers, 1) {
			bad.Add(1)
			return
		}
		if busy[w].Add(1) != 1 {
			bad.Add(1)
		}
		counts[i].Add(1)
		if i%7 == 0 {
			time.Sleep(10 * time.Microsecond) // uneven items
		}
		busy[w].Add(-1)
	})
	if bad.Load() != 0 {
		t.Fatalf("n=%d workers=%d: %d calls with a bad or shared worker index", n, workers, bad.Load())
	}
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			t.Fatalf("n=%d workers=%d: index %d ran %d times", n, workers, i, c)
		}
	}
}

func TestForRunsEveryIndexOnce(t *testing.T) {
	for _, workers := range []int{0, 1, 2, 3, 8} {
		for _, n := range []int{0, 1, 2, 5, 64, 1000} {
			checkLoop(t, n, workers)
		}
	}
}

// TestForBackToBack runs many short loops in a row, as a decode step does, with pauses longer
// than the helpers' spin between some of them so that they go to sleep and are woken.
func TestForBackToBack(t *testing.T) {
	for r := range 2000 {
		checkLoop(t, 1+r%37, 2+r%3)
		if r%100 == 0 {
			time.Sleep(2 * spinFor)
		}
	}
}

// TestForNestedAndConcurrent checks loops started from inside a loop body and from several
// goroutines at once: those that find the shared helpers busy run on goroutines of their own.
func TestForNestedAndConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for r := range 200 {
				var sum atomic.Int64
				For(8, 3, func(_, i int) {
					For(10, 2, func(_, j int) { sum.Add(int64(i*10 + j)) })
				})
				if got := sum.Load(); got != 79*80/2 {
					t.Errorf("goroutine %d round %d: sum %d, want %d", g, r, got, 79*80/2)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkShortLoops times loops of 16 items of about a microsecond each, back to back as in a
// decode step, on the shared helpers (pool) and on goroutines started per loop (spawn).
func BenchmarkShortLoops(b *testing.B) {
	for _, run := range []struct {
		name string
		loop func(n, workers int, fn func(w, i int))
	}{{"pool", For}, {"spawn", spawn}} {
		b.Run(run.name, func(b *testing.B) {
			var sink atomic.Int64
			for b.Loop() {
				run.loop(16, 2, func(_, i int) {
					s := 0
					for k := range 2000 {
						s += k ^ i
					}
					sink.Add(int64(s))
				})
			}
		})
	}
}

// TestPollBacksOffWhenDescheduled checks that a poller that loses its core (here: a check that
// takes longer than a scheduler time slice) stops everyone spinning for a while, and that
// spinning resumes after it.
func TestPollBacksOffWhenDescheduled(t *testing.T) {
	defer quietUntil.Store(0)
	quietUntil.Store(0)
	calls := 0
	slowOnce := func() bool {
		calls++
		if calls == 64 {
			time.Sleep(2 * preempted)
		}
		return false
	}
	if poll(slowOnce) {
		t.Fatal("poll reported ready for a condition that never held")
	}
	if calls != 64 {
		t.Fatalf("poll went on for %d checks after it was descheduled, want it to stop at 64", calls)
	}
	if time.Now().UnixNano() >= quietUntil.Load() {
		t.Fatal("poll did not back off after it was descheduled")
	}
	calls = 0
	poll(func() bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("poll during the back-off checked %d times, want once without spinning", calls)
	}
	quietUntil.Store(time.Now().UnixNano())
	calls = 0
	start := time.Now()
	poll(func() bool { calls++; return false })
	if calls < 64 || time.Since(start) < spinFor {
		t.Fatalf("poll after the back-off checked %d times in %v, want a spin of %v", calls, time.Since(start), spinFor)
	}
}

// TestHelperFirstLoop hands a new helper its first loop while it polls for one (a helper that
// found nothing, then saw the post while polling, once ran the empty loop it had loaded first).
func TestHelperFirstLoop(t *testing.T) {
	for _, wait := range []time.Duration{0, spinFor / 4, 2 * spinFor} {
		for range 20 {
			var p pool
			h := &helper{w: 1, wake: make(chan struct{}, 1)}
			p.helpers = append(p.helpers, h)
			go h.serve()
			time.Sleep(wait) // polling (or asleep) with no loop yet
			var ran atomic.Int32
			p.run(64, 2, func(_, _ int) { ran.Add(1) })
			if ran.Load() != 64 {
				t.Fatalf("%d of 64 items ran", ran.Load())
			}
		}
	}
}
