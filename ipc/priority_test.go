package ipc

import (
	"errors"
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
