package shard

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for staleness tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock                   { return &fakeClock{t: time.Unix(1000, 0)} }
func mustPick(t *testing.T, d *Dispatcher, tokens, routed int) int {
	t.Helper()
	r, err := d.Pick(tokens, routed)
	if err != nil {
		t.Fatalf("Pick(%d, %d): %v", tokens, routed, err)
	}
	return r
}

func newTestDispatcher(t *testing.T, ranks int, m Method, worker int, opts ...Option) *Dispatcher {
	t.Helper()
	d, err := NewDispatcher(ranks, m, worker, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParseMethod(t *testing.T) {
	for _, name := range methodNames {
		m, err := ParseMethod(name)
		if err != nil || m.String() != name {
			t.Errorf("ParseMethod(%q) = %v, %v", name, m, err)
		}
	}
	if _, err := ParseMethod("random"); err == nil || !strings.Contains(err.Error(), "shortest_queue") {
		t.Errorf("ParseMethod(random) error %v should list the valid methods", err)
	}
}

func TestNewDispatcherRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		ranks, worker int
		m             Method
		opts          []Option
	}{
		{0, 0, RoundRobin, nil},
		{2, -1, RoundRobin, nil},
		{2, 0, Method(9), nil},
		{2, 3, RoundRobin, []Option{WithWorkers(3)}},
		{2, 0, RoundRobin, []Option{WithWorkers(-1)}},
	} {
		if _, err := NewDispatcher(tc.ranks, tc.m, tc.worker, tc.opts...); err == nil {
			t.Errorf("NewDispatcher(%d, %v, %d) accepted", tc.ranks, tc.m, tc.worker)
		}
	}
}

func TestTiesRotateFromWorkerOffset(t *testing.T) {
	for _, m := range []Method{RoundRobin, ShortestQueue, MinimumTokens} {
		for worker := range 3 {
			d := newTestDispatcher(t, 4, m, worker, WithWorkers(3))
			for i := range 8 {
				if r, want := mustPick(t, d, 100, -1), (worker+i)%4; r != want {
					t.Fatalf("%v worker %d pick %d on idle ranks: rank %d, want %d", m, worker, i, r, want)
				}
			}
		}
	}
}

