// Package scheduler is the step function of one device: it queues requests, builds each
// forward batch (decodes first, then chunked prefills within a token budget), manages the paged
// KV cache (block tables, reference counts, prefix reuse, preemption), applies grammar masks,
// samples, checks stop conditions and returns each step's token-id deltas. It takes inputs and
// returns outputs — no sockets, no tokenizer — so tests drive it directly.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/sampling"
)

// Config sizes one device's scheduler.
type Config struct {
	// MaxRunning bounds the requests admitted (holding KV blocks) at once.
	MaxRunning int
	// MaxPrefillTokens bounds the tokens of one step (--max-prefill-tokens). Decodes of running
	// requests come first, one token each, and are never starved (so a step carries at least one
	// token per decoding request); prefill chunks share what is left.
	MaxPrefillTokens int
	// ChunkSize bounds the prefill chunk of one request in one step; 0 means MaxPrefillTokens.
	ChunkSize int
	// EOS are the model's end-of-sequence ids.
	EOS []int32
	// MaxModelLen is the context length: prompt plus generated tokens.
	MaxModelLen int
	// Rank is this device's data-parallel rank, named in errors.
	Rank int
	// Policy is the queue order (--scheduling-policy): PolicyFCFS ("" too) or PolicyPriority.
	Policy string
	// KVEvents makes every Output carry the prefix cache's changes (Output.KVEvents).
	KVEvents bool
	// KVHashSeed seeds the events' block hashes as PYTHONHASHSEED seeds vLLM's
	// (DefaultKVHashSeed when empty); ranks whose blocks an indexer compares must share it.
	KVHashSeed string
	// Speculative is SpeculativeNgram to verify drafts from prompt lookup and grammar
	// jump-forward in each decode's forward pass; SpeculativeOff ("" too) decodes one token per
	// step. It needs a backend that returns every position's logits (backend.Seq.AllLogits).
	Speculative string
	// MaxDraft bounds one request's draft per step, in [1, MaxDraftLimit]; 0 means
	// DefaultMaxDraft.
	MaxDraft int
}

// Scheduling policies (Config.Policy).
const (
	// PolicyFCFS serves requests in the order of Add; a preempted one goes back to the front.
	PolicyFCFS = "fcfs"
	// PolicyPriority serves the lowest Request.Priority first (ties in the order of Add), keeps
	// the running batch in that order, preempts its worst request first, and preempts running
	// requests of a worse priority when the best waiting one finds no KV blocks or slot.
	PolicyPriority = "priority"
)

// liveRequest is the scheduler's state of one request from Add to its finish.
type liveRequest struct {
	req *Request
	// tokens are the prompt followed by every generated token; KV is computed for the first
	// computed of them, in the blocks of blocks. hashes[i] identifies full block i (prefix
	// chain); len(hashes) == computed / block size.
	tokens    []int32
	promptLen int
	computed  int
	blocks    []int32
	hashes    []uint64
	running   bool
	done      bool // finished or aborted
	admitted  bool // has been admitted at least once (cached is then fixed)
	cached    int
	sampler   *sampling.Sampler
	mutates   bool // sampling edits the row (penalties), so it samples from a copy
	mask      []uint64
	maskErr   error
	// spec is how this step samples (fillSpec), ban its banned ids and scratch the host
	// sampler's buffers, all reused step to step.
	spec    backend.SampleSpec
	ban     []int32
	scratch sampling.Scratch
	pick    pick // this step's sample
	prompt  promptScores
	// received, scheduled and firstToken are when the request reached the rank, was first
	// admitted and generated its first token (zero until then): its finish item's times.
	received, scheduled, firstToken time.Time
	preemptions                     int // times evicted from the batch
	// spec counts the request's speculative verifications for its finish item.
	specCount specCounts
	seq       uint64 // order of Add, the tie-break of equal priorities
	// embed is an embedding request's pooled vector as it accumulates (HiddenSize floats), and
	// hiddenRows its scratch for a chunk's hidden states.
	embed, hiddenRows []float32
	// verify is this step's speculative chunk, [last token, drafts...], when it has drafts;
	// ngramDrafted says how many of them came from prompt lookup, forced whether they came
	// from the grammar (jump-forward); ctl sizes the prompt-lookup drafts, fctl the grammar's. vTopIDs and vTopLps hold the top logprobs of the
	// tokens a verification emits, valid until the next Step.
	verify       []int32
	ngramDrafted int
	forced       bool
	ctl, fctl    draftCtl
	vTopIDs      []int32
	vTopLps      []float32
}

