// Package worker is one tokenizer worker's runtime, the Engine behind its HTTP API: it owns the
// requests the worker accepted, dispatches each to a data-parallel rank (shard), sends it over
// ZMQ, and routes every output item back to its request's stream, detokenizing it itself when
// the engine runs without detokd. It also watches, through its dispatcher, that every rank keeps
// reporting: a silent rank (its schedulerd, or detokd, is gone) fails its in-flight requests
// instead of leaving them hung, and they are aborted at the rank so none decodes on as a ghost.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/detok"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/tokenizer"
)

// Mode is how the engine's processes share detokenization.
type Mode uint8

// Modes, as in DESIGN.md.
const (
	// ModeDefault: detokd turns ids into text and forwards them.
	ModeDefault Mode = iota
	// ModeSkipDetokenization: schedulers send ids straight to the workers, which detokenize.
	ModeSkipDetokenization
	// ModeSkipTokenizerInit: no tokenizer anywhere; ids only.
	ModeSkipTokenizerInit
)

func (m Mode) String() string {
	switch m {
	case ModeSkipDetokenization:
		return "skip-detokenization"
	case ModeSkipTokenizerInit:
		return "skip-tokenizer-init"
	}
	return "default"
}

// Config configures one worker.
type Config struct {
	Index      int
	NumWorkers int
	DPSize     int
	RunDir     string
	// Topology names the sockets when they are not all ipc:// in RunDir (ranks on other hosts).
	Topology  *ipc.Topology
	Transport ipc.Transport
	Mode      Mode
	Method    shard.Method
	// Tokenizer is nil under ModeSkipTokenizerInit.
	Tokenizer *tokenizer.Tokenizer
	// MaxRequests bounds the requests this worker has in flight; more get ErrOverloaded.
	MaxRequests int
	// RankTimeout is how long a rank may stay silent (no output, no heartbeat) while this
	// worker watches before it is marked down and its in-flight requests fail; a stall of the
	// worker itself does not count (shard.WithWatchGap).
	RankTimeout time.Duration
	// Grammars compiles (and caches) each constraint once, so a bad one is refused up front;
	// nil accepts all (the rank refuses them when it has no tokenizer).
	Grammars *grammar.Compiler
	// GrammarTimeout bounds one up-front compile; 0 means DefaultGrammarTimeout.
	GrammarTimeout time.Duration
	// Ledger is the dispatch ledger shared by all workers (see shard.Ledger); nil: each worker
	// estimates the others' dispatches from its own.
	Ledger *shard.Ledger
	Log    *slog.Logger
	// Clock replaces time.Now for rank liveness (tests drive it); nil is time.Now.
	Clock func() time.Time
}

// LedgerPath is where the tokenizer workers of the engine using runDir share their dispatch
// ledger.
func LedgerPath(runDir string) string { return filepath.Join(runDir, "dispatch-ledger") }

// Worker implements api.Engine.
//
// Goroutines: New starts one, the receive loop (receiveLoop), which Close joins (wg) after it
// closes pull; the loop alone reads pull, routes outputs to streams and checks rank liveness.
// Everything else (Submit, Abort, CheckGrammar, Load, Health) runs on the HTTP handlers'
// goroutines, many at once.
//
// Locks: mu guards reqs, nothing else. Lock order: mu, then the dispatcher's own lock. Submit
// holds mu across disp.Pick, so the in-flight bound and the rank's dispatch are decided together
// (a request refused as overloaded is never counted at a rank); the dispatcher never calls back
// into the worker, and nothing else takes the two nested (report, checkRanks, Load take them one
// after the other). No socket send and no Stream.Push happens under mu: a stream's own lock is
// taken after mu is released. goMu (the other processes' Go runtime stats) is taken alone.
type Worker struct {
	cfg  Config
	disp *shard.Dispatcher // rank choice, dispatch ledger and liveness; locks itself
	// push holds one request socket per rank (safe for concurrent sends); pull is the worker's
	// output socket, read by the receive loop only.
	push  []ipc.Sender
	pull  ipc.Receiver
	log   *slog.Logger
	start time.Time // when New ran

	// epoch identifies this process of the worker to the ranks (ipc.GenerateRequest.OwnerEpoch).
	epoch uint64

	mu   sync.Mutex        // guards reqs
	reqs map[string]*entry // in-flight requests by the engine's rid

	// goMu guards rankGo and detokGo: the receive loop records them, /metrics scrapes read them.
	goMu sync.Mutex
	// rankGo[r] and detokGo are the Go runtime stats rank r and detokd last reported, with
	// when they arrived (ipc.Load.Go, ipc.TextBatch.Detok).
	rankGo  []reportedGo
	detokGo reportedGo

	// compileSlots holds one token per grammar check compiling: at most half the CPUs (at least
	// one) compile at once, so clients sending costly grammars together cannot take every core
	// from the model's forward and the other requests' tokenization.
	compileSlots chan struct{}

	framePool sync.Pool      // encode buffers of Submit's request frames
	closed    chan struct{}  // closed by Close
	wg        sync.WaitGroup // the receive loop
}

