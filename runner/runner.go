// Package runner drives one data-parallel rank: it receives requests and aborts over ZMQ, runs
// the scheduler's step function, and sends each step's token-id deltas (with the rank's load
// piggybacked) to detokd or, without detokd, straight to the owning workers. A heartbeat goroutine
// keeps the load fresh even while a long forward step runs.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/llmserve/llmserve/detok"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
)

// Config configures one rank's loop.
type Config struct {
	Rank       int
	NumWorkers int
	RunDir     string
	// Topology names the sockets when they are not all ipc:// in RunDir (ranks on other hosts).
	Topology  *ipc.Topology
	Transport ipc.Transport
	// Direct sends outputs to the workers (no detokd): --skip-detokenization / --skip-tokenizer-init.
	Direct bool
	// Tokenizer checks stop strings; nil under --skip-tokenizer-init.
	Tokenizer *tokenizer.Tokenizer
	// Grammars compiles structured-output constraints; nil refuses them.
	Grammars *Grammars
	// Heartbeat is the longest the rank stays silent towards its readers.
	Heartbeat time.Duration
	// KVEvents, when set, receives every step's prefix-cache changes (the scheduler must have
	// Config.KVEvents); the rank announces an empty cache to it when Run starts. KVBlockSize is
	// the scheduler's block size, which the events carry.
	KVEvents    KVEventSink
	KVBlockSize int
	Log         *slog.Logger
}

// Runner is one rank's event loop around a scheduler.
//
// Goroutines, all started and waited for by Run:
//   - the step loop (Run's own): owns the scheduler, the requests' outputs (gates) and the
//     outgoing batch buffers; it drains the inbox, steps, and sends each step's batch.
//   - receive (inbox.go): owns reading the request socket; it decodes requests and aborts into
//     the inbox and counts each arrival in load at once (the acknowledgement dispatchers wait
//     for), sending an ack report when a burst has been read.
//   - heartbeats: sends an empty batch with the current load when the rank has been quiet for
//     a heartbeat period, so the workers know the rank lives while a long step runs.
//   - one per constrained request (grammar.go): compiles its grammar, bounded by the
//     compile timeout and slots; it owns its constraint until Ready reports true.
//
// Locks: hbMu, then load.mu (heartbeats and acks take both in that order); the step loop takes
// load.mu alone. The out sockets are written by the step loop and under hbMu.
type Runner struct {
	cfg   Config
	sched *scheduler.Scheduler // step loop only
	in    ipc.Receiver         // receive goroutine only
	out   []ipc.Sender         // detokd, or one per worker when direct
	log   *slog.Logger

	inbox chan inMsg // decoded by receive, consumed by the step loop
	load  *loadState // what the next report says; shared, see loadState

	hbMu    sync.Mutex     // serializes heartbeats and acks; guards hb and hbFrame
	hb      ipc.TokenBatch // the heartbeat batch, reused
	hbFrame []byte         // hb encoded, reused

	// The step loop's own.
	outputs map[string]*output // per live request: its gate and output settings
	// last is the previous batch's outputs by item position: a decoding batch lists the same
	// requests in the same order step after step (less those that finished, new ones after),
	// so send finds most outputs here by comparing rids (the scheduler's own strings:
	// pointer-equal) instead of hashing them into outputs. next is send's buffer for the
	// batch being sent, swapped with last after it.
	last, next []lastOutput
	epochs     map[uint32]uint64 // per worker: the epoch of its current process, once announced
	flushed    []*gate           // gates whose buffers the batch being sent points into
	batch      ipc.TokenBatch
	frame      []byte
	one        ipc.TokenBatch // direct mode: one worker's share of batch
	wg         sync.WaitGroup // the goroutines Run started
}

// lastOutput is one item position of the previous batch: its rid and output.
type lastOutput struct {
	rid string
	o   *output
}

// output is what the runner keeps of one request for its output items.
type output struct {
	// done is set when the request's finishing item was sent and the output forgotten.
	done     bool
	gate     gate
	settings outputSettings
	owner    int    // the tokenizer worker the request belongs to
	epoch    uint64 // of the worker process that sent it
	// prompt holds a first item's prompt logprobs while the gate holds that item back, until
	// they go out with the request's first sent item.
	prompt *scheduler.Item
}