func (s *liveRequest) generated() int { return len(s.tokens) - s.promptLen }

// Scheduler is one device's continuous-batching loop state. It is not safe for concurrent use:
// Add, Abort, Step, FailAll and Load run on one goroutine (the rank's loop).
type Scheduler struct {
	b      backend.Backend
	argmax backend.DeviceArgmax // b's, when it takes greedy picks itself
	// dev is b's, when it samples on the device: Step then never reads a row it does not need.
	dev       backend.DeviceSampler
	hidden    backend.HiddenStates // b's, when it can return hidden states (embeddings)
	cfg       Config
	vocab     int
	bs        int
	chunk     int
	watermark int
	pool      *blockPool
	// parallelFloats is the logits a step must scan per sampling worker (a field so tests can
	// force either path).
	parallelFloats int
	// priorities is waitingByPriority's scratch: the waiting requests' priority values
	priorities []int

	byRID   map[string]*liveRequest
	waiting []*liveRequest // front first; preempted requests go back to the front
	running []*liveRequest // in admission order: the oldest has priority for KV blocks
	pending []Item         // finishes decided between steps (aborts, MaxNewTokens 0)

	// Reused per step.
	batch   backend.Batch
	inBatch []*liveRequest
	items   []Item
	ids     []int32
	lps     []float32
	picks   []pickJob
	specs   []backend.SampleSpec // this step's, for a DeviceSampler (one per batch entry)
	// rowsCopy is this step's logits-row table when prompt logprobs replace entries (ownRows).
	rowsCopy [][]float32
	wg       sync.WaitGroup

	stats Stats
	// cost is the measured step time by tokens, which sizes the drafts (Config.Speculative).
	cost stepCost
	// seq numbers the requests in the order of Add.
	seq uint64
	// now is the clock of the request times (time.Now; tests may replace it).
	now func() time.Time
}