// reportedGo is another process's last Go runtime stats and when they arrived.
type reportedGo struct {
	stats ipc.GoStats
	at    time.Time
}

// entry is one in-flight request: its stream, its rank, and its detokenizer when the worker
// detokenizes. Set by Submit before the request is sent, read-only after.
type entry struct {
	st   *api.Stream
	rank int
	// text is this worker's own detokenizer under ModeSkipDetokenization; nil otherwise.
	text *detok.Stream
	// delivered counts the ids pushed to st: every output item's completion count must equal
	// it plus the item's own ids, or output was lost on the way (a gap).
	delivered int
	// detokenized: detokd decodes this request's text (not NoText, not skip-detokenization),
	// so a detokd restart after its first ids dooms it (see detokdRestarted).
	detokenized bool
	// gone is set, under Worker.mu, when the entry leaves reqs (so a cached pointer to it in
	// the receive loop's frameBuffers.last is known stale).
	gone bool
	// sent is set once Submit has handed the request to its rank's socket. A hold query after
	// a detokd restart asks only about those: the socket keeps its order, so the rank reads
	// the request before the query.
	sent atomic.Bool
	// queried says a hold query asked the rank about this request (receive loop only): a
	// finishing error item without ids or count is then the rank's answer that it no longer
	// holds it.
	queried bool
}

