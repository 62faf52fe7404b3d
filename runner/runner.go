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
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/sampling"
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

	seq            atomic.Uint64
	received       []uint64 // per worker: GenerateRequests received (owned by the loop)
	receivedTokens []uint64 // per worker: their prompt tokens

	loadMu   sync.Mutex
	lastLoad ipc.Load
	lastSend atomic.Int64 // unix nanos of the last batch sent

	gates map[string]*gate
	batch ipc.TokenBatch
	frame []byte
}

// gate buffers a request's output between stream flushes: the first tokens go out at once, then
// every interval tokens, and everything left (and the finish) at the end.
type gate struct {
	interval int
	sentAny  bool
	ids      []int32
	logprobs []float32
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
		received: make([]uint64, cfg.NumWorkers), receivedTokens: make([]uint64, cfg.NumWorkers), gates: map[string]*gate{}}
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

// drain handles every message waiting in the inbox, waiting up to wait for the first.
func (r *Runner) drain(wait time.Duration) error {
	var gr ipc.GenerateRequest
	var ab ipc.Abort
	var failed []scheduler.Item
	for {
		frame, err := r.in.Recv(wait)
		wait = 0
		if errors.Is(err, ipc.ErrTimeout) {
			break
		}
		if err != nil {
			return err
		}
		typ, err := ipc.PeekType(frame)
		if err != nil {
			r.log.Warn("dropped bad frame", "err", err)
			continue
		}
		switch typ {
		case ipc.MsgGenerateRequest:
			if err := gr.Decode(frame); err != nil {
				r.log.Warn("dropped bad request", "err", err)
				continue
			}
			if int(gr.Owner) < len(r.received) {
				r.received[gr.Owner]++
				r.receivedTokens[gr.Owner] += uint64(len(gr.InputIDs))
			}
			if err := r.add(&gr); err != nil {
				failed = append(failed, scheduler.Item{RID: gr.RID, Owner: int(gr.Owner), PromptTokens: len(gr.InputIDs),
					Finished: true, FinishReason: scheduler.FinishError, MatchedStopToken: -1, Err: err.Error()})
			}
		case ipc.MsgAbort:
			if err := ab.Decode(frame); err != nil {
				r.log.Warn("dropped bad abort", "err", err)
				continue
			}
			r.sched.Abort(ab.RID)
		default:
			r.log.Warn("dropped unexpected message", "type", typ)
		}
	}
	if len(failed) > 0 {
		r.send(&scheduler.Output{Items: failed, Load: r.sched.Load()})
	}
	return nil
}

// add converts a wire request into a scheduler request.
func (r *Runner) add(m *ipc.GenerateRequest) error {
	p := sampling.Params{Temperature: m.Temperature, TopP: m.TopP, TopK: int(m.TopK), MinP: m.MinP,
		RepetitionPenalty: m.RepetitionPenalty, FrequencyPenalty: m.FrequencyPenalty, PresencePenalty: m.PresencePenalty}
	if m.HasSeed {
		seed := m.Seed
		p.Seed = &seed
	}
	req := &scheduler.Request{
		RID: m.RID, Owner: int(m.Owner), InputIDs: append([]int32(nil), m.InputIDs...),
		MaxNewTokens: int(m.MaxNewTokens), MinNewTokens: int(m.MinNewTokens),
		StopTokenIDs: append([]int32(nil), m.StopTokenIDs...), IgnoreEOS: m.IgnoreEOS,
		Sampling: p, Logprobs: m.Logprobs, Arrival: time.Unix(0, m.ArrivalUnixNano),
	}
	if len(m.StopStrings) > 0 {
		if r.cfg.Tokenizer == nil {
			return errors.New("stop strings need a tokenizer (the engine runs with --skip-tokenizer-init)")
		}
		st := detok.NewStream(r.cfg.Tokenizer.NewDecoder(m.SkipSpecialTokens), append([]string(nil), m.StopStrings...))
		req.StopCheck = func(ids []int32) (string, bool) {
			_, stopped, matched := st.Push(ids, false)
			return matched, stopped
		}
	}
	if m.Grammar.Kind != ipc.GrammarNone {
		return errors.New("structured output is not available in this build yet")
	}
	if err := r.sched.Add(req); err != nil {
		return err
	}
	interval := max(int(m.StreamInterval), 1)
	r.gates[m.RID] = &gate{interval: interval}
	return nil
}