// New returns a scheduler for the device behind b.
func New(b backend.Backend, cfg Config) (*Scheduler, error) {
	if b == nil {
		return nil, errors.New("scheduler: nil backend")
	}
	if cfg.Policy != "" && cfg.Policy != PolicyFCFS && cfg.Policy != PolicyPriority {
		return nil, fmt.Errorf("scheduler rank %d: unknown scheduling policy %q (fcfs or priority)", cfg.Rank, cfg.Policy)
	}
	if cfg.MaxRunning <= 0 || cfg.MaxPrefillTokens <= 0 || cfg.ChunkSize < 0 || cfg.MaxModelLen <= 0 {
		return nil, fmt.Errorf("scheduler rank %d: MaxRunning, MaxPrefillTokens and MaxModelLen must be > 0 and ChunkSize >= 0, got %d, %d, %d, %d",
			cfg.Rank, cfg.MaxRunning, cfg.MaxPrefillTokens, cfg.MaxModelLen, cfg.ChunkSize)
	}
	switch cfg.Speculative {
	case "", SpeculativeOff, SpeculativeNgram:
	default:
		return nil, fmt.Errorf("scheduler rank %d: unknown speculative mode %q (ngram or off)", cfg.Rank, cfg.Speculative)
	}
	if cfg.MaxDraft == 0 {
		cfg.MaxDraft = DefaultMaxDraft
	}
	if cfg.MaxDraft < 1 || cfg.MaxDraft > MaxDraftLimit {
		return nil, fmt.Errorf("scheduler rank %d: MaxDraft %d outside [1, %d]", cfg.Rank, cfg.MaxDraft, MaxDraftLimit)
	}
	vocab, bs, nb := b.VocabSize(), b.BlockSize(), b.NumBlocks()
	if vocab <= 0 || bs <= 0 || nb <= 0 || nb > math.MaxInt32 {
		return nil, fmt.Errorf("scheduler rank %d: backend reports vocab %d, block size %d, %d blocks", cfg.Rank, vocab, bs, nb)
	}
	chunk := cfg.ChunkSize
	if chunk == 0 || chunk > cfg.MaxPrefillTokens {
		chunk = cfg.MaxPrefillTokens
	}
	cfg.EOS = slices.Clone(cfg.EOS)
	argmax, _ := b.(backend.DeviceArgmax)
	dev, _ := b.(backend.DeviceSampler)
	hidden, _ := b.(backend.HiddenStates)
	pool := newBlockPool(nb, bs)
	if cfg.KVEvents {
		pool.enableEvents(cfg.KVHashSeed)
	}
	return &Scheduler{
		b: b, argmax: argmax, dev: dev, hidden: hidden, cfg: cfg, vocab: vocab, bs: bs, chunk: chunk,
		// Keep ~1% of the cache free when admitting next to running requests, so their decodes
		// can grow without preempting what was just admitted.
		watermark:      max(1, nb/100),
		pool:           pool,
		parallelFloats: parallelSampleFloats,
		byRID:          make(map[string]*liveRequest),
		now:            time.Now,
	}, nil
}

// Add validates req and queues it. A request with MaxNewTokens 0 finishes (FinishLength, no
// tokens) in the next Step's output.
func (s *Scheduler) Add(req *Request) error {
	if err := s.validate(req); err != nil {
		if req != nil {
			return fmt.Errorf("request %q: %w", req.RID, err)
		}
		return err
	}
	st := &liveRequest{
		req: req,
		// Room for typical outputs without regrowth, but not a context's worth per request when
		// max_new_tokens defaults to the whole context.
		tokens:    make([]int32, len(req.InputIDs), len(req.InputIDs)+min(req.MaxNewTokens, 512)),
		promptLen: len(req.InputIDs),
		received:  req.Received,
	}
	if st.received.IsZero() {
		st.received = s.now()
	}
	copy(st.tokens, req.InputIDs)
	if req.Pooling != PoolingNone {
		st.embed = make([]float32, s.hidden.HiddenSize())
	} else {
		if req.MaxNewTokens == 0 {
			s.pending = append(s.pending, s.item(st, FinishLength))
			return nil
		}
		p := req.Sampling
		st.sampler = sampling.New(p, req.InputIDs)
		st.mutates = p.RepetitionPenalty != 1 || p.FrequencyPenalty != 0 || p.PresencePenalty != 0 || len(p.LogitBias) > 0
		if req.Constraint != nil {
			st.mask = make([]uint64, (s.vocab+63)/64)
		}
	}
	s.byRID[req.RID] = st
	s.seq++
	st.seq = s.seq
	if s.cfg.Policy == PolicyPriority {
		s.waiting = insertOrdered(s.waiting, st)
	} else {
		s.waiting = append(s.waiting, st)
	}
	return nil
}