// New opens the worker's sockets: its output socket (bound) and one request socket per rank.
func New(cfg Config) (*Worker, error) {
	if cfg.DPSize < 1 || cfg.NumWorkers < 1 || cfg.Index < 0 || cfg.Index >= cfg.NumWorkers {
		return nil, fmt.Errorf("worker %d of %d with %d ranks: bad configuration", cfg.Index, cfg.NumWorkers, cfg.DPSize)
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = 65536
	}
	if cfg.RankTimeout <= 0 {
		cfg.RankTimeout = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.GrammarTimeout <= 0 {
		cfg.GrammarTimeout = DefaultGrammarTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	// A rank takes no requests until it first reports: it may still be loading its model, and a
	// request sent now would sit unanswered (clients get 503 + Retry-After instead).
	// The receive loop checks liveness every checkEvery; a longer gap is this worker's own
	// stall, not the ranks' silence (WithWatchGap).
	opts := []shard.Option{shard.WithWorkers(cfg.NumWorkers), shard.WithStaleAfter(cfg.RankTimeout), shard.WithAwaitFirstReport(),
		shard.WithWatchGap(3 * checkEvery), shard.WithClock(cfg.Clock)}
	if cfg.Ledger != nil {
		opts = append(opts, shard.WithLedger(cfg.Ledger))
	}
	disp, err := shard.NewDispatcher(cfg.DPSize, cfg.Method, cfg.Index, opts...)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, disp: disp, log: cfg.Log, start: time.Now(),
		reqs: map[string]*entry{}, closed: make(chan struct{}), epoch: rand.Uint64(),
		compileSlots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
	w.framePool.New = func() any { b := make([]byte, 0, 4096); return &b }
	if cfg.Topology == nil {
		cfg.Topology = ipc.LocalTopology(cfg.RunDir)
	}
	top := cfg.Topology
	w.pull, err = cfg.Transport.Pull(top.Worker(cfg.Index, true), true, top.Options(ipc.WithRecvHWM(100000))...)
	if err != nil {
		return nil, fmt.Errorf("worker %d: bind output socket: %w", cfg.Index, err)
	}
	for r := 0; r < cfg.DPSize; r++ {
		s, err := cfg.Transport.Push(top.Scheduler(r, false), false,
			top.Options(ipc.WithSendHWM(100000), ipc.WithSendTimeout(500*time.Millisecond))...)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("worker %d: connect to rank %d: %w", cfg.Index, r, err)
		}
		w.push = append(w.push, s)
	}
	// Whatever a previous process of this worker left at the ranks (it crashed, and the
	// supervisor started this one) has nobody waiting for it: abort it all, ahead of any
	// request of ours on each socket, and whatever of it arrives later (other epochs).
	for r := range w.push {
		w.abortAt(r, "", "tokenizer worker restarted")
	}
	w.wg.Add(1)
	go w.receiveLoop()
	return w, nil
}

// Close stops the receive loop and closes the sockets; in-flight requests fail.
func (w *Worker) Close() {
	select {
	case <-w.closed:
		return
	default:
	}
	close(w.closed)
	if w.pull != nil {
		w.pull.Close()
	}
	w.wg.Wait()
	w.failAll(-1, errors.New("worker shutting down")) // aborts them at their ranks, while the sockets are open
	for _, s := range w.push {
		s.Close()
	}
}

// Tokenizer implements api.Engine.
func (w *Worker) Tokenizer() *tokenizer.Tokenizer { return w.cfg.Tokenizer }

// NewRID implements api.Engine.
func (w *Worker) NewRID() string { return shard.NewRID(w.cfg.Index) }

// DefaultGrammarTimeout bounds an up-front grammar compile.
const DefaultGrammarTimeout = 30 * time.Second

// CheckGrammar implements api.Engine.
func (w *Worker) CheckGrammar(kind api.GrammarKind, text string) error {
	return w.CheckGrammarBy(time.Time{}, kind, text)
}

// CheckGrammarBy implements api.GrammarDeadlineChecker: the compile ends by the request's
// deadline (zero: none) and within GrammarTimeout, its work stopped when it returns. It waits
// for a compile slot (compileSlots) until then; a request that gets none is overloaded (503),
// not refused.
func (w *Worker) CheckGrammarBy(by time.Time, kind api.GrammarKind, text string) error {
	spec, err := GrammarSpec(kind, text)
	if err != nil || w.cfg.Grammars == nil || spec.Kind == grammar.KindNone {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.GrammarTimeout)
	defer cancel()
	if !by.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, by)
		defer cancelBy()
	}
	select {
	case w.compileSlots <- struct{}{}:
		defer func() { <-w.compileSlots }()
	case <-ctx.Done():
		return fmt.Errorf("no grammar compile slot free within the request's grammar compile budget (%v): %w", context.Cause(ctx), api.ErrOverloaded)
	}
	_, err = w.cfg.Grammars.CompileWait(ctx, spec)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("too large to compile within the request's grammar compile budget (one deadline for all its constraints): %w", err)
	}
	return err
}

// InFlight is the number of requests this worker owns that have not finished.
func (w *Worker) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reqs)
}