func TestLedgerCountsUnacknowledgedDispatches(t *testing.T) {
	clock := newClock()
	d := newTestDispatcher(t, 2, ShortestQueue, 0, WithClock(clock.now))
	// Rank 0 reports 3 queued requests, none of them ours.
	if res, err := d.Report(0, Load{Seq: 1, Running: 3}); !res.Accepted() || err != nil {
		t.Fatal(res, err)
	}
	// Three picks land on rank 1 (0, 1, 2 pending vs 3), the fourth ties
	// at 3 and rotation gives it to rank 0.
	got := []int{mustPick(t, d, 10, -1), mustPick(t, d, 10, -1), mustPick(t, d, 10, -1), mustPick(t, d, 10, -1)}
	if want := []int{1, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
	// Rank 1 acknowledges two of its three and reports them queued.
	if res, err := d.Report(1, Load{Seq: 1, Running: 2, Received: 2, ReceivedTokens: 20}); !res.Accepted() || err != nil {
		t.Fatal(res, err)
	}
	s := d.Snapshot()
	if r := s.Ranks[1]; r.Sent != 3 || r.Pending != 1 || r.PendingTokens != 10 {
		t.Errorf("rank 1 ledger %+v, want sent 3 pending 1 (10 tokens)", r)
	}
	if r := s.Ranks[0]; r.Sent != 1 || r.Pending != 1 || r.Reported.Running != 3 {
		t.Errorf("rank 0 %+v, want sent 1 pending 1 running 3", r)
	}
	// Effective loads are now 3+1 and 2+1: rank 1 is next.
	if r := mustPick(t, d, 10, -1); r != 1 {
		t.Errorf("pick went to rank %d, want 1", r)
	}
}

func TestStaleSeqIgnored(t *testing.T) {
	d := newTestDispatcher(t, 1, ShortestQueue, 0)
	// The first report is accepted whatever its Seq, even 0.
	for _, tc := range []struct {
		seq     uint64
		running int
		want    bool
	}{{0, 1, true}, {0, 9, false}, {5, 5, true}, {3, 9, false}, {5, 9, false}, {6, 6, true}} {
		res, err := d.Report(0, Load{Seq: tc.seq, Running: tc.running})
		if err != nil || res.Accepted() != tc.want {
			t.Errorf("Report(seq %d) = %v, %v; want accepted %v", tc.seq, res, err, tc.want)
		}
	}
	if l := d.Snapshot().Ranks[0].Reported; l.Seq != 6 || l.Running != 6 {
		t.Errorf("kept report %+v, want seq 6 running 6", l)
	}
}

func TestReportRejectsGarbage(t *testing.T) {
	d := newTestDispatcher(t, 2, ShortestQueue, 0)
	if _, err := d.Report(2, Load{Seq: 1}); err == nil {
		t.Error("report from rank 2 of 2 accepted")
	}
	if _, err := d.Report(0, Load{Seq: 1, Waiting: -1}); err == nil {
		t.Error("negative waiting accepted")
	}
	if _, err := d.Pick(-5, -1); err == nil {
		t.Error("negative prompt length accepted")
	}
}

func TestRoutedRankOverridesPolicy(t *testing.T) {
	d := newTestDispatcher(t, 3, ShortestQueue, 0)
	if _, err := d.Report(2, Load{Seq: 1, Running: 100}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r := mustPick(t, d, 7, 2); r != 2 {
			t.Fatalf("routed to 2, got %d", r)
		}
	}
	if s := d.Snapshot().Ranks[2]; s.Sent != 3 || s.PendingTokens != 21 {
		t.Errorf("routed dispatches not in the ledger: %+v", s)
	}
	for _, bad := range []int{3, -2} {
		if _, err := d.Pick(1, bad); err == nil {
			t.Errorf("routed rank %d accepted", bad)
		}
	}
	waiting := newTestDispatcher(t, 3, ShortestQueue, 0, WithAwaitFirstReport())
	if _, err := waiting.Pick(1, 2); err == nil || !strings.Contains(err.Error(), "routed rank 2 is down") ||
		!strings.Contains(err.Error(), "has not reported yet") {
		t.Errorf("routing to a down rank: err %v, want the down reason", err)
	}
}

func TestDownRanksSkippedAndRejoin(t *testing.T) {
	for _, m := range []Method{RoundRobin, ShortestQueue, MinimumTokens} {
		clock := newClock()
		d := newTestDispatcher(t, 3, m, 0, WithClock(clock.now), WithStaleAfter(3*time.Second))
		if _, err := d.Report(1, Load{Seq: 1}); err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for range 6 {
			seen[mustPick(t, d, 5, -1)] = true
		}
		if len(seen) != 3 {
			t.Fatalf("%v: picked %v, want every rank", m, seen)
		}

		// Silence: only rank 2 keeps reporting; 0 and 1 go stale.
		clock.advance(2 * time.Second)
		if _, err := d.Report(2, Load{Seq: 1}); err != nil {
			t.Fatal(err)
		}
		clock.advance(1500 * time.Millisecond)
		if expired := d.Expire(clock.now()); !slices.Equal(expired, []int{0, 1}) {
			t.Fatalf("%v: Expire = %v, want ranks 0 and 1", m, expired)
		}
		if expired := d.Expire(clock.now()); len(expired) != 0 {
			t.Fatalf("%v: a second Expire returned %v again", m, expired)
		}
		for range 5 {
			if r := mustPick(t, d, 5, -1); r != 2 {
				t.Fatalf("%v: picked stale rank %d", m, r)
			}
		}
		snap := d.Snapshot()
		if snap.Ranks[0].Up || !strings.Contains(snap.Ranks[0].DownReason, "never reported") ||
			snap.Ranks[1].Up || !strings.Contains(snap.Ranks[1].DownReason, "no load report") {
			t.Fatalf("%v: snapshot %+v", m, snap.Ranks)
		}
		// A report brings rank 0 back; rank 1 stays down while silent.
		if res, err := d.Report(0, Load{Seq: 1}); res != ReportCameUp || err != nil {
			t.Fatalf("%v: report from an expired rank: %v %v, want ReportCameUp", m, res, err)
		}
		seen = map[int]bool{}
		for range 6 {
			seen[mustPick(t, d, 5, -1)] = true
		}
		if !seen[0] || seen[1] {
			t.Fatalf("%v: after fresh report from 0 only, picked %v", m, seen)
		}

		// Everything silent: Pick fails with ErrNoRankUp and every reason.
		clock.advance(time.Minute)
		if expired := d.Expire(clock.now()); !slices.Equal(expired, []int{0, 2}) {
			t.Fatalf("%v: Expire = %v, want ranks 0 and 2", m, expired)
		}
		_, err := d.Pick(5, -1)
		if !errors.Is(err, ErrNoRankUp) || !strings.Contains(err.Error(), "stale after") {
			t.Fatalf("%v: all down: err %v", m, err)
		}
	}
}

// TestExpiredRankComesBackClean: a rank that Expire declared down has most likely restarted, so
// its next report is taken whatever its Seq, and what was dispatched to it is forgotten.
func TestExpiredRankComesBackClean(t *testing.T) {
	clock := newClock()
	d := newTestDispatcher(t, 2, ShortestQueue, 0, WithClock(clock.now), WithStaleAfter(time.Second))
	if _, err := d.Report(0, Load{Seq: 50}); err != nil {
		t.Fatal(err)
	}
	mustPick(t, d, 7, 0)
	clock.advance(2 * time.Second)
	if _, err := d.Report(1, Load{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if expired := d.Expire(clock.now()); !slices.Equal(expired, []int{0}) {
		t.Fatalf("Expire = %v, want [0]", expired)
	}
	if res, err := d.Report(0, Load{Seq: 1}); res != ReportCameUp || err != nil {
		t.Fatalf("restarted rank's first report: %v %v", res, err)
	}
	if r := d.Snapshot().Ranks[0]; !r.Up || r.Sent != 0 || r.Pending != 0 || r.Reported.Seq != 1 {
		t.Fatalf("rank 0 after coming back: %+v", r)
	}
}

// TestAwaitFirstReport: with WithAwaitFirstReport a rank takes nothing until it reports, and is
// never expired before that.
func TestAwaitFirstReport(t *testing.T) {
	clock := newClock()
	d := newTestDispatcher(t, 2, RoundRobin, 0, WithClock(clock.now), WithStaleAfter(time.Second), WithAwaitFirstReport())
	if _, err := d.Pick(1, -1); !errors.Is(err, ErrNoRankUp) || !strings.Contains(err.Error(), "has not reported yet") {
		t.Fatalf("pick before any report: %v", err)
	}
	clock.advance(time.Hour)
	if expired := d.Expire(clock.now()); len(expired) != 0 {
		t.Fatalf("Expire before the first report: %v", expired)
	}
	if res, err := d.Report(1, Load{Seq: 3}); res != ReportCameUp || err != nil {
		t.Fatalf("first report: %v %v", res, err)
	}
	if res, _ := d.Report(1, Load{Seq: 4}); res != ReportAccepted {
		t.Fatalf("second report: %v", res)
	}
	for range 3 {
		if r := mustPick(t, d, 1, -1); r != 1 {
			t.Fatalf("picked rank %d, which has not reported", r)
		}
	}
}

// TestUndoTakesBackAPick: a pick whose send failed leaves nothing pending, here and in the
// shared ledger.
func TestUndoTakesBackAPick(t *testing.T) {
	path := t.TempDir() + "/ledger"
	if err := CreateLedger(path, 1, 2); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLedger(path, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := newTestDispatcher(t, 2, ShortestQueue, 0, WithLedger(l))
	r := mustPick(t, d, 40, -1)
	mustPick(t, d, 5, r)
	if err := d.Undo(r, 40); err != nil {
		t.Fatal(err)
	}
	if got := d.Snapshot().Ranks[r]; got.Sent != 1 || got.Pending != 1 || got.PendingTokens != 5 {
		t.Fatalf("after undo: %+v, want the 5-token pick only", got)
	}
	if sent, tokens := l.Sent(0, r); sent != 1 || tokens != 5 {
		t.Fatalf("ledger after undo: %d requests, %d tokens", sent, tokens)
	}
	if err := d.Undo(5, 1); err == nil {
		t.Error("undo on a rank that does not exist")
	}
}

func TestStalenessCheckCanBeDisabled(t *testing.T) {
	clock := newClock()
	d := newTestDispatcher(t, 2, ShortestQueue, 0, WithClock(clock.now), WithStaleAfter(0))
	clock.advance(time.Hour)
	if expired := d.Expire(clock.now()); len(expired) != 0 {
		t.Fatalf("Expire with the check disabled: %v", expired)
	}
	mustPick(t, d, 1, -1)
}

func TestMinimumTokensRelativeToCapacity(t *testing.T) {
	d := newTestDispatcher(t, 2, MinimumTokens, 0)
	// Rank 0 has fewer tokens but is half full; rank 1 is a quarter full.
	if _, err := d.Report(0, Load{Seq: 1, KVTokensUsed: 500, KVTokensCapacity: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Report(1, Load{Seq: 1, KVTokensUsed: 1000, KVTokensCapacity: 4000}); err != nil {
		t.Fatal(err)
	}
	if r := mustPick(t, d, 100, -1); r != 1 {
		t.Errorf("picked rank %d, want the emptier rank 1", r)
	}
	// Queued prompts count even though they hold no KV yet.
	if _, err := d.Report(1, Load{Seq: 2, KVTokensUsed: 1000, KVTokensCapacity: 4000, WaitingTokens: 2000, Received: 1, ReceivedTokens: 100}); err != nil {
		t.Fatal(err)
	}
	if r := mustPick(t, d, 100, -1); r != 0 {
		t.Errorf("picked rank %d, want rank 0 (rank 1 has 3000/4000 with its queue)", r)
	}
}

// Concurrent picks from one worker's handlers with no report at all: the
// ledger alone spreads them exactly.
func TestConcurrentPicksSpreadExactly(t *testing.T) {
	d := newTestDispatcher(t, 4, ShortestQueue, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := d.Pick(10, -1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			_ = d.Snapshot()
		}
	})
	wg.Wait()
	for _, r := range d.Snapshot().Ranks {
		if r.Sent != 100 {
			t.Errorf("rank %d got %d of 400, want 100", r.Rank, r.Sent)
		}
	}
}

func TestSnapshotJSON(t *testing.T) {
	clock := newClock()
	d := newTestDispatcher(t, 2, MinimumTokens, 1, WithWorkers(2), WithClock(clock.now))
	if _, err := d.Report(1, Load{Seq: 3, Running: 2, KVTokensUsed: 64}); err != nil {
		t.Fatal(err)
	}
	clock.advance(1500 * time.Millisecond)
	b, err := json.Marshal(d.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"method":"minimum_tokens"`, `"worker":1`, `"workers":2`, `"seq":3`, `"kv_tokens_used":64`, `"last_report_age_s":1.5`, `"up":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("snapshot JSON %s lacks %s", b, want)
		}
	}
}

// TestWatchGapSparesRanksTheCallersStall: with WithWatchGap, a stall of the caller itself (no
// Expire for 5 s, as when the worker process is stopped) counts as one gap, so the ranks are
// not expired for it; silence while the caller is watching still expires them.
func TestWatchGapSparesRanksTheCallersStall(t *testing.T) {
	clock := newClock()
	d := newTestDispatcher(t, 2, ShortestQueue, 0, WithClock(clock.now), WithStaleAfter(time.Second), WithWatchGap(250*time.Millisecond))
	tick := func(n int) (expired []int) {
		for range n {
			clock.advance(100 * time.Millisecond)
			expired = append(expired, d.Expire(clock.now())...)
		}
		return expired
	}
	if got := tick(5); len(got) != 0 {
		t.Fatalf("expired %v after 0.5 s", got)
	}
	clock.advance(5 * time.Second) // the caller is stopped
	if got := d.Expire(clock.now()); len(got) != 0 {
		t.Fatalf("the caller's 5 s stall expired ranks %v", got)
	}
	// The stall counted 0.25 s: 0.75 s watched so far; rank 0 reports, rank 1 stays silent.
	if _, err := d.Report(0, Load{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if got := tick(2); len(got) != 0 {
		t.Fatalf("expired %v at 0.95 s watched", got)
	}
	if got := tick(1); !slices.Equal(got, []int{1}) {
		t.Fatalf("at 1.05 s watched: expired %v, want [1]", got)
	}
	if got := tick(8); !slices.Equal(got, []int{0}) {
		t.Fatalf("rank 0, silent 1.1 s watched since its report: expired %v, want [0]", got)
	}
}