// validate refuses a request the scheduler cannot run. The request's own faults are marked
// invalid (a 400 for its client); a missing or duplicate id is the engine's (ids are its own).
func (s *Scheduler) validate(req *Request) error {
	if req == nil {
		return errors.New("nil request")
	}
	if req.RID == "" {
		return errors.New("empty request id")
	}
	if _, dup := s.byRID[req.RID]; dup {
		return errors.New("a request with this id is already running")
	}
	if len(req.InputIDs) == 0 {
		return invalid(errors.New("empty prompt"))
	}
	for i, id := range req.InputIDs {
		if id < 0 || int(id) >= s.vocab {
			return invalid(fmt.Errorf("prompt token %d is %d, outside the vocabulary [0, %d)", i, id, s.vocab))
		}
	}
	if req.Pooling != PoolingNone {
		return s.validateEmbed(req)
	}
	if req.MaxNewTokens < 0 || req.MinNewTokens < 0 {
		return invalid(fmt.Errorf("max_new_tokens (%d) and min_new_tokens (%d) must be >= 0", req.MaxNewTokens, req.MinNewTokens))
	}
	if req.MinNewTokens > req.MaxNewTokens {
		return invalid(fmt.Errorf("min_new_tokens (%d) exceeds max_new_tokens (%d)", req.MinNewTokens, req.MaxNewTokens))
	}
	if total := len(req.InputIDs) + req.MaxNewTokens; total > s.cfg.MaxModelLen {
		return invalid(fmt.Errorf("prompt (%d tokens) + max_new_tokens (%d) = %d exceeds the context length %d",
			len(req.InputIDs), req.MaxNewTokens, total, s.cfg.MaxModelLen))
	}
	// The last generated token's KV is never computed, so the request needs blocks for
	// prompt + max_new_tokens - 1 positions; a request that alone exceeds the pool could never
	// finish, and one that fits is always able to (it preempts everything newer).
	if need := s.blocksFor(len(req.InputIDs) + req.MaxNewTokens - 1); need > s.pool.numBlocks() {
		return invalid(fmt.Errorf("prompt (%d tokens) + max_new_tokens (%d) needs %d KV blocks, more than the cache's %d",
			len(req.InputIDs), req.MaxNewTokens, need, s.pool.numBlocks()))
	}
	if err := req.Sampling.Validate(); err != nil {
		return invalid(fmt.Errorf("sampling: %w", err))
	}
	return nil
}

// Abort removes a live request and frees its KV blocks now; its finish (FinishAbort) is in the
// next Step's output. It reports whether the request was live.
func (s *Scheduler) Abort(rid string) bool {
	st, ok := s.byRID[rid]
	if !ok {
		return false
	}
	if st.running {
		s.running = slices.DeleteFunc(s.running, func(x *liveRequest) bool { return x == st })
	} else {
		s.waiting = slices.DeleteFunc(s.waiting, func(x *liveRequest) bool { return x == st })
	}
	s.finish(st)
	s.pending = append(s.pending, s.item(st, FinishAbort))
	return true
}

// FailAll finishes every live request with FinishError and err, frees their KV blocks, and
// returns their items after any finishes still pending. The binary calls it when Step fails.
func (s *Scheduler) FailAll(err error) Output {
	msg := "scheduler failed"
	if err != nil {
		msg = err.Error()
	}
	items := append(s.items[:0], s.pending...)
	s.pending = s.pending[:0]
	for _, q := range [][]*liveRequest{s.running, s.waiting} {
		for _, st := range q {
			s.finish(st)
			it := s.item(st, FinishError)
			it.Err = msg
			items = append(items, it)
		}
	}
	s.running, s.waiting = s.running[:0], s.waiting[:0]
	s.items = items
	return Output{Items: items, Load: s.Load(), KVEvents: s.pool.takeEvents()}
}

// HasWork reports whether Step has anything to do: a batch to run or a finish to report.
// Requests whose constraint is not Ready do not count; the caller polls at its idle interval.
func (s *Scheduler) HasWork() bool {
	if len(s.running) > 0 || len(s.pending) > 0 {
		return true
	}
	for _, st := range s.waiting {
		if st.req.Ready == nil || st.req.Ready() {
			return true
		}
	}
	return false
}

// Load returns the current load.
func (s *Scheduler) Load() Load {
	l := Load{
		Running: len(s.running), Waiting: len(s.waiting),
		KVTokensUsed:     s.pool.inUse() * s.bs,
		KVTokensCapacity: s.pool.numBlocks() * s.bs,
		KVBlockSize:      s.bs,
		Stats:            s.stats,
	}
	for _, st := range s.waiting {
		l.WaitingTokens += len(st.tokens) - st.computed
	}
	if len(s.waiting) > 0 {
		l.WaitingByPriority, l.WaitingOtherPriority = s.waitingByPriority()
	}
	return l
}

