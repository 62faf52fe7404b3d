package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStreamMergesEverythingPendingInOrder(t *testing.T) {
	st := NewStream("r1")
	var wantIDs []int32
	var wantText strings.Builder
	for i := range 1000 {
		d := Delta{IDs: []int32{int32(i)}, Text: fmt.Sprintf("t%d ", i), Logprobs: []float32{-float32(i)}, CompletionTokens: i + 1, PromptTokens: 7}
		st.Push(&d)
		d.IDs[0] = -1 // Push copied: reusing the caller's slice must not change what is pending
		wantIDs = append(wantIDs, int32(i))
		wantText.WriteString(fmt.Sprintf("t%d ", i))
	}
	st.Push(&Delta{Finished: true, FinishReason: FinishLength, CompletionTokens: 1000})
	st.Push(&Delta{IDs: []int32{99999}}) // after the finish: ignored

	var d Delta
	if err := st.Take(context.Background(), 1, &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, wantIDs) {
		t.Fatalf("ids: got %d ids (first %v), want 0..999 in order", len(d.IDs), d.IDs[:min(5, len(d.IDs))])
	}
	if d.Text != wantText.String() {
		t.Fatalf("text: got %.40q..., want %.40q...", d.Text, wantText.String())
	}
	if len(d.Logprobs) != 1000 || d.Logprobs[999] != -999 {
		t.Fatalf("logprobs: %d entries, last %v", len(d.Logprobs), d.Logprobs[len(d.Logprobs)-1])
	}
	if !d.Finished || d.FinishReason != FinishLength || d.CompletionTokens != 1000 || d.PromptTokens != 7 || d.Err != nil {
		t.Fatalf("finish/usage not carried: %+v", d.FinishReason)
	}
	if !st.Done() {
		t.Fatal("Done is false after the finishing delta")
	}
}

func TestStreamFastConsumerGetsEachDelta(t *testing.T) {
	st := NewStream("r1")
	ctx := context.Background()
	var d Delta
	for i := range 100 {
		st.Push(&Delta{IDs: []int32{int32(i)}, Text: "x"})
		if err := st.Take(ctx, 1, &d); err != nil {
			t.Fatal(err)
		}
		if len(d.IDs) != 1 || d.IDs[0] != int32(i) || d.Text != "x" {
			t.Fatalf("step %d: got ids %v text %q, want [%d] \"x\"", i, d.IDs, d.Text, i)
		}
	}
}

func TestStreamTakeWaitsForMinIDsOrFinish(t *testing.T) {
	st := NewStream("r1")
	ctx := context.Background()
	got := make(chan Delta)
	go func() {
		var d Delta
		if err := st.Take(ctx, 3, &d); err != nil {
			close(got)
			return
		}
		got <- d
	}()
	st.Push(&Delta{IDs: []int32{1}})
	st.Push(&Delta{IDs: []int32{2}})
	select {
	case d := <-got:
		t.Fatalf("Take(3) returned after 2 ids: %v", d.IDs)
	case <-time.After(50 * time.Millisecond):
	}
	st.Push(&Delta{IDs: []int32{3}})
	if d := <-got; !slices.Equal(d.IDs, []int32{1, 2, 3}) {
		t.Fatalf("got %v, want [1 2 3]", d.IDs)
	}

	// Fewer than minIDs but finished: everything comes out.
	st.Push(&Delta{IDs: []int32{4}})
	st.Push(&Delta{Finished: true, FinishReason: FinishStop, MatchedStop: int32(4)})
	var d Delta
	if err := st.Take(ctx, 16, &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{4}) || !d.Finished || d.MatchedStop != int32(4) {
		t.Fatalf("got %v finished=%v matched=%v", d.IDs, d.Finished, d.MatchedStop)
	}
}

func TestStreamErrorKeepsBufferedTokens(t *testing.T) {
	st := NewStream("r1")
	for i := range 5 {
		st.Push(&Delta{IDs: []int32{int32(i)}, Text: "a"})
	}
	st.Push(&Delta{IDs: []int32{5}, Text: "b", Err: errors.New("rank 0 is down")})
	var d Delta
	if err := st.Take(context.Background(), 16, &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1, 2, 3, 4, 5}) || d.Text != "aaaaab" {
		t.Fatalf("tokens before the error lost: ids %v text %q", d.IDs, d.Text)
	}
	if d.Err == nil || !d.Finished || d.FinishReason != FinishError {
		t.Fatalf("error not carried: err=%v finished=%v reason=%q", d.Err, d.Finished, d.FinishReason)
	}
}

