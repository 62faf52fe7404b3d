package grammar

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// allocated runs f and returns the bytes it allocated (runtime.MemStats.TotalAlloc: every
// allocation counts, however short-lived, so this bounds the peak too).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestGBNFBombsRefusedBeforeBuilding: nested {m,n} counts multiply, so a few dozen bytes of GBNF
// ask for billions of nodes. The size is estimated from the parse and refused with an error
// naming the repetition and the limit, having allocated next to nothing. Before, the builder
// expanded every repetition and looked at its budget only after a whole rule: gigabytes.
func TestGBNFBombsRefusedBeforeBuilding(t *testing.T) {
	e := env(t, "qwen3")
	bombs := []string{
		`root ::= (("a"{1000}){1000}){1000}`,
		`root ::= x{1000}` + "\n" + `x ::= ("ab"{1000}){1000}`,
		`root ::= ([a-z]{0,1000}){1000}`,
		`root ::= (("a" | "b" | "c"){1000} "x"){1000} "y"{1000}`,
		`root ::= ("a"{1000}){1000} | ("b"{1000}){1000} | ("c"{1000}){1000}`,
	}
	for _, src := range bombs {
		var err error
		n := allocated(func() { _, err = e.comp.GBNF(src) })
		var ge *Error
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), "node limit") {
			t.Errorf("%q: err %v, want a *Error naming the node limit", src, err)
		}
		if n > 16<<20 {
			t.Errorf("%q: allocated %d MB before refusing", src, n>>20)
		}
		t.Logf("%q: %v (allocated %d KB)", src, err, n>>10)
	}
}

// TestBuildStopsAtBudget: where the estimate lets a grammar through, the builder still stops
// allocating at its node budget, not at the end of a rule.
func TestBuildStopsAtBudget(t *testing.T) {
	e := env(t, "qwen3")
	small := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxStates: 50000}})
	b := small.newBuilder(context.Background())
	b.g.rules = []int32{-1}
	n := allocated(func() {
		for i := 0; i < 10_000_000 && !b.over; i++ {
			b.lit("abcdefgh")
		}
		for i := 0; i < 1_000_000; i++ { // a caller that does not look at b.over yet
			b.lit("abcdefgh")
		}
	})
	if !b.over || len(b.g.nodes) > 50001 {
		t.Fatalf("over %v with %d nodes, want the budget of 50000 to stop it", b.over, len(b.g.nodes))
	}
	if n > 32<<20 {
		t.Errorf("allocated %d MB for a 50000-node budget", n>>20)
	}
}

// TestAbandonedCompileStops: a compile whose context ends stops its work (CompileWait returns
// soon after, having allocated far less than the whole compile) and is not cached.
func TestAbandonedCompileStops(t *testing.T) {
	e := env(t, "qwen3")
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	src := `root ::= ("abcdefghij"{100}){300}` // about 400k nodes: allowed, but slow to build
	whole := allocated(func() {
		if _, err := NewCompiler(e.tok, []int32{e.eos}, Options{}).GBNF(src); err != nil {
			t.Fatalf("whole compile: %v", err)
		}
	})
	var err error
	var took time.Duration
	part := allocated(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.CompileWait(ctx, Spec{Kind: KindGBNF, Text: src})
		took = time.Since(start)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	t.Logf("stopped after %v having allocated %d KB (the whole compile: %d KB)", took, part>>10, whole>>10)
	if part > whole/2 {
		t.Errorf("an abandoned compile allocated %d KB, the whole one %d KB: it did not stop", part>>10, whole>>10)
	}
	c.mu.Lock()
	cachedN := len(c.cache)
	c.mu.Unlock()
	if cachedN != 0 {
		t.Errorf("a stopped compile was cached")
	}
}