// KVCachedBlocks maps the external hash (see KVBlockHash) of every block the prefix cache holds
// to its token ids; nil unless Config.KVEvents. It is what the KV events published so far add
// up to, for tests and debugging.
func (s *Scheduler) KVCachedBlocks() map[uint64][]int32 { return s.pool.cachedBlocks() }

// Stats returns the event counters.
func (s *Scheduler) Stats() Stats { return s.stats }

// Step runs one scheduling step: it builds a batch, runs the forward pass (while constrained
// requests compute their masks), samples a token for every request whose prompt is complete,
// applies the stop conditions and frees the KV of finished requests. If Forward fails, Step
// returns the error having generated no token and finished no request; the caller may retry or
// call FailAll.
func (s *Scheduler) Step(ctx context.Context) (Output, error) {
	s.schedule()
	// A step of generated tokens only (decodes, drafts) is timed for the step-cost model.
	timed := s.cfg.Speculative == SpeculativeNgram && len(s.batch.Seqs) > 0
	tokens := 0
	for i := range s.batch.Seqs {
		sq := &s.batch.Seqs[i]
		timed = timed && sq.Generated
		tokens += len(sq.Tokens)
	}
	var start time.Time
	if timed {
		start = time.Now()
	}
	var rows [][]float32
	var picks []backend.Pick
	if len(s.batch.Seqs) > 0 {
		// The masks for the tokens sampled after this forward depend only on what was accepted
		// before it, so they are computed while the device runs.
		for k, st := range s.inBatch {
			if s.batch.Seqs[k].Logits && st.req.Constraint != nil {
				s.wg.Add(1)
				go s.fillMask(st)
			}
		}
		var err error
		if s.dev != nil {
			picks, rows, err = s.forwardSample(ctx)
		} else {
			rows, err = s.b.Forward(ctx, &s.batch)
			s.wg.Wait()
		}
		if err != nil {
			return Output{Load: s.Load()}, fmt.Errorf("scheduler rank %d: forward of %d sequences: %w", s.cfg.Rank, len(s.batch.Seqs), err)
		}
		if s.dev != nil && len(picks) != len(s.batch.Seqs) {
			return Output{Load: s.Load()}, fmt.Errorf("scheduler rank %d: backend returned %d picks for %d sequences",
				s.cfg.Rank, len(picks), len(s.batch.Seqs))
		}
		if s.dev != nil && rows == nil {
			rows = make([][]float32, 0) // no Seq asked for host rows
		} else if len(rows) != len(s.batch.Seqs) {
			return Output{Load: s.Load()}, fmt.Errorf("scheduler rank %d: backend returned %d logits rows for %d sequences",
				s.cfg.Rank, len(rows), len(s.batch.Seqs))
		}
		s.stats.Steps++
	}
	items := append(s.items[:0], s.pending...)
	s.pending = s.pending[:0]
	// One token per batch entry at most, or one per row of a speculative chunk: sized up front,
	// these never move, so the items can point into them.
	most := len(s.inBatch)
	for k, st := range s.inBatch {
		if len(st.verify) > 0 {
			most += len(s.batch.Seqs[k].Tokens) - 1
		}
	}
	if cap(s.ids) < most {
		s.ids, s.lps = make([]int32, 0, most), make([]float32, 0, most)
	}
	ids, lps := s.ids[:0], s.lps[:0]
	for k, st := range s.inBatch {
		if sq := &s.batch.Seqs[k]; sq.AllLogits && len(st.verify) == 0 {
			if k >= len(rows) || len(rows[k]) != len(sq.Tokens)*s.vocab {
				return Output{Load: s.Load()}, fmt.Errorf("scheduler rank %d: backend returned %d logits for a chunk of %d tokens", s.cfg.Rank, len(rows[k]), len(sq.Tokens))
			}
			last := s.scorePrompt(st, sq.Pos, len(sq.Tokens), rows[k])
			if sq.Logits && s.dev == nil {
				rows = s.ownRows(rows)
				rows[k] = last
			}
		}
	}
	if s.dev != nil {
		for k, st := range s.inBatch {
			if s.batch.Seqs[k].Logits && len(st.verify) == 0 {
				s.takePick(st, &picks[k])
			}
		}
	} else {
		s.sampleAll(rows)
	}
	finished := false
	for k, st := range s.inBatch {
		n := len(s.batch.Seqs[k].Tokens)
		s.stats.BatchTokens += n
		if len(st.verify) > 0 {
			if k >= len(rows) || len(rows[k]) != n*s.vocab {
				return Output{Load: s.Load()}, fmt.Errorf("scheduler rank %d: backend returned %d logits for a speculative chunk of %d tokens", s.cfg.Rank, len(rows[k]), n)
			}
			var it Item
			var done bool
			var valid int
			it, done, valid, ids, lps = s.verifyDrafts(st, k, rows[k], ids, lps)
			if done {
				s.finish(st)
				finished = true
			} else {
				st.computed += valid
				s.registerFull(st)
				s.trimDraftBlocks(st)
			}
			items = append(items, it)
			continue
		}
		st.computed += n
		s.registerFull(st)
		if st.req.Pooling != PoolingNone {
			if it, done := s.poolChunk(st, k, &s.batch.Seqs[k]); done {
				items = append(items, it)
				s.finish(st)
				finished = true
			}
			continue
		}
		if !s.batch.Seqs[k].Logits {
			continue
		}
		it, done := s.record(st)
		st.attachPrompt(&it)
		if st.pick.tok >= 0 {
			ids = append(ids, st.pick.tok)
			it.NewIDs = ids[len(ids)-1 : len(ids) : len(ids)] // capped: an append must not reach the next item's id
			if st.req.Logprobs {
				lps = append(lps, st.pick.logprob)
				it.Logprobs = lps[len(lps)-1 : len(lps) : len(lps)]
			}
			if st.req.TopLogprobs > 0 {
				// The seq's own buffers, rewritten at its next sample: valid until the next Step.
				it.TopLogprobIDs, it.TopLogprobs = st.pick.topIDs, st.pick.topLogprobs
			}
		}
		if done {
			s.finish(st)
			finished = true
		}
		items = append(items, it)
	}
	if finished {
		s.running = slices.DeleteFunc(s.running, func(x *liveRequest) bool { return x.done })
	}
	if timed {
		s.cost.add(tokens, time.Since(start).Seconds())
	}
	s.items, s.ids, s.lps = items, ids, lps
	return Output{Items: items, Load: s.Load(), KVEvents: s.pool.takeEvents()}, nil
}

