package main

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
)

// TestServiceMergesQueuedFrames runs detokd's service between real sockets: a rank's frames
// queued before detokd reads them reach the worker as fewer batches (one per round), every
// request's ids and text complete and in order, its completion count exact, its finish
// carried, and the rank's latest load in the last batch.
func TestServiceMergesQueuedFrames(t *testing.T) {
	tok, err := tokenizer.Load("../../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "detokd") // short: ipc:// paths are bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	top := ipc.LocalTopology(dir)
	tr := ipc.Default()
	worker, err := tr.Pull(top.Worker(0, true), true)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	svc, err := newService(tr, top, tok, 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rank, err := tr.Push(top.Detok(false), false, ipc.WithSendTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rank.Close()

	ids := tok.Encode("queued frames merge into one batch per round, in order", false)
	n := len(ids)
	var frame []byte
	for s := 0; s < n; s++ {
		items := []ipc.TokenItem{
			{RID: "a", NewIDs: ids[s : s+1], CompletionTokens: int32(s + 1), MatchedStopToken: -1},
			{RID: "b", NewIDs: ids[s : s+1], CompletionTokens: int32(s + 1), MatchedStopToken: -1},
		}
		if s == n-1 {
			items[0].Finished, items[0].FinishReason = true, ipc.FinishLength
		}
		frame = (&ipc.TokenBatch{Rank: 0, Seq: uint64(s + 1), Load: ipc.Load{Running: int64(s)}, Items: items}).Append(frame[:0])
		if err := rank.Send(frame); err != nil {
			t.Fatal(err)
		}
	}
	// Let the frames reach detokd's queue before it reads any.
	time.Sleep(300 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- svc.Run() }()
	defer func() { svc.Close(); <-done }()

	var gotA, gotB []int32
	var textA string
	var batches int
	var last ipc.TextBatch
	for len(gotA) < n || len(gotB) < n {
		b, err := worker.Recv(5 * time.Second)
		if err != nil {
			t.Fatalf("after %d batches (a %d ids, b %d): %v", batches, len(gotA), len(gotB), err)
		}
		batches++
		if err := last.Decode(b); err != nil {
			t.Fatal(err)
		}
		for _, it := range last.Items {
			switch it.RID {
			case "a":
				gotA = append(gotA, it.NewIDs...)
				textA += it.Text
				if int(it.CompletionTokens) != len(gotA) {
					t.Errorf("a: completion count %d after %d ids", it.CompletionTokens, len(gotA))
				}
				if it.Finished != (len(gotA) == n) || (it.Finished && it.FinishReason != ipc.FinishLength) {
					t.Errorf("a: finished %v (%v) after %d of %d ids", it.Finished, it.FinishReason, len(gotA), n)
				}
			case "b":
				gotB = append(gotB, it.NewIDs...)
				if int(it.CompletionTokens) != len(gotB) {
					t.Errorf("b: completion count %d after %d ids", it.CompletionTokens, len(gotB))
				}
			}
		}
	}
	if !slices.Equal(gotA, ids) || !slices.Equal(gotB, ids) {
		t.Errorf("ids a %v b %v, want %v", gotA, gotB, ids)
	}
	if want := tok.Decode(ids, true); textA != want {
		t.Errorf("text %q, want %q", textA, want)
	}
	if batches >= n {
		t.Errorf("%d frames queued before detokd read any reached the worker in %d batches: none merged", n, batches)
	}
	if len(last.Loads) != 1 || last.Loads[0].Seq != uint64(n) || last.Loads[0].Load.Running != int64(n-1) {
		t.Errorf("last batch's loads %+v, want the rank's latest (seq %d)", last.Loads, n)
	}
	t.Logf("%d frames, %d batches", n, batches)
}
