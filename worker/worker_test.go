package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/detok"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/tokenizer"
)

// rankSide is the test standing in for rank 0 and detokd: it reads what the worker dispatches
// and sends text batches back on the real sockets, or hands them to the worker's router.
type rankSide struct {
	t     *testing.T
	w     *Worker
	reqs  ipc.Receiver
	out   ipc.Sender
	seq   uint64
	clock *testClock
}

// testClock is the worker's clock for rank liveness, moved only by the test.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func startWorker(t *testing.T, rankTimeout time.Duration) (*Worker, *rankSide) {
	t.Helper()
	w, r := newWorkerRig(t, rankTimeout)
	r.route() // a first load report: the rank is up
	if err := w.Health(); err != nil {
		t.Fatal(err)
	}
	return w, r
}

// newWorkerRig starts a worker with one rank on real sockets; the rank has
// not reported yet.
func newWorkerRig(t *testing.T, rankTimeout time.Duration) (*Worker, *rankSide) {
	t.Helper()
	dir, err := ipc.TempRunDir("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tr := ipc.Default()
	reqs, err := tr.Pull(ipc.SchedulerEndpoint(dir, 0), true)
	if err != nil {
		t.Fatal(err)
	}
	clock := &testClock{t: time.Unix(1000, 0)}
	w, err := New(Config{NumWorkers: 1, DPSize: 1, RunDir: dir, Transport: tr, Mode: ModeDefault, Method: shard.RoundRobin,
		RankTimeout: rankTimeout, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tr.Push(ipc.WorkerEndpoint(dir, 0), false, ipc.WithSendTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); out.Close(); reqs.Close() })
	// The worker's first word to every rank aborts whatever a crashed predecessor left there.
	frame, err := reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ab ipc.Abort
	if err := ab.Decode(frame); err != nil || ab.RID != "" || ab.Owner != 0 {
		t.Fatalf("first message to the rank: %+v, %v; want an abort of everything of worker 0", ab, err)
	}
	return w, &rankSide{t: t, w: w, reqs: reqs, out: out, clock: clock}
}

func (r *rankSide) batch(items ...ipc.TextItem) []byte {
	r.seq++
	b := ipc.TextBatch{Loads: []ipc.RankLoad{{Rank: 0, Seq: r.seq, Load: ipc.Load{Received: []uint64{0}, ReceivedTokens: []uint64{0}}}}, Items: items}
	return b.Append(nil)
}

// send sends a batch to the worker's output socket.
func (r *rankSide) send(items ...ipc.TextItem) {
	r.t.Helper()
	if err := r.out.Send(r.batch(items...)); err != nil {
		r.t.Fatal(err)
	}
}

// route hands a batch to the worker's router directly, as its receive loop would.
func (r *rankSide) route(items ...ipc.TextItem) {
	r.t.Helper()
	var buf frameBuffers
	if err := r.w.handle(&buf, r.batch(items...)); err != nil {
		r.t.Fatal(err)
	}
}

// dispatched returns the next request the worker sent to the rank.
func (r *rankSide) dispatched() *ipc.GenerateRequest {
	r.t.Helper()
	frame, err := r.reqs.Recv(5 * time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	var m ipc.GenerateRequest
	if err := m.Decode(frame); err != nil {
		r.t.Fatal(err)
	}
	return &m
}

// item is the output of id, a request's (id+1)th token (ids count from 0).
func item(rid string, id int32, text string, done bool) ipc.TextItem {
	it := ipc.TextItem{TokenItem: ipc.TokenItem{RID: rid, NewIDs: []int32{id}, PromptTokens: 3, CompletionTokens: id + 1, MatchedStopToken: -1}, Text: text}
	if done {
		it.Finished, it.FinishReason = true, ipc.FinishLength
	}
	return it
}

// TestDeliverMergesForAStalledConsumer: outputs that arrive while nobody takes from the stream
// merge, in order, into one delta; the finished request leaves the worker.
func TestDeliverMergesForAStalledConsumer(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	st, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 100, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	if m := rank.dispatched(); m.RID != st.RID || m.StreamInterval != 1 || !m.Stream {
		t.Fatalf("dispatched %+v", m)
	}
	const n = 100
	var want []int32
	for i := range n {
		rank.route(item(st.RID, int32(i), "ab", i == n-1))
		want = append(want, int32(i))
	}
	if w.InFlight() != 0 {
		t.Fatal("the finished request is still in flight")
	}
	var d api.Delta
	if err := st.Take(context.Background(), 1, &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, want) || d.Text != strings.Repeat("ab", n) || !d.Finished || d.CompletionTokens != n || d.FinishReason != api.FinishLength {
		t.Fatalf("merged delta: %d ids, %d text bytes, finished %v, completion %d", len(d.IDs), len(d.Text), d.Finished, d.CompletionTokens)
	}
}

// TestNonStreamedRequestIsGatedWhole: a non-streamed request asks the rank for one output at
// the end (its interval is its whole length).
func TestNonStreamedRequestIsGatedWhole(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	if _, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1}, MaxNewTokens: 77, StreamInterval: 1, RoutedRank: -1}); err != nil {
		t.Fatal(err)
	}
	if m := rank.dispatched(); m.Stream || m.StreamInterval != 77 {
		t.Fatalf("non-streamed request dispatched with stream=%v interval %d", m.Stream, m.StreamInterval)
	}
}