// New binds the rank's request socket and connects its output sockets.
func New(cfg Config, sched *scheduler.Scheduler) (*Runner, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Runner{cfg: cfg, sched: sched, log: cfg.Log.With("rank", cfg.Rank),
		load: newLoadState(cfg.Rank, cfg.NumWorkers), outputs: map[string]*output{}, epochs: map[uint32]uint64{}, inbox: make(chan inMsg, inboxSize)}
	top := cfg.Topology
	if top == nil {
		top = ipc.LocalTopology(cfg.RunDir)
	}
	var err error
	r.in, err = cfg.Transport.Pull(top.Scheduler(cfg.Rank, true), true, top.Options(ipc.WithRecvHWM(100000))...)
	if err != nil {
		return nil, fmt.Errorf("rank %d: bind: %w", cfg.Rank, err)
	}
	for _, ep := range OutputEndpoints(top, cfg.Direct, cfg.NumWorkers) {
		s, err := cfg.Transport.Push(ep, false, top.Options(ipc.WithSendHWM(100000), ipc.WithSendTimeout(time.Second))...)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("rank %d: connect %s: %w", cfg.Rank, ep, err)
		}
		r.out = append(r.out, s)
	}
	return r, nil
}

// OutputEndpoints are where a rank sends its batches: detokd's input, or each worker's output
// socket when direct.
func OutputEndpoints(top *ipc.Topology, direct bool, numWorkers int) []string {
	if !direct {
		return []string{top.Detok(false)}
	}
	eps := make([]string, numWorkers)
	for w := range eps {
		eps[w] = top.Worker(w, false)
	}
	return eps
}

// Close closes the sockets.
func (r *Runner) Close() {
	if r.in != nil {
		r.in.Close()
	}
	for _, s := range r.out {
		s.Close()
	}
}

// Run loops until ctx ends: drain the inbox, step, send. It returns after the goroutines it
// started have ended.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer r.wg.Wait()
	defer cancel()
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.heartbeats(ctx) }()
	go func() { defer r.wg.Done(); r.receive(ctx) }()
	r.load.publish(r.sched.Load())
	// A rank starts with an empty cache: an indexer that knew a previous process of this rank
	// drops what that one held.
	r.publishKV([]scheduler.KVEvent{{Kind: scheduler.KVAllBlocksCleared}}, time.Now())
	for ctx.Err() == nil {
		idle := !r.sched.HasWork()
		wait := time.Duration(0)
		if idle {
			wait = 50 * time.Millisecond
		}
		if err := r.drain(ctx, wait); err != nil {
			if errors.Is(err, ipc.ErrClosed) {
				return nil
			}
			return err
		}
		if !r.sched.HasWork() {
			continue
		}
		out, err := r.sched.Step(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.log.Error("step failed; failing the running requests", "err", err)
			out = r.sched.FailAll(err)
		}
		r.send(&out)
	}
	return nil
}

// drain hands every decoded message waiting in the inbox to the scheduler, waiting up to wait
// for the first.
func (r *Runner) drain(ctx context.Context, wait time.Duration) error {
	var failed []scheduler.Item
	var timer <-chan time.Time
	if wait > 0 {
		timer = time.After(wait)
	}
	added, addedTokens := 0, 0
loop:
	for {
		var m inMsg
		var ok bool
		if timer != nil {
			select {
			case m, ok = <-r.inbox:
			case <-timer:
				break loop
			}
			timer = nil
		} else {
			select {
			case m, ok = <-r.inbox:
			default:
				break loop
			}
		}
		if !ok {
			return ipc.ErrClosed
		}
		if m.abort != nil {
			r.abort(m.abort)
			continue
		}
		if m.hold != nil {
			failed = r.notHeld(m.hold, failed)
			continue
		}
		gr := m.req
		added++
		addedTokens += len(gr.InputIDs)
		if err := r.add(ctx, gr, m.at); err != nil {
			r.log.Warn("request refused", "request_id", gr.RequestID, "rid", gr.RID, "worker", gr.Owner, "err", err)
			reason, kind := scheduler.Refusal(err)
			failed = append(failed, scheduler.Item{RID: gr.RID, Owner: int(gr.Owner), PromptTokens: len(gr.InputIDs),
				Finished: true, FinishReason: scheduler.FinishError, MatchedStopToken: -1, Err: reason, ErrKind: kind})
		}
	}
	if added > 0 {
		// Move the requests from "queued here" to the scheduler's own count in one step, so a
		// report in between never misses them.
		r.load.handed(added, addedTokens, r.sched.Load())
	}
	if len(failed) > 0 {
		r.send(&scheduler.Output{Items: failed, Load: r.sched.Load()})
	}
	return nil
}

// abort stops the request named or, when the rid is empty, every request of the worker named
// that another process of it sent (and, from now on, refuses those that arrive late).
func (r *Runner) abort(m *ipc.Abort) {
	if m.RID != "" {
		r.sched.Abort(m.RID)
		return
	}
	r.epochs[m.Owner] = m.OwnerEpoch
	n := 0
	for rid, o := range r.outputs {
		if o.owner == int(m.Owner) && o.epoch != m.OwnerEpoch {
			r.sched.Abort(rid)
			n++
		}
	}
	if n > 0 {
		r.log.Info("aborted every request of a worker", "worker", m.Owner, "requests", n, "reason", m.Reason)
	}
}

