package ipc

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadPriorityCountsBounded: a load report carrying more per-priority counts than
// MaxPriorityCounts is refused as malformed (a decoder of untrusted frames bounds what it keeps),
// and one at the bound round-trips.
func TestLoadPriorityCountsBounded(t *testing.T) {
	var l Load
	for p := range MaxPriorityCounts + 1 {
		l.WaitingByPriority = append(l.WaitingByPriority, PriorityCount{Priority: int32(p), Count: 1})
	}
	var b TokenBatch
	if err := b.Decode(Encode(&TokenBatch{Load: l})); !errors.Is(err, ErrMalformed) {
		t.Fatalf("%d counts: %v, want ErrMalformed", len(l.WaitingByPriority), err)
	}
	l.WaitingByPriority = l.WaitingByPriority[:MaxPriorityCounts]
	if err := b.Decode(Encode(&TokenBatch{Load: l})); err != nil || len(b.Load.WaitingByPriority) != MaxPriorityCounts || b.Load.WaitingByPriority[7].Priority != 7 {
		t.Fatalf("%d counts: %v %+v", MaxPriorityCounts, err, b.Load.WaitingByPriority)
	}
}

// TestGoVersionBounded: a Go version longer than MaxGoVersionLen is refused as malformed, in a
// rank's load and in detokd's own stats; one at the bound round-trips.
func TestGoVersionBounded(t *testing.T) {
	long := GoStats{GoVersion: strings.Repeat("g", MaxGoVersionLen+1)}
	var tb TokenBatch
	if err := tb.Decode(Encode(&TokenBatch{Load: Load{Go: long}})); !errors.Is(err, ErrMalformed) {
		t.Errorf("load: %v, want ErrMalformed", err)
	}
	var xb TextBatch
	if err := xb.Decode(Encode(&TextBatch{Detok: long})); !errors.Is(err, ErrMalformed) {
		t.Errorf("detokd's stats: %v, want ErrMalformed", err)
	}
	ok := GoStats{Goroutines: 3, GoVersion: long.GoVersion[:MaxGoVersionLen]}
	if err := xb.Decode(Encode(&TextBatch{Detok: ok})); err != nil || xb.Detok != ok {
		t.Errorf("at the bound: %v %+v", err, xb.Detok)
	}
}