// Submit implements api.Engine: pick a rank, register the stream, send the request.
//
// The request travels under an id of the engine's own (the Stream's RID), unique engine-wide:
// the client's rid is only a label the API echoes, so two clients choosing the same rid share
// nothing, and a duplicate says nothing about what else is in flight.
func (w *Worker) Submit(ctx context.Context, req *api.Request) (*api.Stream, error) {
	if req.RoutedRank >= w.cfg.DPSize {
		return nil, &api.BadRequestError{Param: "routed_dp_rank", Msg: fmt.Sprintf("rank %d does not exist (dp size %d)", req.RoutedRank, w.cfg.DPSize)}
	}
	rid := shard.NewRID(w.cfg.Index)
	msg, err := RequestToWire(req, rid, w.cfg.Index, w.epoch, time.Now())
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	if len(w.reqs) >= w.cfg.MaxRequests {
		w.mu.Unlock()
		return nil, api.ErrOverloaded
	}
	rank, err := w.disp.PickPrompt(req.InputIDs, req.RoutedRank)
	if err != nil {
		w.mu.Unlock()
		return nil, fmt.Errorf("no rank can take the request: %w", err)
	}
	e := &entry{st: api.NewStream(rid), rank: rank}
	e.st.Rank = rank
	if w.cfg.Mode == ModeSkipDetokenization && !req.NoText {
		e.text = detok.NewStream(w.cfg.Tokenizer.NewDecoder(req.SkipSpecialTokens), req.StopStrings)
	}
	e.detokenized = w.cfg.Mode != ModeSkipDetokenization && !req.NoText
	w.reqs[rid] = e
	w.mu.Unlock()

	bp := w.framePool.Get().(*[]byte)
	frame := msg.Append((*bp)[:0])
	err = w.push[rank].Send(frame)
	*bp = frame
	w.framePool.Put(bp)
	if err != nil {
		w.remove(rid)
		if uerr := w.disp.Undo(rank, len(req.InputIDs)); uerr != nil {
			w.log.Error("dispatch ledger", "err", uerr)
		}
		return nil, fmt.Errorf("send to rank %d: %w", rank, err)
	}
	e.sent.Store(true)
	return e.st, nil
}

// Abort implements api.Engine: rid is the RID of the Stream that Submit returned. Tell the
// request's rank to stop it; the rank answers with a finished item (reason abort), which frees
// the entry here.
func (w *Worker) Abort(rid string) {
	w.mu.Lock()
	e, ok := w.reqs[rid]
	w.mu.Unlock()
	if !ok {
		return
	}
	w.abortAt(e.rank, rid, "client disconnected")
}

// abortAt tells rank to stop request rid, which this worker no longer waits for or soon won't.
func (w *Worker) abortAt(rank int, rid, reason string) {
	msg := ipc.Abort{RID: rid, Owner: uint32(w.cfg.Index), OwnerEpoch: w.epoch, Reason: reason}
	if err := w.push[rank].Send(msg.Append(nil)); err != nil {
		w.log.Warn("abort not delivered", "rid", rid, "rank", rank, "err", err)
	}
}

func (w *Worker) remove(rid string) {
	w.mu.Lock()
	if e := w.reqs[rid]; e != nil {
		e.gone = true
	}
	delete(w.reqs, rid)
	w.mu.Unlock()
}

// checkEvery is how often the receive loop checks rank liveness.
const checkEvery = 100 * time.Millisecond

// maxCoalesce bounds how many queued frames one delivery round takes (as detokd's rounds).
const maxCoalesce = 64

// receiveLoop reads output frames until Close, routes them (handle), and checks rank liveness
// between rounds. Each round takes one frame, waiting for it, and the frames already queued
// behind it: the token batches a rank sends straight to this worker (--skip-detokenization)
// are merged per request before delivery (detok.Coalescer), so a rank that runs ahead costs a
// request one detokenization and one stream push per round instead of one per step.
func (w *Worker) receiveLoop() {
	defer w.wg.Done()
	buf := frameBuffers{co: detok.NewCoalescer()}
	lastCheck := time.Now()
	for {
		frame, err := w.pull.Recv(checkEvery)
		if time.Since(lastCheck) >= checkEvery {
			w.checkRanks()
			lastCheck = time.Now()
		}
		if errors.Is(err, ipc.ErrTimeout) {
			continue
		}
		if err != nil {
			return // closed
		}
		for n := 0; ; n++ {
			if err := w.add(&buf, frame); err != nil {
				w.log.Warn("dropped output frame", "err", err)
			}
			if n+1 == maxCoalesce {
				break
			}
			if frame, err = w.pull.Recv(0); err != nil {
				break // nothing more queued (a closed socket is seen by the next Recv)
			}
		}
		w.flush(&buf)
	}
}