func TestStreamTakeHonoursContext(t *testing.T) {
	st := NewStream("r1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var d Delta
	if err := st.Take(ctx, 1, &d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want deadline exceeded", err)
	}
	// What is pushed afterwards is still there.
	st.Push(&Delta{IDs: []int32{1}})
	if err := st.Take(context.Background(), 1, &d); err != nil || !slices.Equal(d.IDs, []int32{1}) {
		t.Fatalf("after a cancelled Take: %v %v", d.IDs, err)
	}
}

// BenchmarkStreamStalledConsumer pushes n one-token deltas before one Take: the cost per token
// must not grow with n (a stalled consumer may not make merging quadratic).
func BenchmarkStreamStalledConsumer(b *testing.B) {
	for _, n := range []int{16, 1024, 65536} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			st := NewStream("r")
			ctx := context.Background()
			var d Delta
			push := Delta{IDs: []int32{1}, Text: " token"}
			b.ReportAllocs()
			for b.Loop() {
				for range n {
					st.Push(&push)
				}
				if err := st.Take(ctx, 1, &d); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
		})
	}
}

// TestFailedStreamUsage: a stream that fails reports what it delivered (issue 29, item 2): the
// error delta carries no counts of its own, and the counts of earlier deltas were already taken.
func TestFailedStreamUsage(t *testing.T) {
	st := NewStream("r")
	st.Push(&Delta{IDs: []int32{1, 2, 3}, PromptTokens: 7, CachedTokens: 4, CompletionTokens: 3})
	if _, err := st.Next(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	st.Push(&Delta{IDs: []int32{4}, CompletionTokens: 4})
	st.Push(&Delta{Finished: true, FinishReason: FinishError, Err: errors.New("rank died")})
	d, err := st.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Err == nil || d.PromptTokens != 7 || d.CachedTokens != 4 || d.CompletionTokens != 4 {
		t.Fatalf("failed delta: err %v usage %d/%d/%d, want 7 prompt, 4 cached, 4 completion", d.Err, d.PromptTokens, d.CachedTokens, d.CompletionTokens)
	}
	if p, c, n := st.Usage(); p != 7 || c != 4 || n != 4 {
		t.Errorf("Usage() = %d, %d, %d", p, c, n)
	}
}

// TestStreamTakeMoreAppendsWhatArrived: TakeMore appends to a taken delta what was pushed after
// the Take (ids, logprobs, text, the finish and the latest counts), leaves nothing pending, and
// reports false when nothing was; a Take after it sees only later pushes.
func TestStreamTakeMoreAppendsWhatArrived(t *testing.T) {
	st := NewStream("r1")
	st.Push(&Delta{IDs: []int32{1, 2}, Text: "ab", Logprobs: []float32{-1, -2}, PromptTokens: 5, CompletionTokens: 2})
	var d Delta
	if err := st.Take(context.Background(), 1, &d); err != nil {
		t.Fatal(err)
	}
	if st.TakeMore(&d) {
		t.Fatal("TakeMore found output when nothing was pushed")
	}
	st.Push(&Delta{IDs: []int32{3}, Text: "c", Logprobs: []float32{-3}, CompletionTokens: 3})
	st.Push(&Delta{IDs: []int32{4}, Text: "d", Logprobs: []float32{-4}, CompletionTokens: 4, Finished: true, FinishReason: FinishLength})
	if !st.TakeMore(&d) {
		t.Fatal("TakeMore missed what was pushed")
	}
	if !slices.Equal(d.IDs, []int32{1, 2, 3, 4}) || d.Text != "abcd" || !slices.Equal(d.Logprobs, []float32{-1, -2, -3, -4}) ||
		!d.Finished || d.FinishReason != FinishLength || d.CompletionTokens != 4 || d.PromptTokens != 5 {
		t.Fatalf("merged delta %+v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := st.Take(ctx, 1, &d); err == nil {
		t.Fatalf("Take after TakeMore found %+v pending", d)
	}
}
