package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// check runs For(n, workers) and verifies that every index ran exactly once, that worker ids stay
// below workers, and that no two bodies with the same id overlapped.
func check(t *testing.T, n, workers int) {
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
		busy[w].Add(-1)
	})
	if bad.Load() != 0 {
		t.Fatalf("For(%d, %d): %d bodies ran with a bad or shared worker id", n, workers, bad.Load())
	}
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			t.Fatalf("For(%d, %d): index %d ran %d times", n, workers, i, c)
		}
	}
}

func TestForRunsEveryIndexOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, n := range []int{0, 1, 2, 3, 17, 1000} {
		for _, workers := range []int{0, 1, 2, 3, 4, 8} {
			check(t, n, workers)
		}
	}
}

// TestForAfterWorkersPark waits past the spin window between calls, so the pool's workers park
// and must be woken for the next loop.
func TestForAfterWorkersPark(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for range 5 {
		check(t, 64, 4)
		time.Sleep(3 * spinFor)
	}
}

// TestForNestedAndConcurrent runs loops inside loop bodies and from several goroutines at once:
// the calls that find the pool busy run on goroutines of their own.
func TestForNestedAndConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				var total atomic.Int64
				For(8, 3, func(_, i int) {
					For(10, 2, func(_, k int) { total.Add(int64(i*10 + k)) })
				})
				if got, want := total.Load(), int64(79*80/2); got != want {
					t.Errorf("nested loops summed %d, want %d", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestForOneProc keeps every body on the caller when GOMAXPROCS is 1.
func TestForOneProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	For(100, 4, func(w, _ int) {
		if w != 0 {
			t.Errorf("worker %d ran with GOMAXPROCS 1", w)
		}
	})
}

// BenchmarkFor times a loop of two short items, the shape of a decode step's small projections:
// the cost is the hand-off to the second worker and back.
func BenchmarkFor(b *testing.B) {
	var sink atomic.Int64
	body := func(_, i int) { sink.Add(int64(i)) }
	b.Run("pool", func(b *testing.B) {
		for b.Loop() {
			For(2, 2, body)
		}
	})
	b.Run("spawn", func(b *testing.B) {
		for b.Loop() {
			spawn(2, 2, body)
		}
	})
}