// notHeld appends to failed a finishing error item for each request of q this rank does not
// hold (see ipc.HoldQuery): its finish went out before the query came, and did not arrive. A
// request read off the socket before the query has been added (or refused) by now, since the
// inbox keeps the socket's order.
func (r *Runner) notHeld(q *ipc.HoldQuery, failed []scheduler.Item) []scheduler.Item {
	n := 0
	for _, rid := range q.RIDs {
		if r.outputs[rid] != nil {
			continue
		}
		n++
		failed = append(failed, scheduler.Item{RID: rid, Owner: int(q.Owner), Finished: true, FinishReason: scheduler.FinishError, MatchedStopToken: -1,
			Err: fmt.Sprintf("rank %d had finished this request, and its last output was lost with a detokd that stopped", r.cfg.Rank)})
	}
	if n > 0 {
		r.log.Warn("requests the rank no longer holds", "worker", q.Owner, "asked", len(q.RIDs), "gone", n)
	}
	return failed
}

// add hands a wire request, read off the socket at received, to the scheduler; ctx bounds its
// grammar compile.
func (r *Runner) add(ctx context.Context, m *ipc.GenerateRequest, received time.Time) error {
	in, err := requestFromWire(m)
	if err != nil {
		return err
	}
	in.sched.Received = received
	if epoch, ok := r.epochs[m.Owner]; ok && epoch != in.ownerEpoch {
		return fmt.Errorf("request of a previous process of worker %d, which restarted", m.Owner)
	}
	if in.routedRank >= 0 && in.routedRank != r.cfg.Rank {
		return fmt.Errorf("request routed to rank %d arrived at rank %d", in.routedRank, r.cfg.Rank)
	}
	req := &in.sched
	if len(in.out.stops) > 0 {
		if r.cfg.Tokenizer == nil {
			return &scheduler.RequestError{Kind: scheduler.ErrorInvalid, Err: errors.New("stop strings need a tokenizer (the engine runs with --skip-tokenizer-init)")}
		}
		st := detok.NewStream(r.cfg.Tokenizer.NewDecoder(in.out.skipSpecial), in.out.stops)
		req.StopCheck = func(ids []int32) (string, bool) {
			_, stopped, matched := st.Push(ids, false)
			return matched, stopped
		}
	}
	if in.grammar.Kind != grammar.KindNone {
		if r.cfg.Grammars == nil {
			return &scheduler.RequestError{Kind: scheduler.ErrorInvalid, Err: errors.New("structured output needs a tokenizer (the engine runs with --skip-tokenizer-init)")}
		}
		c := r.cfg.Grammars.start(ctx, &r.wg, in.grammar)
		if tok := r.cfg.Tokenizer; tok != nil {
			c.encode = func(text string) []int32 { return tok.Encode(text, false) }
		}
		req.Constraint, req.Ready = c, c.Ready
	}
	if err := r.sched.Add(req); err != nil {
		return err
	}
	r.outputs[req.RID] = &output{gate: newGate(in.out.stream, in.out.interval), settings: in.out, owner: req.Owner, epoch: in.ownerEpoch}
	return nil
}

// send applies the stream gates and sends one batch (or one per worker when direct). A request
// whose output goes out this step with nothing held back is sent straight from the scheduler's
// slices, which stay valid until the next Step; only a gated request copies its ids.
func (r *Runner) send(out *scheduler.Output) {
	b := &r.batch
	b.Items = b.Items[:0]
	var none output // requests that failed before add registered their output
	last, next := r.last, r.next[:0]
	j := 0 // where in last the next item is looked for first
	for i := range out.Items {
		it := &out.Items[i]
		o := lookAhead(last, &j, it.RID)
		if o == nil {
			o = r.outputs[it.RID]
		}
		if o != nil && !it.Finished {
			next = append(next, lastOutput{it.RID, o})
		}
		if o == nil {
			none = output{gate: newGate(true, 1)}
			o = &none
		}
		first := !o.gate.sentAny
		if len(it.PromptLogprobs) > 0 || len(it.PromptTopLogprobIDs) > 0 {
			// The scheduler never changes these slices once sent: keep them until they go out.
			o.prompt = &scheduler.Item{PromptLogprobs: it.PromptLogprobs, PromptTopLogprobIDs: it.PromptTopLogprobIDs,
				PromptTopLogprobs: it.PromptTopLogprobs}
		}
		ids, lps, top, ok := o.gate.pushTop(it.NewIDs, it.Logprobs, topLogprobs{it.TopLogprobIDs, it.TopLogprobs}, it.Finished)
		if !ok {
			continue
		}
		if o.prompt != nil && len(it.PromptLogprobs) == 0 && len(it.PromptTopLogprobIDs) == 0 {
			withPrompt := *it
			withPrompt.PromptLogprobs, withPrompt.PromptTopLogprobIDs, withPrompt.PromptTopLogprobs =
				o.prompt.PromptLogprobs, o.prompt.PromptTopLogprobIDs, o.prompt.PromptTopLogprobs
			it = &withPrompt
		}
		o.prompt = nil
		b.Items = append(b.Items, itemToWire(it, ids, lps, top, &o.settings, first))
		if it.Finished {
			r.logFinish(it, o.settings.requestID)
			o.done = true
			delete(r.outputs, it.RID)
		} else if o.gate.holding() {
			r.flushed = append(r.flushed, &o.gate)
		}
	}
	r.last, r.next = next, last
	r.load.publish(out.Load)
	r.emit(b)
	r.publishKV(out.KVEvents, time.Now())
	// The batch is encoded: the flushed gates may refill their buffers.
	for _, g := range r.flushed {
		g.flushed()
	}
	clear(r.flushed)
	r.flushed = r.flushed[:0]
}