// TestSilentRankFailsAfterDeliveredTokens: when the rank goes silent the request fails, and the
// tokens it delivered before (over the socket, through the receive loop) come out ahead of the
// error.
func TestSilentRankFailsAfterDeliveredTokens(t *testing.T) {
	w, rank := startWorker(t, 300*time.Millisecond)
	st, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 100, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	for i := range 5 {
		rank.send(item(st.RID, int32(i), "x", false))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ids []int32
	var d api.Delta
	for len(ids) < 5 {
		if err := st.Take(ctx, 1, &d); err != nil {
			t.Fatalf("%d of the 5 ids delivered: %v", len(ids), err)
		}
		ids = append(ids, d.IDs...)
	}
	// The rank now says nothing more, for longer than its timeout, while the worker watches.
	for range 4 {
		rank.clock.advance(100 * time.Millisecond)
		w.checkRanks()
	}
	for !d.Finished {
		if err := st.Take(ctx, 1, &d); err != nil {
			t.Fatalf("no error after the rank went silent: %v (%d ids)", err, len(ids))
		}
		ids = append(ids, d.IDs...)
	}
	if !slices.Equal(ids, []int32{0, 1, 2, 3, 4}) {
		t.Fatalf("delivered ids %v, want 0..4", ids)
	}
	if d.Err == nil || !strings.Contains(d.Err.Error(), "rank 0") || d.FinishReason != api.FinishError {
		t.Fatalf("error %v reason %q", d.Err, d.FinishReason)
	}
	if w.InFlight() != 0 {
		t.Fatal("the failed request is still in flight")
	}
	if w.Health() == nil {
		t.Fatal("health does not report the silent rank")
	}
	// The worker gave up on the request: it tells the rank to stop it.
	frame, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ab ipc.Abort
	if err := ab.Decode(frame); err != nil || ab.RID != st.RID {
		t.Fatalf("after giving up: %+v %v, want an abort of %s", ab, err, st.RID)
	}
}

// TestRankTakesNothingUntilItReports: a rank that has not reported yet (still loading its
// model) gets no requests; they are refused at once (a 503 upstream), /health says why, and the
// first report makes the rank usable without any request having been lost in between.
func TestRankTakesNothingUntilItReports(t *testing.T) {
	// A short rank timeout: the never-heard rank must not be marked "down" (and logged as
	// dead) when it expires; it stays "not reported yet".
	w, rank := newWorkerRig(t, 50*time.Millisecond)
	reqs := rank.reqs
	for range 3 {
		rank.clock.advance(100 * time.Millisecond)
		w.checkRanks()
	}
	req := func() *api.Request {
		return &api.Request{RID: w.NewRID(), InputIDs: []int32{1, 2, 3}, MaxNewTokens: 4, Stream: true, StreamInterval: 1, RoutedRank: -1}
	}
	if _, err := w.Submit(context.Background(), req()); !errors.Is(err, shard.ErrNoRankUp) || !strings.Contains(err.Error(), "has not reported yet") {
		t.Fatalf("submit before the rank reported: %v", err)
	}
	if err := w.Health(); err == nil || !strings.Contains(err.Error(), "not reported yet") {
		t.Fatalf("health before the rank reported: %v", err)
	}
	if _, err := reqs.Recv(50 * time.Millisecond); err == nil {
		t.Fatal("a request reached the rank before it reported")
	}
	// The rank comes up.
	rank.route()
	if err := w.Health(); err != nil {
		t.Fatalf("health after the first report: %v", err)
	}
	st, err := w.Submit(context.Background(), req())
	if err != nil {
		t.Fatalf("submit after the first report: %v", err)
	}
	if got := rank.dispatched(); got.RID != st.RID {
		t.Fatalf("rank got %q, want %q", got.RID, st.RID)
	}
}

// TestClientRIDIsALabel: two requests with the same client rid are two requests: each gets an
// engine id of its own (the one the rank sees), a duplicate is not refused (which would tell a
// client the rid is in use), and output and aborts reach only their own request.
func TestClientRIDIsALabel(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	submit := func() (*api.Stream, *ipc.GenerateRequest) {
		st, err := w.Submit(context.Background(), &api.Request{RID: "mine", InputIDs: []int32{1, 2}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1})
		if err != nil {
			t.Fatalf("submit with a client rid in use: %v", err)
		}
		return st, rank.dispatched()
	}
	a, ma := submit()
	b, mb := submit()
	if a.RID == b.RID || ma.RID != a.RID || mb.RID != b.RID || a.RID == "mine" {
		t.Fatalf("engine ids %q and %q, sent as %q and %q", a.RID, b.RID, ma.RID, mb.RID)
	}
	first := item(b.RID, 7, "x", true)
	first.CompletionTokens = 1
	rank.route(first)
	w.Abort(a.RID)
	frame, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ab ipc.Abort
	if err := ab.Decode(frame); err != nil || ab.RID != a.RID {
		t.Fatalf("abort for %q (%v), want %q", ab.RID, err, a.RID)
	}
	var d api.Delta
	if err := b.Take(context.Background(), 1, &d); err != nil || !slices.Equal(d.IDs, []int32{7}) || !d.Finished {
		t.Fatalf("b got %+v, %v", d, err)
	}
	if w.InFlight() != 1 {
		t.Fatalf("in flight %d, want a alone", w.InFlight())
	}
}

// TestOwnStallBlamesNoRank: a gap in the worker's own liveness checks (it was stopped or
// starved) is not the rank's silence: the rank stays up, its requests keep going.
func TestOwnStallBlamesNoRank(t *testing.T) {
	w, rank := startWorker(t, 300*time.Millisecond)
	st, err := w.Submit(context.Background(), &api.Request{InputIDs: []int32{1, 2, 3}, MaxNewTokens: 100, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	rank.clock.advance(5 * time.Second) // the worker was stopped
	w.checkRanks()
	if err := w.Health(); err != nil || w.InFlight() != 1 {
		t.Fatalf("after the worker's own stall: health %v, %d in flight", err, w.InFlight())
	}
	rank.route(item(st.RID, 0, "x", true))
	var d api.Delta
	if err := st.Take(context.Background(), 1, &d); err != nil || d.Err != nil || !d.Finished {
		t.Fatalf("request after the stall: %+v %v", d, err)
	}
}

// TestCountsOutsideTheWireRefused: integer settings the wire carries as int32 are refused as
// client errors when they do not fit, never wrapped (top_k 2^32+1 would become 1, greedy), and
// min_tokens above the maximum is refused before it reaches a rank.
func TestCountsOutsideTheWireRefused(t *testing.T) {
	w, _ := startWorker(t, 5*time.Second)
	for _, c := range []struct {
		param string
		edit  func(r *api.Request)
	}{
		{"top_k", func(r *api.Request) { r.Sampling.TopK = 1 << 31 }},
		{"top_k", func(r *api.Request) { r.Sampling.TopK = 1<<32 + 1 }},
		{"max_tokens", func(r *api.Request) { r.MaxNewTokens = 1<<63 - 1 }},
		{"min_tokens", func(r *api.Request) { r.MinNewTokens = 1 << 32 }},
		{"min_tokens", func(r *api.Request) { r.MinNewTokens = 17 }},
		{"stream_interval", func(r *api.Request) { r.StreamInterval = 1<<32 + 1 }},
	} {
		r := &api.Request{InputIDs: []int32{1}, MaxNewTokens: 16, Stream: true, StreamInterval: 1, RoutedRank: -1}
		c.edit(r)
		_, err := w.Submit(context.Background(), r)
		var bad *api.BadRequestError
		if !errors.As(err, &bad) || bad.Param != c.param {
			t.Errorf("%s: %v, want a bad request naming %s", c.param, err, c.param)
		}
	}
	if w.InFlight() != 0 {
		t.Fatalf("%d refused requests in flight", w.InFlight())
	}
}

// TestGapFailsTheStream: output that skips ids (a batch lost with a detokd that died) never
// passes as complete: the stream ends with an error after the ids before the gap, its usage
// counts those, the ids after the gap are not delivered, and the rank is told to stop it.
func TestGapFailsTheStream(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	st, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	rank.route(item(st.RID, 0, "a", false), item(st.RID, 1, "b", false))
	rank.route(item(st.RID, 3, "d", false)) // id 2 was lost
	rank.route(item(st.RID, 4, "e", true))
	if w.InFlight() != 0 {
		t.Fatal("the failed request is still in flight")
	}
	d, err := st.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1}) || d.Text != "ab" || d.Err == nil || d.FinishReason != api.FinishError ||
		d.CompletionTokens != 2 || d.PromptTokens != 3 {
		t.Fatalf("delta after a gap: ids %v text %q err %v finish %q usage %d/%d", d.IDs, d.Text, d.Err, d.FinishReason, d.PromptTokens, d.CompletionTokens)
	}
	if !strings.Contains(d.Err.Error(), "1 token ids missing") {
		t.Errorf("error %q does not say what was lost", d.Err)
	}
	frame, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ab ipc.Abort
	if err := ab.Decode(frame); err != nil || ab.RID != st.RID {
		t.Fatalf("after the gap: %+v %v, want an abort of %s", ab, err, st.RID)
	}
}

// detokdFrames returns a function that hands w text batches from the detokd of an epoch, as one
// receive loop does (the epoch carries from frame to frame), each with rank 0's next report.
func detokdFrames(t *testing.T, w *Worker, rank *rankSide) func(epoch uint64, items ...ipc.TextItem) {
	var buf frameBuffers
	return func(epoch uint64, items ...ipc.TextItem) {
		t.Helper()
		rank.seq++
		b := ipc.TextBatch{Epoch: epoch, Loads: []ipc.RankLoad{{Rank: 0, Seq: rank.seq, Load: ipc.Load{Received: []uint64{0}, ReceivedTokens: []uint64{0}}}}, Items: items}
		if err := w.handle(&buf, b.Append(nil)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDetokdRestartFailsItsStreams: a text batch from a new detokd (another epoch) fails the
// requests the old one had begun to stream — their finishing items may have died with it, and
// nothing else would end their streams — with what they got and an abort at the rank, while a
// request that has no ids yet goes on and completes through the new detokd.
func TestDetokdRestartFailsItsStreams(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	started, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	waiting, err := w.Submit(context.Background(), &api.Request{RID: "r2", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	frame := detokdFrames(t, w, rank)
	frame(7, item(started.RID, 0, "a", false), item(started.RID, 1, "b", false))
	frame(7) // a heartbeat from the same detokd changes nothing
	if w.InFlight() != 2 {
		t.Fatalf("%d in flight before the restart, want 2", w.InFlight())
	}
	// The old detokd dies holding r1's last items, its finishing one among them: the new
	// detokd's first batch is a heartbeat.
	frame(9)
	if w.InFlight() != 1 {
		t.Fatalf("%d in flight after the restart, want 1 (the request with no ids yet)", w.InFlight())
	}
	d, err := started.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1}) || d.Err == nil || d.FinishReason != api.FinishError || d.CompletionTokens != 2 {
		t.Fatalf("delta after the restart: ids %v err %v finish %q usage %d", d.IDs, d.Err, d.FinishReason, d.CompletionTokens)
	}
	if !strings.Contains(d.Err.Error(), "detokd restarted") || !strings.Contains(d.Err.Error(), "2 token ids delivered") {
		t.Errorf("error %q does not say what happened", d.Err)
	}
	ab, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var abort ipc.Abort
	if err := abort.Decode(ab); err != nil || abort.RID != started.RID {
		t.Fatalf("after the restart: %+v %v, want an abort of %s", abort, err, started.RID)
	}
	// The rank is asked whether it still holds the request that goes on.
	hq, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var query ipc.HoldQuery
	if err := query.Decode(hq); err != nil || !slices.Equal(query.RIDs, []string{waiting.RID}) {
		t.Fatalf("after the abort: %+v %v, want a hold query for %s", query, err, waiting.RID)
	}
	frame(9, item(waiting.RID, 0, "x", false), item(waiting.RID, 1, "y", true))
	d, err = waiting.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1}) || d.Err != nil || !d.Finished || d.CompletionTokens != 2 {
		t.Fatalf("the request without ids at the restart: ids %v err %v finished %v usage %d", d.IDs, d.Err, d.Finished, d.CompletionTokens)
	}
}

// TestDetokdRestartAsksAboutLostFinishes: after a detokd restart, the requests that go on (ids
// only, here; or no ids yet) may have lost their finishing item with the old detokd, and then
// no later item would end their streams. The worker asks their rank (a hold query) and, on its
// answer that it no longer holds one, fails that stream with what it got; the other goes on.
func TestDetokdRestartAsksAboutLostFinishes(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	submit := func() *api.Stream {
		t.Helper()
		st, err := w.Submit(context.Background(), &api.Request{InputIDs: []int32{1, 2, 3}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1, NoText: true})
		if err != nil {
			t.Fatal(err)
		}
		rank.dispatched()
		return st
	}
	lost, alive := submit(), submit()
	frame := detokdFrames(t, w, rank)
	frame(3, item(lost.RID, 0, "", false), item(lost.RID, 1, "", false), item(alive.RID, 0, "", false))
	frame(4) // the new detokd: lost's finishing item died with the old one
	if n := w.InFlight(); n != 2 {
		t.Fatalf("%d in flight after the restart, want 2 (ids only: nothing for detokd to lose)", n)
	}
	hq, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var query ipc.HoldQuery
	if err := query.Decode(hq); err != nil || len(query.RIDs) != 2 || !slices.Contains(query.RIDs, lost.RID) || !slices.Contains(query.RIDs, alive.RID) {
		t.Fatalf("after the restart: %+v %v, want a hold query for both requests", query, err)
	}
	// The rank's answer for lost (runner.notHeld), then alive's next items.
	answer := ipc.TextItem{TokenItem: ipc.TokenItem{RID: lost.RID, Finished: true, FinishReason: ipc.FinishError, MatchedStopToken: -1,
		Error: "rank 0 had finished this request, and its last output was lost with a detokd that stopped"}}
	frame(4, answer, item(alive.RID, 1, "", true))
	if n := w.InFlight(); n != 0 {
		t.Fatalf("%d in flight after the answer, want 0", n)
	}
	d, err := lost.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1}) || d.Err == nil || d.FinishReason != api.FinishError || d.CompletionTokens != 2 {
		t.Fatalf("lost: ids %v err %v finish %q usage %d", d.IDs, d.Err, d.FinishReason, d.CompletionTokens)
	}
	if !strings.Contains(d.Err.Error(), "lost with a detokd") || !strings.Contains(d.Err.Error(), "2 token ids delivered") {
		t.Errorf("error %q does not say what happened", d.Err)
	}
	d, err = alive.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1}) || d.Err != nil || !d.Finished || d.CompletionTokens != 2 {
		t.Fatalf("alive: ids %v err %v finished %v usage %d", d.IDs, d.Err, d.Finished, d.CompletionTokens)
	}
}