// frameBuffers are the receive loop's decode buffers, reused frame after frame.
type frameBuffers struct {
	tb   ipc.TokenBatch // a round's first token batch, delivered from here when it is alone
	more ipc.TokenBatch // the decode buffer of the round's later token batches
	xb   ipc.TextBatch
	// epoch is the detokd epoch (ipc.TextBatch.Epoch) of the last text batch; 0 before any.
	epoch uint64
	// held says tb holds a token batch not yet delivered; merging says the round's token
	// batches are in co instead (tb's among them).
	held, merging bool
	co            *detok.Coalescer // the round's token batches merged per request
	ents          []*entry
	// last holds the live entries of the previous batch's items in order, next the current
	// one's (swapped after it): the batches list their requests in the same order round after
	// round, so lookup finds most entries there, comparing rids, instead of in reqs.
	last, next []ridEntry
	// failed holds the rids of the batch's requests that deliver failed (a gap).
	failed []string
}

// handle routes one output frame: its load reports to the dispatcher, each item to its
// request's stream (items of requests this worker no longer holds are dropped). It touches no
// socket, so tests hand it frames directly.
func (w *Worker) handle(buf *frameBuffers, frame []byte) error {
	if buf.co == nil {
		buf.co = detok.NewCoalescer()
	}
	err := w.add(buf, frame)
	w.flush(buf)
	return err
}

// add routes one frame of a round: a text batch at once (after the token items held before
// it, so a request's outputs keep their order), a token batch's load at once and its items into
// the round's held batch or coalescer (flush delivers them).
func (w *Worker) add(buf *frameBuffers, frame []byte) error {
	typ, err := ipc.PeekType(frame)
	if err != nil {
		return err
	}
	switch typ {
	case ipc.MsgTextBatch:
		w.flush(buf)
		xb := &buf.xb
		if err := xb.Decode(frame); err != nil {
			return err
		}
		if xb.Epoch != buf.epoch {
			if buf.epoch != 0 {
				w.detokdRestarted()
			}
			buf.epoch = xb.Epoch
		}
		for i := range xb.Loads {
			w.report(int(xb.Loads[i].Rank), xb.Loads[i].Seq, &xb.Loads[i].Load)
		}
		w.recordGo(-1, &xb.Detok)
		buf.ents = w.lookup(buf, len(xb.Items), func(i int) *ipc.TokenItem { return &xb.Items[i].TokenItem })
		for i, e := range buf.ents {
			if e != nil {
				if !w.deliver(e, &xb.Items[i].TokenItem, xb.Items[i].Text, true) {
					buf.failed = append(buf.failed, xb.Items[i].RID)
				}
			}
		}
		w.forget(buf)
	case ipc.MsgTokenBatch:
		tb := &buf.tb
		if buf.held {
			tb = &buf.more
		}
		if err := tb.Decode(frame); err != nil {
			return err
		}
		w.report(int(tb.Rank), tb.Seq, &tb.Load)
		switch {
		case !buf.held:
			buf.held = true
		case !buf.merging:
			buf.co.Add(&buf.tb)
			buf.co.Add(tb)
			buf.merging = true
		default:
			buf.co.Add(tb)
		}
	default:
		return fmt.Errorf("unexpected %v on a worker's output socket", typ)
	}
	return nil
}

// flush delivers the token items the round holds: the one batch as it came, or the merged
// items of several.
func (w *Worker) flush(buf *frameBuffers) {
	if !buf.held {
		return
	}
	items := buf.tb.Items
	if buf.merging {
		items = buf.co.Items()
	}
	buf.ents = w.lookup(buf, len(items), func(i int) *ipc.TokenItem { return &items[i] })
	for i, e := range buf.ents {
		if e != nil {
			if !w.deliver(e, &items[i], "", false) {
				buf.failed = append(buf.failed, items[i].RID)
			}
		}
	}
	w.forget(buf)
	buf.co.Reset()
	buf.held, buf.merging = false, false
}