// forwardSample runs the step on a DeviceSampler: every sampling request's spec, the forward,
// the device's picks. The masks callback waits for fillMask and finishes the masks; it runs at
// most once, and Step's own call covers a backend that failed before calling it.
func (s *Scheduler) forwardSample(ctx context.Context) ([]backend.Pick, [][]float32, error) {
	specs := s.specs[:0]
	for k, st := range s.inBatch {
		specs = append(specs, backend.SampleSpec{})
		// A speculative chunk's rows are sampled on the host, one after another (spec.go).
		if s.batch.Seqs[k].Logits && len(st.verify) == 0 {
			s.fillSpec(st, &specs[k])
		}
	}
	s.specs = specs
	waited := false
	masks := func() {
		if waited {
			return
		}
		waited = true
		s.wg.Wait()
		for k, st := range s.inBatch {
			if s.batch.Seqs[k].Logits && st.mask != nil && st.maskErr == nil {
				s.finishMask(st)
			}
		}
	}
	picks, rows, err := s.dev.ForwardSample(ctx, &s.batch, specs, masks)
	masks()
	return picks, rows, err
}

// fillMask computes st's allowed tokens on its own goroutine; a panicking constraint fails only
// its own request.
func (s *Scheduler) fillMask(st *liveRequest) {
	defer s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			st.maskErr = fmt.Errorf("constraint FillMask panicked: %v", r)
		}
	}()
	clear(st.mask)
	st.maskErr = nil
	// A constraint that failed to compile fails its request with the reason.
	if e, ok := st.req.Constraint.(interface{ Err() error }); ok {
		if st.maskErr = e.Err(); st.maskErr != nil {
			return
		}
	}
	st.req.Constraint.FillMask(st.mask)
	// A mask given up (over its deadline) fails its request with the reason, not as "the
	// constraint allows no token".
	if e, ok := st.req.Constraint.(interface{ Err() error }); ok {
		st.maskErr = e.Err()
	}
}