// lookAheadSpan is how many positions past the cursor lookAhead tries: the requests that
// finished between two batches, which left the batch, are skipped over.
const lookAheadSpan = 8

// lookAhead finds rid's live output among the first lookAheadSpan entries of last from *j on,
// and moves *j past it; nil (and *j unchanged) when it is not there.
func lookAhead(last []lastOutput, j *int, rid string) *output {
	for k := *j; k < len(last) && k < *j+lookAheadSpan; k++ {
		if l := &last[k]; l.rid == rid && !l.o.done {
			*j = k + 1
			return l.o
		}
	}
	return nil
}

// logFinish logs a finished request at debug (at warn when it failed), under the client's
// request id, so an operator can follow one request from the worker's access line to the rank.
func (r *Runner) logFinish(it *scheduler.Item, requestID string) {
	lvl := slog.LevelDebug
	if it.FinishReason == scheduler.FinishError {
		lvl = slog.LevelWarn
	}
	if !r.log.Enabled(context.Background(), lvl) {
		return
	}
	r.log.LogAttrs(context.Background(), lvl, "request finished",
		slog.String("request_id", requestID), slog.String("rid", it.RID), slog.Int("worker", it.Owner),
		slog.String("finish_reason", it.FinishReason.String()), slog.Int("prompt_tokens", it.PromptTokens),
		slog.Int("cached_tokens", it.CachedTokens), slog.Int("completion_tokens", it.CompletionTokens),
		slog.Duration("queue", it.QueueTime), slog.Duration("prefill", it.PrefillTime), slog.Duration("decode", it.DecodeTime),
		slog.Int("preemptions", it.Preemptions),
		slog.String("err", it.Err))
}

// emit stamps the batch with a sequence number and the current load and sends it.
func (r *Runner) emit(b *ipc.TokenBatch) {
	if !r.cfg.Direct {
		r.load.stamp(b, &r.frame, time.Now())
		if err := r.out[0].Send(r.frame); err != nil {
			r.log.Warn("detokd not reachable", "items", len(b.Items), "err", err)
		}
		return
	}
	r.load.stamp(b, nil, time.Now())
	// Without detokd each worker gets its own items and everyone gets the load.
	all := b.Items
	one := &r.one
	one.Rank, one.Seq, one.Load = b.Rank, b.Seq, b.Load
	for w := range r.out {
		if len(r.out) == 1 {
			one.Items = all // the one worker owns every item
		} else {
			one.Items = one.Items[:0]
			for i := range all {
				if int(all[i].Owner) == w {
					one.Items = append(one.Items, all[i])
				}
			}
		}
		r.frame = one.Append(r.frame[:0])
		if err := r.out[w].Send(r.frame); err != nil {
			r.log.Warn("worker not reachable", "worker", w, "items", len(one.Items), "err", err)
		}
	}
	if len(r.out) == 1 {
		one.Items = nil // do not alias the batch's items
	}
}

// heartbeats sends an empty batch with the latest load whenever the rank has been silent for a
// heartbeat period, so dispatchers never balance on stale load and workers know the rank lives.
func (r *Runner) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.cfg.Heartbeat / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if r.load.quiet(now, r.cfg.Heartbeat) {
				r.emitHeartbeat()
			}
		}
	}
}

// emitHeartbeat sends an empty batch carrying the current load to every reader.
func (r *Runner) emitHeartbeat() {
	r.hbMu.Lock()
	defer r.hbMu.Unlock()
	r.load.stamp(&r.hb, &r.hbFrame, time.Now()) // Send copies the frame
	for _, s := range r.out {
		if err := s.Send(r.hbFrame); err != nil {
			r.log.Warn("heartbeat not delivered", "err", err)
		}
	}
}
