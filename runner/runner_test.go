package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
)

const vocab = 8192

var prompt = []int32{400, 1234, 87, 2011, 305, 77, 1024, 9}

// faultyBackend is the replay runner with a device fault injected: Forward call number failAt
// (1-based) and every later one fail. Every other call is the real replay runner's.
type faultyBackend struct {
	backend.Backend
	failAt int64
	calls  atomic.Int64
}

func (f *faultyBackend) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	if n := f.calls.Add(1); f.failAt > 0 && n >= f.failAt {
		return nil, errors.New("injected device fault")
	}
	return f.Backend.Forward(ctx, b)
}

func newReplay(t testing.TB, stepTime time.Duration) backend.Backend {
	t.Helper()
	r, err := replay.New(replay.Options{VocabSize: vocab, NumBlocks: 4096, BlockSize: 16, StepTime: stepTime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func newScheduler(t testing.TB, b backend.Backend) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(b, scheduler.Config{MaxRunning: 64, MaxPrefillTokens: 4096, ChunkSize: 512, MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reference is what the replay runner generates for prompt, stepped directly with no sockets.
func reference(t *testing.T, n int) []int32 {
	t.Helper()
	s := newScheduler(t, newReplay(t, 0))
	p := sampling.DefaultParams()
	p.Temperature = 0
	if err := s.Add(&scheduler.Request{RID: "ref", InputIDs: prompt, MaxNewTokens: n, IgnoreEOS: true, Sampling: p}); err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for s.HasWork() {
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			ids = append(ids, it.NewIDs...)
		}
	}
	return ids
}

// rig is a runner on real sockets with the test standing in for the tokenizer worker (direct
// mode) or for detokd.
type rig struct {
	t    *testing.T
	r    *Runner
	in   ipc.Receiver // what the runner sends
	out  ipc.Sender   // requests and aborts to the runner
	stop func()
}

func startRunner(t *testing.T, b backend.Backend, direct bool, tok *tokenizer.Tokenizer) *rig {
	t.Helper()
	dir, err := ipc.TempRunDir("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tr := ipc.Default()
	ep := ipc.DetokEndpoint(dir)
	if direct {
		ep = ipc.WorkerEndpoint(dir, 0)
	}
	in, err := tr.Pull(ep, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{RunDir: dir, NumWorkers: 1, Transport: tr, Direct: direct, Tokenizer: tok,
		Heartbeat: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, newScheduler(t, b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := tr.Push(ipc.SchedulerEndpoint(dir, 0), false, ipc.WithSendTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	g := &rig{t: t, r: r, in: in, out: out, stop: func() { cancel(); <-done; r.Close(); in.Close(); out.Close() }}
	t.Cleanup(g.stop)
	return g
}

func (g *rig) submit(m *ipc.GenerateRequest) {
	g.t.Helper()
	if m.Sampling.TopP == 0 {
		m.Sampling.TopP, m.Sampling.TopK, m.Sampling.RepetitionPenalty = 1, -1, 1
	}
	if err := g.out.Send(m.Append(nil)); err != nil {
		g.t.Fatal(err)
	}
}

// recv decodes into tb the next batch the runner sent, and reports false when none came within
// 100 ms.
func (g *rig) recv(tb *ipc.TokenBatch) bool {
	g.t.Helper()
	frame, err := g.in.Recv(100 * time.Millisecond)
	if errors.Is(err, ipc.ErrTimeout) {
		return false
	}
	if err != nil {
		g.t.Fatal(err)
	}
	if err := tb.Decode(frame); err != nil {
		g.t.Fatal(err)
	}
	return true
}

// items returns rid's items in order until its finishing one, calling each(item) as they come.
func (g *rig) items(rid string, each func(it *ipc.TokenItem)) []ipc.TokenItem {
	g.t.Helper()
	var got []ipc.TokenItem
	var tb ipc.TokenBatch
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if !g.recv(&tb) {
			continue
		}
		for i := range tb.Items {
			it := tb.Items[i]
			if it.RID != rid {
				continue
			}
			it.NewIDs = slices.Clone(it.NewIDs)
			it.StopStrings = slices.Clone(it.StopStrings)
			got = append(got, it)
			if each != nil {
				each(&it)
			}
			if it.Finished {
				return got
			}
		}
	}
	g.t.Fatalf("%s did not finish; %d items so far", rid, len(got))
	return nil
}

func sizesAndIDs(items []ipc.TokenItem) (sizes []int, ids []int32) {
	for _, it := range items {
		sizes = append(sizes, len(it.NewIDs))
		ids = append(ids, it.NewIDs...)
	}
	return sizes, ids
}

// TestStreamIntervalShape: the first token goes out alone, then exactly K per item, then the
// rest with the finish; a non-streamed request goes out once, whole.
func TestStreamIntervalShape(t *testing.T) {
	const n = 50
	want := reference(t, n)
	g := startRunner(t, newReplay(t, 0), true, nil)
	for _, k := range []int{1, 3, 16, 1000} {
		rid := fmt.Sprintf("k%d", k)
		g.submit(&ipc.GenerateRequest{RID: rid, InputIDs: prompt, MaxNewTokens: n, IgnoreEOS: true, Stream: true, StreamInterval: int32(k)})
		sizes, ids := sizesAndIDs(g.items(rid, nil))
		q := (n - 2) / k
		wantSizes := append([]int{1}, slices.Repeat([]int{k}, q)...)
		wantSizes = append(wantSizes, n-1-q*k)
		if !slices.Equal(sizes, wantSizes) {
			t.Errorf("interval %d: item sizes %v, want %v", k, sizes, wantSizes)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("interval %d: ids %v, want %v", k, ids, want)
		}
	}
	g.submit(&ipc.GenerateRequest{RID: "whole", InputIDs: prompt, MaxNewTokens: n, IgnoreEOS: true, Stream: false, StreamInterval: n})
	items := g.items("whole", nil)
	if sizes, ids := sizesAndIDs(items); len(items) != 1 || !slices.Equal(ids, want) {
		t.Errorf("non-streamed request: item sizes %v, want one item of %d", sizes, n)
	}
}

// TestErrorFlushesBufferedTokens injects a device fault mid-stream with interval 16: the error
// item carries every token generated before the fault that had not gone out yet.
func TestErrorFlushesBufferedTokens(t *testing.T) {
	const generated = 40 // Forward calls that succeed: the prefill, then 39 decode steps
	want := reference(t, generated)
	g := startRunner(t, &faultyBackend{Backend: newReplay(t, 0), failAt: generated + 1}, true, nil)
	g.submit(&ipc.GenerateRequest{RID: "r", InputIDs: prompt, MaxNewTokens: 1000, IgnoreEOS: true, Stream: true, StreamInterval: 16})
	items := g.items("r", nil)
	sizes, ids := sizesAndIDs(items)
	last := items[len(items)-1]
	if last.FinishReason != ipc.FinishError || last.Error == "" {
		t.Fatalf("last item: finish %v error %q, want the injected error", last.FinishReason, last.Error)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("received %d ids %v, want the %d generated: %v", len(ids), ids, generated, want)
	}
	if !slices.Equal(sizes, []int{1, 16, 16, 7}) {
		t.Errorf("item sizes %v, want [1 16 16 7]: the 7 buffered tokens go out with the error", sizes)
	}
	if int(last.CompletionTokens) != generated {
		t.Errorf("completion tokens %d, want %d", last.CompletionTokens, generated)
	}
}

// heldBackend is the replay runner whose Forward call number holdAt (1-based) waits until
// release is closed: a test does something at a known point of a request's life. With
// holdSeqs, only calls whose batch holds at least that many sequences count, so the point
// does not depend on when the requests arrived.
type heldBackend struct {
	backend.Backend
	holdAt   int64
	holdSeqs int
	release  chan struct{}
	calls    atomic.Int64
}

func (h *heldBackend) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	if len(b.Seqs) >= h.holdSeqs && h.calls.Add(1) == h.holdAt {
		<-h.release
	}
	return h.Backend.Forward(ctx, b)
}

// TestAbortFlushesBufferedTokens aborts a request with interval 16 mid-stream: its last item
// carries the buffered tokens, so the ids received add up to the completion count. The device
// holds its 20th step until the abort is queued, so the abort lands mid-stream however slowly
// the test reads.
func TestAbortFlushesBufferedTokens(t *testing.T) {
	want := reference(t, 1000)
	held := &heldBackend{Backend: newReplay(t, 0), holdAt: 20, release: make(chan struct{})}
	g := startRunner(t, held, true, nil)
	g.submit(&ipc.GenerateRequest{RID: "r", InputIDs: prompt, MaxNewTokens: 1000, IgnoreEOS: true, Stream: true, StreamInterval: 16})
	seen := 0
	items := g.items("r", func(it *ipc.TokenItem) {
		if seen++; seen == 2 { // 17 tokens out: the device is at or before its 20th step
			// Straight into the inbox: over the socket it could arrive after the release (the
			// socket path is the e2e tests' and the codec's).
			g.r.inbox <- inMsg{abort: &ipc.Abort{RID: "r", Reason: "test"}}
			close(held.release)
		}
	})
	_, ids := sizesAndIDs(items)
	last := items[len(items)-1]
	if last.FinishReason != ipc.FinishAbort {
		t.Fatalf("finish %v, want abort", last.FinishReason)
	}
	if len(ids) != int(last.CompletionTokens) || !slices.Equal(ids, want[:len(ids)]) {
		t.Fatalf("received %d ids, completion tokens %d (ids match the sequence: %v)", len(ids), last.CompletionTokens, slices.Equal(ids, want[:min(len(ids), len(want))]))
	}
	if len(ids) < 17 || len(ids) > 20 {
		t.Fatalf("the abort sent after 17 tokens, before the 20th, stopped the request at %d", len(ids))
	}
}

// TestDetokSettingsRideOnItems: detokd never sees the request, so its stop strings go with the
// first item and the skip-special-tokens flag with every item.
func TestDetokSettingsRideOnItems(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	g := startRunner(t, newReplay(t, 0), false, tok)
	g.submit(&ipc.GenerateRequest{RID: "r", InputIDs: prompt, MaxNewTokens: 20, IgnoreEOS: true, Stream: true, StreamInterval: 4,
		StopStrings: []string{"\x00never"}, SkipSpecialTokens: true})
	items := g.items("r", nil)
	for i, it := range items {
		if !it.SkipSpecialTokens {
			t.Errorf("item %d lost skip_special_tokens", i)
		}
		wantStops := []string(nil)
		if i == 0 {
			wantStops = []string{"\x00never"}
		}
		if !slices.Equal(it.StopStrings, wantStops) {
			t.Errorf("item %d stop strings %q, want %q", i, it.StopStrings, wantStops)
		}
	}
}

// TestAbortAllOfOneWorker: an abort with no rid stops every request of its owner from another
// process of it (a restarted worker clearing what its predecessor left), refuses those that
// arrive later, and touches nothing of the new process or of any other worker.
func TestAbortAllOfOneWorker(t *testing.T) {
	// The device holds its 50th step with all three requests in the batch until the abort is
	// queued: all three have produced output by then, however late the third arrived (a
	// fixed 50th step deadlocked on a loaded machine when it came after it). A step takes
	// 2 ms, so the old requests' 500 tokens outlast any gap between the submissions.
	held := &heldBackend{Backend: newReplay(t, 2*time.Millisecond), holdAt: 50, holdSeqs: 3, release: make(chan struct{})}
	g := startRunner(t, held, true, nil)
	released := false
	t.Cleanup(func() {
		if !released { // a failed test must not leave Run held (its cleanup waits for Run)
			close(held.release)
		}
	})
	for _, m := range []*ipc.GenerateRequest{
		{RID: "old-1", Owner: 0, OwnerEpoch: 1, InputIDs: prompt, MaxNewTokens: 500, IgnoreEOS: true, Stream: true, StreamInterval: 1},
		{RID: "old-2", Owner: 0, OwnerEpoch: 1, InputIDs: prompt, MaxNewTokens: 500, IgnoreEOS: true, Stream: true, StreamInterval: 1},
		{RID: "other", Owner: 1, OwnerEpoch: 1, InputIDs: prompt, MaxNewTokens: 200, IgnoreEOS: true, Stream: true, StreamInterval: 1},
	} {
		g.submit(m)
	}
	seen := map[string]bool{}
	finish := map[string]ipc.FinishReason{}
	var tb ipc.TokenBatch
	deadline := time.Now().Add(20 * time.Second)
	for len(finish) < 5 && time.Now().Before(deadline) {
		if !g.recv(&tb) {
			continue
		}
		for _, it := range tb.Items {
			if seen[it.RID] = true; !released && len(seen) == 3 {
				g.r.inbox <- inMsg{abort: &ipc.Abort{Owner: 0, OwnerEpoch: 2, Reason: "worker restarted"}}
				// One of the old process's requests arrives after its successor's abort; the
				// successor's own request runs. (Counted as the receive goroutine would.)
				g.r.load.arrived(0, len(prompt))
				g.r.load.arrived(0, len(prompt))
				g.r.inbox <- inMsg{req: &ipc.GenerateRequest{RID: "old-late", Owner: 0, OwnerEpoch: 1, InputIDs: prompt, MaxNewTokens: 5,
					Sampling: ipc.Sampling{TopP: 1, TopK: -1, RepetitionPenalty: 1}}}
				g.r.inbox <- inMsg{req: &ipc.GenerateRequest{RID: "new", Owner: 0, OwnerEpoch: 2, InputIDs: prompt, MaxNewTokens: 5,
					Sampling: ipc.Sampling{TopP: 1, TopK: -1, RepetitionPenalty: 1}}}
				close(held.release)
				released = true
			}
			if it.Finished {
				finish[it.RID] = it.FinishReason
			}
		}
	}
	want := map[string]ipc.FinishReason{"old-1": ipc.FinishAbort, "old-2": ipc.FinishAbort, "other": ipc.FinishLength,
		"old-late": ipc.FinishError, "new": ipc.FinishLength}
	if !reflect.DeepEqual(finish, want) {
		t.Fatalf("finishes %v, want %v", finish, want)
	}
}

// TestRunWaitsForItsGoroutines: when Run returns, the goroutines it started have ended: the
// receive goroutine has closed the inbox (its last act), and compiles are done.
func TestRunWaitsForItsGoroutines(t *testing.T) {
	dir, err := ipc.TempRunDir("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tr := ipc.Default()
	in, err := tr.Pull(ipc.WorkerEndpoint(dir, 0), true)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, err := New(Config{RunDir: dir, NumWorkers: 1, Transport: tr, Direct: true, Heartbeat: 10 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, newScheduler(t, newReplay(t, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if _, err := in.Recv(5 * time.Second); err != nil { // a heartbeat: the goroutines run
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-r.inbox:
		if open {
			t.Fatal("a message in the inbox after Run returned")
		}
	default:
		t.Fatal("Run returned while its receive goroutine still ran (the inbox is open)")
	}
}

// TestRefusalsCarryTheirKind: a request the rank refuses comes back as one failed item whose
// ErrorKind says whose fault it is, with the scheduler's reason (not the engine's rid, which
// the client never saw); a device fault after admission stays the engine's.
func TestRefusalsCarryTheirKind(t *testing.T) {
	g := startRunner(t, &faultyBackend{Backend: newReplay(t, 0), failAt: 1}, true, nil)
	for _, c := range []struct {
		req  ipc.GenerateRequest
		want string
		kind ipc.ErrorKind
	}{
		{ipc.GenerateRequest{RID: "rid-vocab", InputIDs: []int32{400, vocab}, MaxNewTokens: 4}, "outside the vocabulary", ipc.ErrorInvalid},
		{ipc.GenerateRequest{RID: "rid-stops", InputIDs: prompt, MaxNewTokens: 4, StopStrings: []string{"x"}}, "--skip-tokenizer-init", ipc.ErrorInvalid},
		{ipc.GenerateRequest{RID: "rid-fault", InputIDs: prompt, MaxNewTokens: 4}, "injected device fault", ipc.ErrorInternal},
	} {
		c.req.RoutedRank, c.req.Sampling = -1, ipc.Sampling{TopP: 1, RepetitionPenalty: 1}
		g.submit(&c.req)
		items := g.items(c.req.RID, nil)
		last := items[len(items)-1]
		if last.FinishReason != ipc.FinishError || last.ErrorKind != c.kind || !strings.Contains(last.Error, c.want) ||
			(c.kind == ipc.ErrorInvalid && strings.Contains(last.Error, c.req.RID)) {
			t.Errorf("%s: finish %v, %v error %q; want a %v error naming %q alone", c.req.RID, last.FinishReason, last.ErrorKind, last.Error, c.kind, c.want)
		}
	}
}

// TestGatesFollowRequestsAcrossBatchOrder: requests with different stream intervals share
// batches whose order shifts as some finish and others arrive (send finds each request's
// output by its position in the previous batch when it can): every request's items keep its
// own interval's shape and its own ids.
func TestGatesFollowRequestsAcrossBatchOrder(t *testing.T) {
	type req struct {
		rid      string
		interval int
		n        int
	}
	reqs := []req{{"a", 3, 40}, {"b", 1, 5}, {"c", 7, 40}, {"d", 2, 9}, {"e", 5, 30}}
	refs := map[int][]int32{}
	for _, q := range reqs {
		if refs[q.n] == nil {
			refs[q.n] = reference(t, q.n)
		}
	}
	g := startRunner(t, newReplay(t, time.Millisecond), true, nil)
	got := map[string][]ipc.TokenItem{}
	var tb ipc.TokenBatch
	recv := func() {
		if !g.recv(&tb) {
			return
		}
		for _, it := range tb.Items {
			it.NewIDs = slices.Clone(it.NewIDs)
			got[it.RID] = append(got[it.RID], it)
		}
	}
	finished := func(rid string) bool {
		its := got[rid]
		return len(its) > 0 && its[len(its)-1].Finished
	}
	// Three start together; the fourth arrives once the short one has finished (taking its
	// place in the batch), the fifth a few steps later.
	for _, q := range reqs[:3] {
		g.submit(&ipc.GenerateRequest{RID: q.rid, InputIDs: prompt, MaxNewTokens: int32(q.n), IgnoreEOS: true, Stream: true, StreamInterval: int32(q.interval)})
	}
	deadline := time.Now().Add(20 * time.Second)
	for !finished("b") && time.Now().Before(deadline) {
		recv()
	}
	g.submit(&ipc.GenerateRequest{RID: "d", InputIDs: prompt, MaxNewTokens: 9, IgnoreEOS: true, Stream: true, StreamInterval: 2})
	for len(got["d"]) < 2 && time.Now().Before(deadline) {
		recv()
	}
	g.submit(&ipc.GenerateRequest{RID: "e", InputIDs: prompt, MaxNewTokens: 30, IgnoreEOS: true, Stream: true, StreamInterval: 5})
	for time.Now().Before(deadline) && !(finished("a") && finished("c") && finished("d") && finished("e")) {
		recv()
	}
	for _, q := range reqs {
		sizes, ids := sizesAndIDs(got[q.rid])
		k := q.interval
		nq := (q.n - 2) / k
		want := append([]int{1}, slices.Repeat([]int{k}, nq)...)
		want = append(want, q.n-1-nq*k)
		if !slices.Equal(sizes, want) {
			t.Errorf("%s (interval %d): item sizes %v, want %v", q.rid, k, sizes, want)
		}
		if !slices.Equal(ids, refs[q.n]) {
			t.Errorf("%s: ids %v, want %v", q.rid, ids, refs[q.n])
		}
	}
}

// TestHoldQueryAnswersForGoneRequests: a hold query gets a finishing error item for each rid
// the rank does not hold (one that finished, one it never had) and none for a request it is
// running, which goes on to its normal finish.
func TestHoldQueryAnswersForGoneRequests(t *testing.T) {
	g := startRunner(t, newReplay(t, time.Millisecond), true, nil)
	g.submit(&ipc.GenerateRequest{RID: "done", InputIDs: prompt, MaxNewTokens: 3, IgnoreEOS: true, Stream: true, StreamInterval: 1})
	if items := g.items("done", nil); items[len(items)-1].FinishReason != ipc.FinishLength {
		t.Fatalf("done finished with %v", items[len(items)-1].FinishReason)
	}
	g.submit(&ipc.GenerateRequest{RID: "live", InputIDs: prompt, MaxNewTokens: 300, IgnoreEOS: true, Stream: true, StreamInterval: 1})
	q := &ipc.HoldQuery{Owner: 0, RIDs: []string{"done", "live", "never"}}
	if err := g.out.Send(q.Append(nil)); err != nil {
		t.Fatal(err)
	}
	answered := map[string]bool{}
	liveIDs, liveFinish := 0, ipc.FinishReason(0)
	var tb ipc.TokenBatch
	deadline := time.Now().Add(20 * time.Second)
	for (len(answered) < 2 || liveFinish == 0) && time.Now().Before(deadline) {
		if !g.recv(&tb) {
			continue
		}
		for _, it := range tb.Items {
			switch it.RID {
			case "live":
				liveIDs += len(it.NewIDs)
				if it.Finished {
					liveFinish = it.FinishReason
				}
			case "done", "never":
				if !it.Finished || it.FinishReason != ipc.FinishError || len(it.NewIDs) != 0 || !strings.Contains(it.Error, "lost with a detokd") {
					t.Fatalf("answer for %s: finished %v, reason %v, %d ids, error %q", it.RID, it.Finished, it.FinishReason, len(it.NewIDs), it.Error)
				}
				if answered[it.RID] {
					t.Fatalf("%s answered twice", it.RID)
				}
				answered[it.RID] = true
			}
		}
	}
	if len(answered) < 2 {
		t.Fatalf("answers for %v only, want done and never", answered)
	}
	if liveFinish != ipc.FinishLength || liveIDs != 300 {
		t.Fatalf("the running request finished with %v after %d ids, want length after 300", liveFinish, liveIDs)
	}
}
