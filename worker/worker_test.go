package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/shard"
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
	if m := rank.dispatched(); m.RID != "r1" || m.StreamInterval != 1 || !m.Stream {
		t.Fatalf("dispatched %+v", m)
	}
	const n = 100
	var want []int32
	for i := range n {
		rank.route(item("r1", int32(i), "ab", i == n-1))
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
		rank.send(item("r1", int32(i), "x", false))
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
	// The rank now says nothing more, for longer than its timeout.
	rank.clock.advance(301 * time.Millisecond)
	w.checkRanks()
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
}

// TestRankTakesNothingUntilItReports: a rank that has not reported yet (still loading its
// model) gets no requests; they are refused at once (a 503 upstream), /health says why, and the
// first report makes the rank usable without any request having been lost in between.
func TestRankTakesNothingUntilItReports(t *testing.T) {
	// A short rank timeout: the never-heard rank must not be marked "down" (and logged as
	// dead) when it expires; it stays "not reported yet".
	w, rank := newWorkerRig(t, 50*time.Millisecond)
	reqs := rank.reqs
	rank.clock.advance(200 * time.Millisecond)
	w.checkRanks()
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
	r := req()
	if _, err := w.Submit(context.Background(), r); err != nil {
		t.Fatalf("submit after the first report: %v", err)
	}
	if got := rank.dispatched(); got.RID != r.RID {
		t.Fatalf("rank got %q, want %q", got.RID, r.RID)
	}
}