// send applies the stream gates and sends one batch (or one per worker when direct).
func (r *Runner) send(out *scheduler.Output) {
	b := &r.batch
	b.Items = b.Items[:0]
	for i := range out.Items {
		it := &out.Items[i]
		g := r.gates[it.RID]
		if g == nil {
			g = &gate{interval: 1}
		}
		g.ids = append(g.ids, it.NewIDs...)
		g.logprobs = append(g.logprobs, it.Logprobs...)
		if !it.Finished && (len(g.ids) == 0 || (g.sentAny && len(g.ids) < g.interval)) {
			continue
		}
		g.sentAny = true
		b.Items = append(b.Items, ipc.TokenItem{
			RID: it.RID, Owner: uint32(it.Owner), NewIDs: g.ids, Logprobs: g.logprobs,
			PromptTokens: int32(it.PromptTokens), CachedTokens: int32(it.CachedTokens), CompletionTokens: int32(it.CompletionTokens),
			Finished: it.Finished, FinishReason: ipc.FinishReason(it.FinishReason),
			MatchedStopToken: it.MatchedStopToken, MatchedStop: it.MatchedStop, Error: it.Err,
		})
		if it.Finished {
			delete(r.gates, it.RID)
		} else {
			// The batch holds these slices until it is encoded below; start fresh ones.
			g.ids, g.logprobs = nil, nil
		}
	}
	r.publishLoad(out.Load)
	r.emit(b)
}

func (r *Runner) publishLoad(l scheduler.Load) {
	r.loadMu.Lock()
	r.lastLoad = ipc.Load{Running: int64(l.Running), Waiting: int64(l.Waiting),
		KVTokensUsed: int64(l.KVTokensUsed), KVTokensCapacity: int64(l.KVTokensCapacity), WaitingTokens: int64(l.WaitingTokens),
		Received: append(r.lastLoad.Received[:0], r.received...), ReceivedTokens: append(r.lastLoad.ReceivedTokens[:0], r.receivedTokens...)}
	r.loadMu.Unlock()
}

// emit stamps the batch with a sequence number and the current load and sends it.
func (r *Runner) emit(b *ipc.TokenBatch) {
	r.loadMu.Lock()
	b.Rank = uint32(r.cfg.Rank)
	b.Seq = r.seq.Add(1)
	b.Load = r.lastLoad
	b.Load.Received = append([]uint64(nil), r.lastLoad.Received...)
	b.Load.ReceivedTokens = append([]uint64(nil), r.lastLoad.ReceivedTokens...)
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
	var one ipc.TokenBatch
	one.Rank, one.Seq, one.Load = b.Rank, b.Seq, b.Load
	for w := range r.out {
		one.Items = one.Items[:0]
		for i := range all {
			if int(all[i].Owner) == w {
				one.Items = append(one.Items, all[i])
			}
		}
		frame := one.Append(nil)
		if err := r.out[w].Send(frame); err != nil {
			r.log.Warn("worker not reachable", "worker", w, "items", len(one.Items), "err", err)
		}
	}
	r.lastSend.Store(time.Now().UnixNano())
}

// heartbeats sends an empty batch with the latest load whenever the rank has been silent for a
// heartbeat period, so dispatchers never balance on stale load and workers know the rank lives.
func (r *Runner) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.cfg.Heartbeat / 2)
	defer t.Stop()
	var hb ipc.TokenBatch
	var mu sync.Mutex
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, r.lastSend.Load())) < r.cfg.Heartbeat {
			continue
		}
		mu.Lock()
		r.emitHeartbeat(&hb)
		mu.Unlock()
	}
}

func (r *Runner) emitHeartbeat(hb *ipc.TokenBatch) {
	r.loadMu.Lock()
	hb.Rank = uint32(r.cfg.Rank)
	hb.Seq = r.seq.Add(1)
	hb.Load = r.lastLoad
	frame := hb.Append(nil)
	r.loadMu.Unlock()
	for _, s := range r.out {
		_ = s.Send(frame)
	}
	r.lastSend.Store(time.Now().UnixNano())
}