// report hands a rank's load report to the dispatcher, which also judges from it that the
// rank is alive.
func (w *Worker) report(rank int, seq uint64, l *ipc.Load) {
	res, err := w.disp.Report(rank, loadFromWire(seq, l, w.cfg.Index))
	if err != nil {
		w.log.Warn("dropped load report", "rank", rank, "err", err)
		return
	}
	w.recordGo(rank, &l.Go)
	if res == shard.ReportCameUp {
		w.log.Info("rank is up", "rank", rank)
	}
}

// recordGo keeps the Go runtime stats rank (detokd when rank < 0) reported, for /metrics.
func (w *Worker) recordGo(rank int, g *ipc.GoStats) {
	if g.GoVersion == "" {
		return // none sent
	}
	now := w.cfg.Clock()
	w.goMu.Lock()
	defer w.goMu.Unlock()
	if rank < 0 {
		w.detokGo = reportedGo{*g, now}
		return
	}
	for len(w.rankGo) <= rank {
		w.rankGo = append(w.rankGo, reportedGo{})
	}
	w.rankGo[rank] = reportedGo{*g, now}
}

// GoRuntime returns the Go runtime stats that rank (detokd when rank < 0) last reported, and
// false when it has reported none within RankTimeout (it is down, or not part of the engine).
func (w *Worker) GoRuntime(rank int) (metrics.GoRuntime, bool) {
	w.goMu.Lock()
	defer w.goMu.Unlock()
	r := w.detokGo
	if rank >= 0 {
		if rank >= len(w.rankGo) {
			return metrics.GoRuntime{}, false
		}
		r = w.rankGo[rank]
	}
	if r.stats.GoVersion == "" || w.cfg.Clock().Sub(r.at) > w.cfg.RankTimeout {
		return metrics.GoRuntime{}, false
	}
	return metrics.GoRuntime(r.stats), true
}

// ridEntry is one request's entry, by rid.
type ridEntry struct {
	rid string
	e   *entry
}

// lookAheadSpan is how many entries of the previous batch past its cursor lookup compares
// before it looks a rid up in reqs.
const lookAheadSpan = 8

// lookup finds the entries of a batch's n items under one lock (nil for requests already gone),
// and forgets the ones that finish. It returns buf.ents, refilled.
func (w *Worker) lookup(buf *frameBuffers, n int, item func(i int) *ipc.TokenItem) []*entry {
	dst, last, next := buf.ents[:0], buf.last, buf.next[:0]
	j := 0 // where in last the next item's entry is looked for first
	w.mu.Lock()
	for i := range n {
		it := item(i)
		var e *entry
		for k := j; k < len(last) && k < j+lookAheadSpan; k++ {
			if l := &last[k]; l.rid == it.RID && !l.e.gone {
				e, j = l.e, k+1
				break
			}
		}
		if e == nil {
			e = w.reqs[it.RID]
		}
		if e != nil && it.Finished {
			e.gone = true
			delete(w.reqs, it.RID)
		}
		if e != nil && !e.gone {
			next = append(next, ridEntry{it.RID, e})
		}
		dst = append(dst, e)
	}
	w.mu.Unlock()
	buf.last, buf.next = next, last
	return dst
}

