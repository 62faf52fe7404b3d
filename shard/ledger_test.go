package shard

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Two mappings of one ledger file stand in for two worker processes: each sees the other's
// dispatches at once, and concurrent adds lose nothing.
func TestLedgerSharedBetweenMappings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	if err := CreateLedger(path, 2, 3); err != nil {
		t.Fatal(err)
	}
	a, err := OpenLedger(path, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenLedger(path, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				a.Add(0, 2, 7)
				b.Add(1, 2, 1)
			}
		})
	}
	wg.Wait()
	if n, tok := b.Sent(0, 2); n != 4000 || tok != 28000 {
		t.Errorf("worker 0 -> rank 2 seen through the other mapping: %d requests %d tokens, want 4000 28000", n, tok)
	}
	if n, tok := a.Sent(1, 2); n != 4000 || tok != 4000 {
		t.Errorf("worker 1 -> rank 2: %d requests %d tokens, want 4000 4000", n, tok)
	}
	if n, _ := a.Sent(0, 1); n != 0 {
		t.Errorf("untouched cell holds %d", n)
	}
	a.Reset(0, 2)
	if n, tok := b.Sent(0, 2); n != 0 || tok != 0 {
		t.Errorf("after reset: %d %d", n, tok)
	}
	if n, _ := b.Sent(1, 2); n != 4000 {
		t.Errorf("reset of worker 0's cell touched worker 1's: %d", n)
	}
}

func TestLedgerShapeChecked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger")
	if err := CreateLedger(path, 3, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLedger(path, 4, 3); err == nil || !strings.Contains(err.Error(), "4 workers x 3 ranks") {
		t.Errorf("opened a 3x4 ledger as 4x3: %v", err)
	}
	if _, err := OpenLedger(path, 2, 4); err == nil {
		t.Error("opened a 3x4 ledger as 2x4")
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, make([]byte, ledgerSize(3, 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLedger(junk, 3, 4); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("opened a file of zeros: %v", err)
	}
	if _, err := OpenLedger(filepath.Join(dir, "missing"), 3, 4); err == nil {
		t.Error("opened a missing ledger")
	}
	if err := CreateLedger(path, 0, 4); err == nil {
		t.Error("created a ledger for 0 workers")
	}
	l, err := OpenLedger(path, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := NewDispatcher(4, ShortestQueue, 0, WithWorkers(2), WithLedger(l)); err == nil {
		t.Error("dispatcher for 2 workers accepted a ledger for 3")
	}
}

// A new run starts from zero even where the previous run left a ledger, while a worker that
// restarts within a run goes on from its own counters (the ranks' acknowledgements of it are
// cumulative).
func TestLedgerRecreateAndWorkerRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	if err := CreateLedger(path, 2, 2); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLedger(path, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(2, RoundRobin, 1, WithWorkers(2), WithLedger(l))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := d.Pick(10, -1); err != nil {
			t.Fatal(err)
		}
	}
	restarted, err := NewDispatcher(2, RoundRobin, 1, WithWorkers(2), WithLedger(l))
	if err != nil {
		t.Fatal(err)
	}
	snap := restarted.Snapshot()
	if got := snap.Ranks[0].Sent + snap.Ranks[1].Sent; got != 5 {
		t.Errorf("restarted worker starts with %d sent, want the 5 it sent before", got)
	}
	l.Close()
	if err := CreateLedger(path, 2, 2); err != nil {
		t.Fatal(err)
	}
	fresh, err := OpenLedger(path, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if n, _ := fresh.Sent(1, 0); n != 0 {
		t.Errorf("recreated ledger holds %d", n)
	}
}
