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
	"sync/atomic"
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
	Transport  ipc.Transport
	// Direct sends outputs to the workers (no detokd): --skip-detokenization / --skip-tokenizer-init.
	Direct bool
	// Tokenizer checks stop strings; nil under --skip-tokenizer-init.
	Tokenizer *tokenizer.Tokenizer
	// Grammars compiles structured-output constraints; nil refuses them.
	Grammars *Grammars
	// Heartbeat is the longest the rank stays silent towards its readers.
	Heartbeat time.Duration
	Log       *slog.Logger
}

// Runner is one rank's event loop around a scheduler.
type Runner struct {
	cfg   Config
	sched *scheduler.Scheduler
	in    ipc.Receiver
	out   []ipc.Sender
	log   *slog.Logger

	seq   atomic.Uint64
	inbox chan inMsg // decoded by receive, consumed by the step loop

	// Guarded by loadMu: what the next load report says. received* count what the receive
	// goroutine has read, per worker; queued* what it has read that the step loop has not yet
	// handed to the scheduler (reported as waiting); schedLoad the scheduler's own last load.
	received       []uint64
	receivedTokens []uint64
	queued         int
	queuedTokens   int
	schedLoad      scheduler.Load
	hbMu           sync.Mutex // serializes heartbeats and acks
	hb             ipc.TokenBatch
	hbFrame        []byte // hb encoded, reused (guarded by hbMu)

	loadMu   sync.Mutex
	lastSend atomic.Int64 // unix nanos of the last batch sent

	gates   map[string]*gate
	flushed []*gate // gates whose buffers the batch being sent points into
	batch   ipc.TokenBatch
	frame   []byte
	one     ipc.TokenBatch // direct mode: one worker's share of batch
}

// gate buffers a request's output between stream flushes: the first tokens go out at once, then
// every interval tokens, and everything left (and the finish, abort or error) at the end. It
// also holds the detokenization settings that ride on the request's items, because detokd never
// sees the request itself.
type gate struct {
	interval int
	whole    bool // not streamed: everything goes out once, at the end
	sentAny  bool
	ids      []int32 // buffered since the last flush; reused after each flush
	logprobs []float32
	// topIDs and topLogprobs are the buffered items' top logprobs (scheduler.Item's).
	topIDs      []int32
	topLogprobs []float32
	// prompt is the buffered first item's prompt logprobs (scheduler.Item's; the scheduler's
	// slices, which it never changes once sent), until they go out.
	prompt *scheduler.Item

	out outputSettings
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
		received: make([]uint64, cfg.NumWorkers), receivedTokens: make([]uint64, cfg.NumWorkers), gates: map[string]*gate{},
		inbox: make(chan inMsg, inboxSize)}
	var err error
	r.in, err = cfg.Transport.Pull(ipc.SchedulerEndpoint(cfg.RunDir, cfg.Rank), true, ipc.WithRecvHWM(100000))
	if err != nil {
		return nil, fmt.Errorf("rank %d: bind: %w", cfg.Rank, err)
	}
	targets := []string{ipc.DetokEndpoint(cfg.RunDir)}
	if cfg.Direct {
		targets = targets[:0]
		for w := 0; w < cfg.NumWorkers; w++ {
			targets = append(targets, ipc.WorkerEndpoint(cfg.RunDir, w))
		}
	}
	for _, ep := range targets {
		s, err := cfg.Transport.Push(ep, false, ipc.WithSendHWM(100000), ipc.WithSendTimeout(time.Second))
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("rank %d: connect %s: %w", cfg.Rank, ep, err)
		}
		r.out = append(r.out, s)
	}
	return r, nil
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