// TestFailedItemAbortsAtTheRank: a failed item that did not come from the rank's own finish
// (detokd lost the request's state) stops the request at the rank, and its usage is what was
// delivered.
func TestFailedItemAbortsAtTheRank(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	st, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	rank.route(item(st.RID, 0, "a", false))
	lost := ipc.TextItem{TokenItem: ipc.TokenItem{RID: st.RID, PromptTokens: 3, CompletionTokens: 1, Finished: true,
		FinishReason: ipc.FinishError, Error: "detokd lost it", MatchedStopToken: -1}}
	rank.route(lost)
	d, err := st.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.IDs) != 1 || d.Err == nil || d.CompletionTokens != 1 {
		t.Fatalf("delta: ids %v err %v completion %d", d.IDs, d.Err, d.CompletionTokens)
	}
	frame, err := rank.reqs.Recv(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ab ipc.Abort
	if err := ab.Decode(frame); err != nil || ab.RID != st.RID {
		t.Fatalf("after the failed item: %+v %v, want an abort of %s", ab, err, st.RID)
	}
}

// TestGoRuntimeReported: the Go runtime stats a rank's load report and detokd's batch carry are
// what the worker serves for /metrics, until they are older than the rank timeout.
func TestGoRuntimeReported(t *testing.T) {
	w, r := newWorkerRig(t, time.Second)
	if _, ok := w.GoRuntime(0); ok {
		t.Fatal("stats before any report")
	}
	rank := ipc.GoStats{Goroutines: 12, GOMAXPROCS: 4, HeapAllocBytes: 100, HeapInuseBytes: 200, SysBytes: 900,
		HeapGoalBytes: 400, GCCycles: 3, GCPauseSeconds: 0.5, GoVersion: "go1.99"}
	detokd := ipc.GoStats{Goroutines: 7, GoVersion: "go1.98"}
	b := ipc.TextBatch{Loads: []ipc.RankLoad{{Rank: 0, Seq: 1, Load: ipc.Load{Received: []uint64{0}, ReceivedTokens: []uint64{0}, Go: rank}}},
		Detok: detokd}
	var buf frameBuffers
	if err := w.handle(&buf, b.Append(nil)); err != nil {
		t.Fatal(err)
	}
	if g, ok := w.GoRuntime(0); !ok || g != metrics.GoRuntime(rank) {
		t.Errorf("rank 0: %+v %v, want %+v", g, ok, rank)
	}
	if g, ok := w.GoRuntime(-1); !ok || g != metrics.GoRuntime(detokd) {
		t.Errorf("detokd: %+v %v, want %+v", g, ok, detokd)
	}
	if _, ok := w.GoRuntime(1); ok {
		t.Error("stats for a rank that does not exist")
	}
	r.clock.advance(1500 * time.Millisecond)
	if _, ok := w.GoRuntime(0); ok {
		t.Error("rank 0's stats outlive the rank timeout")
	}
	if _, ok := w.GoRuntime(-1); ok {
		t.Error("detokd's stats outlive the rank timeout")
	}
}