// item is st's output header with no tokens; a finishing one carries the request's times.
func (s *Scheduler) item(st *liveRequest, reason FinishReason) Item {
	it := Item{
		RID: st.req.RID, Owner: st.req.Owner,
		PromptTokens: st.promptLen, CachedTokens: st.cached, CompletionTokens: st.generated(),
		Finished: reason != FinishNone, FinishReason: reason, MatchedStopToken: -1,
	}
	if it.Finished {
		s.times(st, &it)
	}
	return it
}

// times fills a finishing item's queue, prefill and decode times. A request that finishes
// during a phase (an abort while queued, an error in prefill) counts until now in that phase.
func (s *Scheduler) times(st *liveRequest, it *Item) {
	now := s.now()
	it.Preemptions = st.preemptions
	st.specCount.fill(it)
	switch {
	case st.scheduled.IsZero():
		it.QueueTime = now.Sub(st.received)
	case st.firstToken.IsZero():
		it.QueueTime, it.PrefillTime = st.scheduled.Sub(st.received), now.Sub(st.scheduled)
	default:
		it.QueueTime, it.PrefillTime = st.scheduled.Sub(st.received), st.firstToken.Sub(st.scheduled)
		it.DecodeTime = now.Sub(st.firstToken)
	}
}

// finish forgets a request and releases its KV blocks (full ones stay cached for reuse). The
// caller removes it from its queue.
func (s *Scheduler) finish(st *liveRequest) {
	s.release(st)
	st.running, st.done = false, true
	delete(s.byRID, st.req.RID)
}

// release drops st's blocks, the last first, so that the LRU evicts a finished prompt from its
// tail and keeps the shared head longest.
func (s *Scheduler) release(st *liveRequest) {
	for i := len(st.blocks) - 1; i >= 0; i-- {
		s.pool.release(st.blocks[i])
	}
	st.blocks, st.hashes, st.computed = st.blocks[:0], st.hashes[:0], 0
}

// registerFull hashes st's blocks that became full so later requests can share them.
func (s *Scheduler) registerFull(st *liveRequest) {
	for full := st.computed / s.bs; len(st.hashes) < full; {
		i := len(st.hashes)
		h, parent, toks := s.blockKey(st, i)
		prev := int32(-1)
		if i > 0 {
			prev = st.blocks[i-1]
		}
		s.pool.register(st.blocks[i], prev, h, parent, toks)
		st.hashes = append(st.hashes, h)
	}
}

// blockKey is what identifies st's full block i in the prefix cache: its hash, the hash of block
// i-1 (0 for the first) and its tokens. Blocks before i must be hashed already.
func (s *Scheduler) blockKey(st *liveRequest, i int) (h, parent uint64, toks []int32) {
	if i > 0 {
		parent = st.hashes[i-1]
	}
	toks = st.tokens[i*s.bs : (i+1)*s.bs]
	return s.pool.blockHash(parent, toks), parent, toks
}

func (s *Scheduler) blocksFor(positions int) int { return (positions + s.bs - 1) / s.bs }