// deliver turns one output item into a Delta on its request's stream. The stream copies what it
// keeps, so the delta points into the decoded batch.
//
// An item whose completion count is not what was delivered plus its own ids follows a gap: some
// output of the request was lost on the way (with a detokd that died holding it). Its ids are
// not delivered (the client's ids would have a hole); the stream fails with what it got, and
// the rank stops the request. A failed item (detokd's lost state included) is aborted at the
// rank too: the rank may not know it ended. It reports false when it failed the request, which
// the caller then forgets.
func (w *Worker) deliver(e *entry, it *ipc.TokenItem, text string, hasText bool) bool {
	if e.queried && e.delivered > 0 && it.Finished && it.FinishReason == ipc.FinishError && it.CompletionTokens == 0 && len(it.NewIDs) == 0 {
		// The rank's answer to a hold query: it finished the request, and the finish was lost.
		err := fmt.Errorf("%s (after the %d token ids delivered)", it.Error, e.delivered)
		w.log.Error("request failed", "rid", it.RID, "err", err)
		e.st.Push(&api.Delta{Finished: true, FinishReason: api.FinishError, Err: err})
		return false
	}
	if want := e.delivered + len(it.NewIDs); int(it.CompletionTokens) != want {
		lost := int(it.CompletionTokens) - want
		err := fmt.Errorf("output lost on the way from rank %d: %d token ids missing after the %d delivered (detokd restarted?)", e.rank, lost, e.delivered)
		if lost < 0 {
			err = fmt.Errorf("output from rank %d out of sequence: %d ids reported after %d delivered", e.rank, it.CompletionTokens, e.delivered)
		}
		w.log.Error("request failed", "rid", it.RID, "err", err)
		e.st.Push(&api.Delta{Finished: true, FinishReason: api.FinishError, Err: err})
		w.abortAt(e.rank, it.RID, "the worker gave up on it: "+err.Error())
		return false
	}
	d := DeltaFromWire(it, text)
	if e.text != nil && !hasText {
		d.Text, _, _ = e.text.Push(it.NewIDs, it.Finished)
	}
	e.delivered += len(it.NewIDs)
	e.st.Push(&d)
	if it.FinishReason == ipc.FinishError {
		w.abortAt(e.rank, it.RID, "it failed: "+it.Error)
	}
	return true
}

// detokdRestarted fails the requests detokd had begun to stream when a text batch comes from a
// new detokd. The new one holds none of their decoding state, so it would fail each at its
// next item anyway (detok's lostState); but a request whose last items, its finishing item
// among them, died with the old detokd has no next item, and its stream would wait forever.
// The others (no ids yet, or ids only) go on: their next item carries what detokd needs, and
// one that follows lost output fails at the gap check. Whether one of them lost its finishing
// item only its rank can say: each rank is asked about them (queryHeld).
func (w *Worker) detokdRestarted() {
	failed := w.take(func(e *entry) bool { return e.detokenized && e.delivered > 0 })
	if len(failed) > 0 {
		w.log.Error("detokd restarted: failing the requests it was streaming", "requests", len(failed))
	}
	for _, e := range failed {
		err := fmt.Errorf("detokd restarted and lost this request's decoding state, and maybe its output after the %d token ids delivered", e.delivered)
		e.st.Push(&api.Delta{Finished: true, FinishReason: api.FinishError, Err: err})
		w.abortAt(e.rank, e.st.RID, "the worker gave up on it: "+err.Error())
	}
	w.queryHeld()
}

// queryHeld sends each rank a hold query for this worker's requests there that it has sent:
// the rank answers with a finishing error item for each it no longer holds (ipc.HoldQuery).
func (w *Worker) queryHeld() {
	byRank := make([][]string, len(w.push))
	w.mu.Lock()
	for rid, e := range w.reqs {
		if e.sent.Load() {
			e.queried = true
			byRank[e.rank] = append(byRank[e.rank], rid)
		}
	}
	w.mu.Unlock()
	for rank, rids := range byRank {
		if len(rids) == 0 {
			continue
		}
		q := ipc.HoldQuery{Owner: uint32(w.cfg.Index), RIDs: rids}
		if err := w.push[rank].Send(q.Append(nil)); err != nil {
			w.log.Warn("hold query not delivered", "rank", rank, "requests", len(rids), "err", err)
		}
	}
}

