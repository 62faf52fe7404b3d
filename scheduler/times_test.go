package scheduler

import (
	"context"
	"testing"
	"time"
)

// TestFinishCarriesRequestTimes drives a request through its queue, its chunked prefill and its
// decode on a clock that advances one second per step, and checks the times its finish carries;
// a request aborted while queued counts its whole life as queue time.
func TestFinishCarriesRequestTimes(t *testing.T) {
	const vocab = 500
	s := newScheduler(t, newReplay(t, vocab, 64, 4), Config{MaxRunning: 1, MaxPrefillTokens: 8})
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	received := clock.Add(-2 * time.Second) // read off the socket two seconds before Add
	mustAdd(t, s, &Request{RID: "a", InputIDs: prompt(0, 20, vocab), MaxNewTokens: 4, Sampling: greedy(), Received: received})
	mustAdd(t, s, &Request{RID: "b", InputIDs: prompt(1, 3, vocab), MaxNewTokens: 4, Sampling: greedy()})
	// a is scheduled at 1001 (after one second), prefills in 3 chunks of 8 (steps at 1001,
	// 1002, 1003: its first token at 1003), decodes 3 more tokens (1004..1006).
	finishes := map[string]Item{}
	for step := 0; len(finishes) < 2 && step < 50; step++ {
		clock = clock.Add(time.Second)
		if step == 2 {
			s.Abort("b") // b has waited behind a (MaxRunning 1) since 1000
		}
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			if it.Finished {
				finishes[it.RID] = it
			}
		}
	}
	a, b := finishes["a"], finishes["b"]
	if a.FinishReason != FinishLength || a.QueueTime != 3*time.Second || a.PrefillTime != 2*time.Second || a.DecodeTime != 3*time.Second {
		t.Errorf("a: %v, queue %v prefill %v decode %v; want length, 3s, 2s, 3s", a.FinishReason, a.QueueTime, a.PrefillTime, a.DecodeTime)
	}
	if b.FinishReason != FinishAbort || b.QueueTime != 3*time.Second || b.PrefillTime != 0 || b.DecodeTime != 0 {
		t.Errorf("b: %v, queue %v prefill %v decode %v; want abort, 3s, 0, 0", b.FinishReason, b.QueueTime, b.PrefillTime, b.DecodeTime)
	}
}

// TestFinishCountsPreemptions: on a cache far too small for its requests, every eviction is
// reported once, on the evicted request's finish, so the finishes add up to the scheduler's own
// count.
func TestFinishCountsPreemptions(t *testing.T) {
	const vocab = 1000
	s := newScheduler(t, newReplay(t, vocab, 12, 4), Config{MaxRunning: 6, MaxPrefillTokens: 32, ChunkSize: 8})
	for i := range 12 {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, 5+i%4, vocab), MaxNewTokens: 20, Sampling: greedy()})
	}
	reported, finished := 0, 0
	for step := 0; s.HasWork(); step++ {
		if step > 5000 {
			t.Fatalf("no progress; load %+v", s.Load())
		}
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			if it.Finished {
				reported += it.Preemptions
				finished++
			} else if it.Preemptions != 0 {
				t.Fatalf("%s: an unfinished item reports %d preemptions", it.RID, it.Preemptions)
			}
		}
	}
	if got := s.Stats().Preemptions; got == 0 || reported != got || finished != 12 {
		t.Errorf("finishes report %d preemptions over %d requests; the scheduler counted %d", reported, finished, got)
	}
}
