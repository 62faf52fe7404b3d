package shard

import (
	"slices"
	"testing"
	"time"
)

// conv is conversation c's prompt at turn n: a system prompt shared by every conversation of
// group c%2, then the conversation's own turns.
func conv(c, turns int) []int32 {
	p := make([]int32, 0, 64+48*turns)
	for i := range 64 {
		p = append(p, int32(1000*(c%2)+i))
	}
	for k := range 48 * turns {
		p = append(p, int32(100000+1000*c+k))
	}
	return p
}

func mustPickPrompt(t *testing.T, d *Dispatcher, ids []int32) int {
	t.Helper()
	r, err := d.PickPrompt(ids, -1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// report tells d that rank r runs n requests and has received everything d sent it.
func report(t *testing.T, d *Dispatcher, r, n int) {
	t.Helper()
	d.mu.Lock()
	sent, sentTok, seq := d.ranks[r].sent, d.ranks[r].sentTokens, d.ranks[r].load.Seq
	d.mu.Unlock()
	if _, err := d.Report(r, Load{Seq: seq + 1, Running: n, Received: sent, ReceivedTokens: sentTok}); err != nil {
		t.Fatal(err)
	}
}

// TestCacheAwareFollowsPrefix: each conversation's later turns go where its first turn went,
// while the first turns, which share only a system prompt, spread within the load bound.
func TestCacheAwareFollowsPrefix(t *testing.T) {
	d := newTestDispatcher(t, 4, CacheAware, 0)
	home := map[int]int{}
	for c := range 8 {
		home[c] = mustPickPrompt(t, d, conv(c, 1))
	}
	per := make([]int, 4)
	for _, r := range home {
		per[r]++
	}
	if lo, hi := slices.Min(per), slices.Max(per); hi-lo > 1 {
		t.Fatalf("first turns per rank %v: spread past the bound", per)
	}
	for turn := 2; turn < 5; turn++ {
		for c := range 8 {
			if r := mustPickPrompt(t, d, conv(c, turn)); r != home[c] {
				t.Fatalf("conversation %d turn %d went to rank %d, its history is on %d", c, turn, r, home[c])
			}
			for r := range 4 {
				report(t, d, r, per[r]) // loads stay even: prefix wins
			}
		}
	}
}

// TestCacheAwareBoundsLoad: a rank holding the prefix but loaded past the bound loses the
// request to the least-loaded rank; within the bound it keeps it.
func TestCacheAwareBoundsLoad(t *testing.T) {
	d := newTestDispatcher(t, 2, CacheAware, 0, WithCacheAwareBound(2, 0.25))
	home := mustPickPrompt(t, d, conv(0, 1))
	other := 1 - home
	report(t, d, home, 10)
	report(t, d, other, 8) // 10 <= 8 + max(2, 2): within the bound
	if r := mustPickPrompt(t, d, conv(0, 2)); r != home {
		t.Fatalf("within the bound: rank %d, want the prefix's rank %d", r, home)
	}
	report(t, d, home, 14)
	report(t, d, other, 8) // 14 > 8 + 2: past it
	if r := mustPickPrompt(t, d, conv(0, 3)); r != other {
		t.Fatalf("past the bound: rank %d, want the least-loaded %d", r, other)
	}
	// Both ranks now hold turn 3's prefix... only `other` was sent turn 3; a tie in load
	// goes to the longest prefix.
	report(t, d, home, 5)
	report(t, d, other, 5)
	if r := mustPickPrompt(t, d, conv(0, 4)); r != other {
		t.Fatalf("rank %d, want %d, which was sent the longer prefix", r, other)
	}
}

// TestCacheAwareForgetsRestartedRank: after a rank is declared down and comes back, its
// prefixes no longer attract requests.
func TestCacheAwareForgetsRestartedRank(t *testing.T) {
	clk := newClock()
	d := newTestDispatcher(t, 2, CacheAware, 0, WithClock(clk.now), WithStaleAfter(time.Second))
	home := mustPickPrompt(t, d, conv(0, 1))
	clk.advance(2 * time.Second)
	report(t, d, 1-home, 0)
	if got := d.Expire(clk.now()); len(got) != 1 || got[0] != home {
		t.Fatalf("expired %v, want [%d]", got, home)
	}
	// The rank comes back, busier than the other by one: without its record the prefix
	// would have kept it (within the bound); forgotten, the load decides.
	if _, err := d.Report(home, Load{Seq: 100, Running: 1}); err != nil {
		t.Fatal(err)
	}
	if r := mustPickPrompt(t, d, conv(0, 2)); r != 1-home {
		t.Fatalf("rank %d, want %d: the restarted rank's prefixes are gone", r, 1-home)
	}
}

// TestPrefixIndexBounded: the record never holds more than its capacity, and keys in use
// survive generations.
func TestPrefixIndexBounded(t *testing.T) {
	x := newPrefixIndex(64, 2)
	hot := x.keys(nil, conv(0, 0))
	x.record(hot, 1)
	m := make([]int, 2)
	for c := 1; c < 200; c++ {
		x.record(x.keys(nil, conv(c, 1)), c%2)
		x.matches(hot, m)
		if m[1] != len(hot) {
			t.Fatalf("after %d conversations the hot prefix matched %v of %d keys", c, m, len(hot))
		}
		if n := len(x.cur) + len(x.prev); n > 64 {
			t.Fatalf("%d keys held, capacity 64", n)
		}
	}
}
