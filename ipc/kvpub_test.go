//go:build cgo

package ipc

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// TestKVPublisherNeverBlocks: with a subscriber that never reads and a queue of 4, a burst of
// publishes returns at once; what finds no room is dropped and counted, not waited for.
func TestKVPublisherNeverBlocks(t *testing.T) {
	dir, err := TempRunDir("")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p, err := NewKVEventPublisher(KVPublisherConfig{Endpoint: Endpoint(dir, "kv"), QueueSize: 4, HWM: 1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b := &KVEventBatch{Events: []KVEvent{{Kind: KVBlockStored, Hashes: make([]uint64, 64), Tokens: make([]int32, 1024), BlockSize: 16}}}
	start := time.Now()
	ok := 0
	for range 100000 {
		if p.Publish(b) {
			ok++
		}
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("100000 publishes took %v", el)
	}
	if uint64(ok)+p.Dropped() != 100000 {
		t.Fatalf("%d queued + %d dropped != 100000", ok, p.Dropped())
	}
}