// TestGrammarChecksShareCompileSlots: at most half the CPUs (at least one) of a worker compile
// grammars at once; a check that gets no slot by its request's deadline is the engine's overload
// (api.ErrOverloaded, a 503 naming the wait), not a refusal of the grammar, and a free slot lets
// the same check compile. Before, every concurrent request compiled at once: clients sending
// costly grammars together took every core from the model's forward.
func TestGrammarChecksShareCompileSlots(t *testing.T) {
	w, _ := newWorkerRig(t, time.Second)
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Grammars = grammar.NewCompiler(tok, nil, grammar.Options{})
	if want := max(1, runtime.GOMAXPROCS(0)/2); cap(w.compileSlots) != want {
		t.Fatalf("%d compile slots, want %d", cap(w.compileSlots), want)
	}
	for range cap(w.compileSlots) { // every slot taken by compiles under way
		w.compileSlots <- struct{}{}
	}
	const g = `root ::= "a" [0-9]+`
	start := time.Now()
	err = w.CheckGrammarBy(time.Now().Add(50*time.Millisecond), api.GrammarGBNF, g)
	if !errors.Is(err, api.ErrOverloaded) || !strings.Contains(err.Error(), "no grammar compile slot") {
		t.Fatalf("check with every slot taken: %v, want api.ErrOverloaded naming the slot", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Errorf("check with every slot taken gave up after %v, want at its 50 ms deadline", took)
	}
	<-w.compileSlots
	if err := w.CheckGrammarBy(time.Now().Add(time.Minute), api.GrammarGBNF, g); err != nil {
		t.Fatalf("check with a slot free: %v", err)
	}
	if len(w.compileSlots) != cap(w.compileSlots)-1 {
		t.Errorf("%d slots taken after the check, want its slot given back", len(w.compileSlots))
	}
}

// TestTokenBatchesMergedPerRound: the token batches a rank sends straight to the worker
// (--skip-detokenization) that are queued together are delivered as one push per request, in
// order, with exact counts; a text batch in the same round goes out after the token items held
// before it.
func TestTokenBatchesMergedPerRound(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	st, err := w.Submit(context.Background(), &api.Request{RID: "r1", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 10, Stream: true, StreamInterval: 1, RoutedRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	rank.dispatched()
	ids := make([]int32, 1) // one decode buffer, overwritten after every frame as a socket's would be
	frame := func(id int32, done bool) []byte {
		ids[0] = id
		it := item(st.RID, id, "", done).TokenItem
		it.NewIDs = ids
		rank.seq++
		b := ipc.TokenBatch{Seq: rank.seq, Load: ipc.Load{Received: []uint64{0}, ReceivedTokens: []uint64{0}}, Items: []ipc.TokenItem{it}}
		return b.Append(nil)
	}
	buf := frameBuffers{co: detok.NewCoalescer()}
	for id := int32(0); id < 3; id++ {
		if err := w.add(&buf, frame(id, false)); err != nil {
			t.Fatal(err)
		}
	}
	// A text batch of the same request ends the round's token run: the held ids go first.
	if err := w.add(&buf, rank.batch(item(st.RID, 3, "", false))); err != nil {
		t.Fatal(err)
	}
	if err := w.add(&buf, frame(4, true)); err != nil {
		t.Fatal(err)
	}
	w.flush(&buf)
	d, err := st.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.IDs, []int32{0, 1, 2, 3, 4}) || !d.Finished || d.CompletionTokens != 5 || d.Err != nil {
		t.Fatalf("delta: ids %v finished %v completion %d err %v", d.IDs, d.Finished, d.CompletionTokens, d.Err)
	}
	// Three pushes reached the stream (three merged token items, the text item, the finishing
	// token item): two of them landed on output not yet taken.
	if m := st.Merged(); m != 2 {
		t.Errorf("stream saw %d merged pushes, want 2 (one push per round's run of token batches)", m)
	}
}

// TestLookupFollowsShiftingBatches: batches routed through one set of receive buffers (as the
// receive loop's are), whose requests shift as some finish or fail and others join, and whose
// order is reversed: every stream gets its own ids, and a request that failed gets nothing
// more (lookup finds most entries by their position in the previous batch).
func TestLookupFollowsShiftingBatches(t *testing.T) {
	w, rank := startWorker(t, 5*time.Second)
	var streams []*api.Stream
	submit := func() {
		st, err := w.Submit(context.Background(), &api.Request{InputIDs: []int32{1, 2, 3}, MaxNewTokens: 100, Stream: true, StreamInterval: 1, RoutedRank: -1})
		if err != nil {
			t.Fatal(err)
		}
		rank.dispatched()
		streams = append(streams, st)
	}
	for range 12 {
		submit()
	}
	var buf frameBuffers
	next := make([]int32, 13) // each request's next id
	route := func(done map[int]bool, order ...int) {
		t.Helper()
		var items []ipc.TextItem
		for _, k := range order {
			items = append(items, item(streams[k].RID, next[k], "x", done[k]))
			next[k]++
		}
		if err := w.handle(&buf, rank.batch(items...)); err != nil {
			t.Fatal(err)
		}
	}
	all := func(skip ...int) []int {
		var o []int
		for k := range streams {
			if !slices.Contains(skip, k) {
				o = append(o, k)
			}
		}
		return o
	}
	route(nil, all()...)
	route(map[int]bool{3: true}, all()...) // 3 finishes
	next[5]++                              // 5's next item follows a gap: it fails
	route(nil, all(3)...)
	route(nil, all(3)...) // 5's next item, after its failure, is dropped
	if frame, err := rank.reqs.Recv(5 * time.Second); err != nil {
		t.Fatal(err)
	} else if typ, _ := ipc.PeekType(frame); typ != ipc.MsgAbort {
		t.Fatalf("after the gap the rank got a %v, want an abort", typ)
	}
	submit() // 12 joins
	o := all(3, 5)
	slices.Reverse(o)
	route(nil, o...)
	route(map[int]bool{0: true, 1: true, 2: true, 4: true, 6: true, 7: true, 8: true, 9: true, 10: true, 11: true, 12: true}, all(3, 5)...)
	if n := w.InFlight(); n != 0 {
		t.Fatalf("%d requests still in flight", n)
	}
	for k, st := range streams {
		d, err := st.Next(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		var want []int32
		switch k {
		case 3:
			want = []int32{0, 1}
		case 5:
			want = []int32{0, 1}
		case 12:
			want = []int32{0, 1}
		default:
			want = []int32{0, 1, 2, 3, 4, 5}
		}
		if !slices.Equal(d.IDs, want) || !d.Finished || (k == 5) != (d.Err != nil) {
			t.Errorf("request %d: ids %v finished %v err %v, want ids %v", k, d.IDs, d.Finished, d.Err, want)
		}
	}
}