// Run loops until ctx ends: drain the inbox, step, send.
func (r *Runner) Run(ctx context.Context) error {
	go r.heartbeats(ctx)
	go r.receive(ctx)
	r.publishLoad(r.sched.Load())
	for ctx.Err() == nil {
		idle := !r.sched.HasWork()
		wait := time.Duration(0)
		if idle {
			wait = 50 * time.Millisecond
		}
		if err := r.drain(wait); err != nil {
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
func (r *Runner) drain(wait time.Duration) error {
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
			r.sched.Abort(m.abort.RID)
			continue
		}
		gr := m.req
		added++
		addedTokens += len(gr.InputIDs)
		if err := r.add(gr); err != nil {
			failed = append(failed, scheduler.Item{RID: gr.RID, Owner: int(gr.Owner), PromptTokens: len(gr.InputIDs),
				Finished: true, FinishReason: scheduler.FinishError, MatchedStopToken: -1, Err: err.Error()})
		}
	}
	if added > 0 {
		// Move the requests from "queued here" to the scheduler's own count in one step, so a
		// report in between never misses them.
		l := r.sched.Load()
		r.loadMu.Lock()
		r.queued -= added
		r.queuedTokens -= addedTokens
		r.schedLoad = l
		r.loadMu.Unlock()
	}
	if len(failed) > 0 {
		r.send(&scheduler.Output{Items: failed, Load: r.sched.Load()})
	}
	return nil
}

// add hands a wire request to the scheduler.
func (r *Runner) add(m *ipc.GenerateRequest) error {
	in, err := requestFromWire(m)
	if err != nil {
		return err
	}
	if in.routedRank >= 0 && in.routedRank != r.cfg.Rank {
		return fmt.Errorf("request routed to rank %d arrived at rank %d", in.routedRank, r.cfg.Rank)
	}
	req := &in.sched
	if len(in.out.stops) > 0 {
		if r.cfg.Tokenizer == nil {
			return errors.New("stop strings need a tokenizer (the engine runs with --skip-tokenizer-init)")
		}
		st := detok.NewStream(r.cfg.Tokenizer.NewDecoder(in.out.skipSpecial), in.out.stops)
		req.StopCheck = func(ids []int32) (string, bool) {
			_, stopped, matched := st.Push(ids, false)
			return matched, stopped
		}
	}
	if in.grammar.Kind != grammar.KindNone {
		if r.cfg.Grammars == nil {
			return errors.New("structured output needs a tokenizer (the engine runs with --skip-tokenizer-init)")
		}
		c := r.cfg.Grammars.start(in.grammar)
		req.Constraint, req.Ready = c, c.Ready
	}
	if err := r.sched.Add(req); err != nil {
		return err
	}
	r.gates[req.RID] = &gate{interval: in.out.interval, whole: !in.out.stream, out: in.out}
	return nil
}

// send applies the stream gates and sends one batch (or one per worker when direct). A request
// whose output goes out this step with nothing buffered is sent straight from the scheduler's
// slices, which stay valid until the next Step; only a gated request copies its ids.
func (r *Runner) send(out *scheduler.Output) {
	b := &r.batch
	b.Items = b.Items[:0]
	var none gate // requests that failed before add registered a gate
	for i := range out.Items {
		it := &out.Items[i]
		g := r.gates[it.RID]
		if g == nil {
			none = gate{interval: 1}
			g = &none
		}
		ids, lps := it.NewIDs, it.Logprobs
		top := topLogprobs{it.TopLogprobIDs, it.TopLogprobs}
		if len(g.ids) > 0 {
			g.buffer(it)
			ids, lps, top = g.ids, g.logprobs, topLogprobs{g.topIDs, g.topLogprobs}
		}
		if !it.Finished && (g.whole || len(ids) == 0 || (g.sentAny && len(ids) < g.interval)) {
			if len(g.ids) == 0 {
				g.buffer(it)
			}
			continue
		}
		if g.prompt != nil && len(it.PromptLogprobs) == 0 && len(it.PromptTopLogprobIDs) == 0 {
			withPrompt := *it
			withPrompt.PromptLogprobs, withPrompt.PromptTopLogprobIDs, withPrompt.PromptTopLogprobs =
				g.prompt.PromptLogprobs, g.prompt.PromptTopLogprobIDs, g.prompt.PromptTopLogprobs
			it = &withPrompt
		}
		g.prompt = nil
		ti := itemToWire(it, ids, lps, top, &g.out, !g.sentAny)
		b.Items = append(b.Items, ti)
		g.sentAny = true
		if it.Finished {
			delete(r.gates, it.RID)
		} else if len(g.ids) > 0 {
			r.flushed = append(r.flushed, g)
		}
	}
	r.publishLoad(out.Load)
	r.emit(b)
	// The batch is encoded: the flushed gates may refill their buffers.
	for _, g := range r.flushed {
		g.ids, g.logprobs = g.ids[:0], g.logprobs[:0]
		g.topIDs, g.topLogprobs = g.topIDs[:0], g.topLogprobs[:0]
	}
	clear(r.flushed)
	r.flushed = r.flushed[:0]
}

// buffer appends it's output to the gate's buffers.
func (g *gate) buffer(it *scheduler.Item) {
	g.ids = append(g.ids, it.NewIDs...)
	g.logprobs = append(g.logprobs, it.Logprobs...)
	g.topIDs = append(g.topIDs, it.TopLogprobIDs...)
	g.topLogprobs = append(g.topLogprobs, it.TopLogprobs...)
	if len(it.PromptLogprobs) > 0 || len(it.PromptTopLogprobIDs) > 0 {
		p := scheduler.Item{PromptLogprobs: it.PromptLogprobs, PromptTopLogprobIDs: it.PromptTopLogprobIDs, PromptTopLogprobs: it.PromptTopLogprobs}
		g.prompt = &p
	}
}

func (r *Runner) publishLoad(l scheduler.Load) {
	r.loadMu.Lock()
	r.schedLoad = l
	r.loadMu.Unlock()
}

// loadLocked is the report to send now: the scheduler's last load plus what the receive
// goroutine has read since. The caller holds loadMu; the slices are l's own.
func (r *Runner) loadLocked(l *ipc.Load) {
	loadToWire(l, &r.schedLoad, r.queued, r.queuedTokens, r.received, r.receivedTokens)
}

// emit stamps the batch with a sequence number and the current load and sends it.
func (r *Runner) emit(b *ipc.TokenBatch) {
	r.loadMu.Lock()
	b.Rank = uint32(r.cfg.Rank)
	b.Seq = r.seq.Add(1)
	r.loadLocked(&b.Load)
	if !r.cfg.Direct {
		r.frame = b.Append(r.frame[:0])
		r.loadMu.Unlock()
		if err := r.out[0].Send(r.frame); err != nil {
			r.log.Warn("detokd not reachable", "items", len(b.Items), "err", err)
		}
		r.lastSend.Store(time.Now().UnixNano())
		return
	}
	r.loadMu.Unlock()
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
	r.lastSend.Store(time.Now().UnixNano())
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
		case <-t.C:
		}
		if time.Since(time.Unix(0, r.lastSend.Load())) < r.cfg.Heartbeat {
			continue
		}
		r.hbMu.Lock()
		r.emitHeartbeat(&r.hb)
		r.hbMu.Unlock()
	}
}

func (r *Runner) emitHeartbeat(hb *ipc.TokenBatch) {
	r.loadMu.Lock()
	hb.Rank = uint32(r.cfg.Rank)
	hb.Seq = r.seq.Add(1)
	r.loadLocked(&hb.Load)
	r.hbFrame = hb.Append(r.hbFrame[:0]) // Send copies the frame; hbMu guards the buffer
	r.loadMu.Unlock()
	for _, s := range r.out {
		_ = s.Send(r.hbFrame)
	}
	r.lastSend.Store(time.Now().UnixNano())
}