// forget removes the requests that deliver failed in the last batch (buf.failed).
func (w *Worker) forget(buf *frameBuffers) {
	if len(buf.failed) == 0 {
		return
	}
	w.mu.Lock()
	for _, rid := range buf.failed {
		if e := w.reqs[rid]; e != nil {
			e.gone = true
		}
		delete(w.reqs, rid)
	}
	w.mu.Unlock()
	buf.failed = buf.failed[:0]
}

// checkRanks fails the in-flight requests of every rank the dispatcher finds silent.
func (w *Worker) checkRanks() {
	for _, r := range w.disp.Expire(w.cfg.Clock()) {
		reason := fmt.Sprintf("no output or heartbeat from rank %d for %v (schedulerd%s stopped?)", r, w.cfg.RankTimeout, w.detokHint())
		w.log.Error("rank is down", "rank", r, "reason", reason)
		w.failAll(r, errors.New(reason))
	}
}

func (w *Worker) detokHint() string {
	if w.cfg.Mode == ModeDefault {
		return " or detokd"
	}
	return ""
}

// failAll ends every in-flight request on rank (all ranks when rank < 0) with err. The tokens
// already delivered stay delivered; the error event follows them.
func (w *Worker) failAll(rank int, err error) {
	for _, e := range w.take(func(e *entry) bool { return rank < 0 || e.rank == rank }) {
		e.st.Push(&api.Delta{Finished: true, FinishReason: api.FinishError, Err: err})
		// The rank may well be alive (detokd, which relays its reports, may be what failed):
		// stop it from decoding a request nobody waits for.
		w.abortAt(e.rank, e.st.RID, "the worker gave up on it: "+err.Error())
	}
}

// take removes the in-flight requests that match from the table and returns them.
func (w *Worker) take(match func(*entry) bool) []*entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	var taken []*entry
	for rid, e := range w.reqs {
		if match(e) {
			taken = append(taken, e)
			e.gone = true
			delete(w.reqs, rid)
		}
	}
	return taken
}

// Health implements api.Engine: every rank must be reporting.
func (w *Worker) Health() error {
	var errs []error
	for _, m := range w.missingRanks(w.disp.Snapshot()) {
		errs = append(errs, errors.New(m))
	}
	return errors.Join(errs...)
}

// missingRanks names each rank of s that has not reported or is down, with the address this
// worker sends it requests at (so an operator sees which host to look at) and why.
func (w *Worker) missingRanks(s shard.Snapshot) []string {
	top := w.cfg.Topology
	if top == nil {
		top = ipc.LocalTopology(w.cfg.RunDir)
	}
	var out []string
	for _, r := range s.Ranks {
		at := " (at " + top.Scheduler(r.Rank, false) + ")"
		switch {
		case !r.HasReport:
			out = append(out, fmt.Sprintf("rank %d has not reported yet%s", r.Rank, at))
		case !r.Up:
			out = append(out, fmt.Sprintf("rank %d is down%s: %s", r.Rank, at, r.DownReason))
		}
	}
	return out
}

// Ready reports whether every rank has reported since this worker started and is up.
func (w *Worker) Ready() bool { return w.Health() == nil }

// LoadReport is what /get_load shows (api.LoadReport).
type LoadReport = api.LoadReport

// Load implements api.Engine.
func (w *Worker) Load() api.LoadReport {
	rep := LoadReport{Worker: w.cfg.Index, InFlight: w.InFlight(), Dispatch: w.disp.Snapshot()}
	rep.MissingRanks = w.missingRanks(rep.Dispatch)
	for _, r := range rep.Dispatch.Ranks {
		if !r.Up {
			continue // its requests were failed; its last report is history
		}
		rep.Totals.Running += r.Reported.Running
		rep.Totals.Waiting += r.Reported.Waiting
		rep.Totals.KVTokensUsed += r.Reported.KVTokensUsed
		rep.Totals.KVTokensCapacity += r.Reported.KVTokensCapacity
	}
	return rep
}

// Snapshot is the dispatcher's view of every rank.
func (w *Worker) Snapshot() shard.Snapshot { return w.disp.Snapshot() }
