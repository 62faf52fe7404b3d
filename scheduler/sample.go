package scheduler

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/llmserve/llmserve/backend"
)

// pick is one request's sample of one step, made (possibly in parallel with other requests')
// before any state changes.
type pick struct {
	tok     int32 // -1 when no token could be chosen; err says why
	logprob float32
	// topIDs and topLogprobs are the request's TopLogprobs most likely tokens under the raw
	// logits, most likely first; they reuse the seq's buffers step to step.
	topIDs      []int32
	topLogprobs []float32
	err         string
	// errKind says whose fault err is: a constraint's refusal of its own grammar (a compile
	// error, a mask over its deadline) is the request's, so its client gets a 4xx
	errKind ErrorKind
}

type pickJob struct {
	st  *liveRequest
	row []float32
	k   int // index of row in the step's batch
}

// Parallel sampling pays off once a step scans enough logits (about 0.1 ms of argmax per
// worker); below that, goroutine hand-off costs more than it saves.
const (
	parallelSampleFloats = 1 << 18
	sampleChunk          = 8 // rows a worker claims at a time
)

// sampleAll picks the next token of every batch entry that asked for logits. Each request's
// sample depends only on its own row, sampler, mask and constraint, so with a large batch the
// work is spread over GOMAXPROCS goroutines (greedy argmax over a 150k vocabulary is ~0.1 ms
// a row, which for thousands of rows would otherwise dominate the step).
func (s *Scheduler) sampleAll(rows [][]float32) {
	jobs := s.picks[:0]
	for k, st := range s.inBatch {
		if s.batch.Seqs[k].Logits && len(st.verify) == 0 { // speculative chunks: verifyDrafts
			jobs = append(jobs, pickJob{st, rows[k], k})
		}
	}
	s.picks = jobs
	workers := min(runtime.GOMAXPROCS(0), (len(jobs)+sampleChunk-1)/sampleChunk, len(jobs)*s.vocab/s.parallelFloats)
	if workers <= 1 {
		for _, j := range jobs {
			s.pickOne(j)
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for {
			end := int(next.Add(sampleChunk))
			start := end - sampleChunk
			if start >= len(jobs) {
				return
			}
			for _, j := range jobs[start:min(end, len(jobs))] {
				s.pickOne(j)
			}
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// pickOne samples the next token of j's request from its row into st.pick. It reads the
// scheduler's configuration and writes only the request's own state, so different requests may
// run concurrently.
func (s *Scheduler) pickOne(j pickJob) {
	st, row := j.st, j.row
	st.pick = pick{tok: -1, topIDs: st.pick.topIDs[:0], topLogprobs: st.pick.topLogprobs[:0]}
	if st.maskErr != nil {
		st.pick.err, st.pick.errKind = Refusal(st.maskErr)
		return
	}
	sp := &st.spec
	s.fillSpec(st, sp)
	if s.argmax != nil && !s.batch.Seqs[j.k].AllLogits && sp.PlainGreedy() {
		// Plain greedy: the backend's own argmax of the row is the sampler's answer, and the row
		// is never read on the host.
		if tok := s.argmax.Argmax(j.k); tok >= 0 && int(tok) < s.vocab {
			st.pick.tok = tok
			return
		}
	}
	if len(row) != s.vocab {
		st.pick.err = fmt.Sprintf("backend returned a logits row of %d entries, want %d", len(row), s.vocab)
		return
	}
	if st.mask != nil {
		s.finishMask(st)
	}
	p := backend.Pick{TopIDs: st.pick.topIDs, TopLogprobs: st.pick.topLogprobs}
	backend.HostSample(row, sp, &st.scratch, &p)
	s.takePick(st, &p)
}

// takePick makes p (the host's or the device's sample of st's row) st's pick of this step.
func (s *Scheduler) takePick(st *liveRequest, p *backend.Pick) {
	st.pick = pick{tok: -1, topIDs: st.pick.topIDs[:0], topLogprobs: st.pick.topLogprobs[:0]}
	switch {
	case st.maskErr != nil:
		st.pick.err, st.pick.errKind = Refusal(st.maskErr)
		return
	case p.Token < 0 || int(p.Token) >= s.vocab:
		st.pick.err = "the constraint allows no token"
		return
	}
	st.pick.tok = p.Token
	if st.req.Logprobs {
		st.pick.logprob = p.Logprob
	}
	if st.req.TopLogprobs > 0 {
		// Copied: a device's buffers live until its next step, the request's until it is read.
		st.pick.topIDs = append(st.pick.topIDs, p.TopIDs...)
		st.pick.topLogprobs = append(st.pick.topLogprobs, p.TopLogprobs...)
	}
}

// fillSpec writes how st's next token is sampled into sp: its settings, the penalties' view of
// its generation, the tokens it may not take yet and its seed and step. The slices are st's own
// (its sampler's history, its mask), valid until st's next Accept.
func (s *Scheduler) fillSpec(st *liveRequest, sp *backend.SampleSpec) {
	req := st.req
	p := st.sampler.Params()
	h := st.sampler.History()
	// EOS and stop ids are not allowed before MinNewTokens; under a constraint the mask says so
	// (finishMask), without one they are banned here.
	ban := st.ban[:0]
	if st.mask == nil && st.generated() < req.MinNewTokens {
		if !req.IgnoreEOS {
			ban = append(ban, s.cfg.EOS...)
		}
		ban = append(ban, req.StopTokenIDs...)
	}
	st.ban = ban
	*sp = backend.SampleSpec{
		Temperature: p.Temperature, TopP: p.TopP, MinP: p.MinP, TopK: int32(p.TopK),
		RepetitionPenalty: p.RepetitionPenalty, FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty,
		Seen: h.Seen, Generated: h.Generated, GenCounts: h.GenCounts,
		Bias: p.LogitBias, Ban: ban, Mask: st.mask,
		Seed: st.sampler.Seed(), Step: st.sampler.Step(),
		Logprob: req.Logprobs, TopLogprobs: req.TopLogprobs,
	}
}

// finishMask sets the bits the scheduler decides in st's grammar mask once the constraint has
// filled it: EOS only where the constraint can end (and not before MinNewTokens, nor with
// IgnoreEOS), stop ids not before MinNewTokens.
func (s *Scheduler) finishMask(st *liveRequest) {
	req := st.req
	early := st.generated() < req.MinNewTokens
	eosOK := !req.IgnoreEOS && !early && req.Constraint.CanTerminate()
	for _, id := range s.cfg.EOS {
		setBit(st.mask, id, eosOK)
	}
	if early {
		for _, id := range req.StopTokenIDs {
			setBit(st.mask, id, false)
		}
	}
}

// record appends st's picked token and applies the stop conditions, in this order: EOS (unless
// IgnoreEOS) and stop token ids, the constraint (Accept, IsTerminated), stop strings, then
// MaxNewTokens and the context length. It runs sequentially: StopCheck and Accept are the
// caller's hooks.
func (s *Scheduler) record(st *liveRequest) (it Item, done bool) {
	req := st.req
	tok := st.pick.tok
	if tok < 0 {
		it = s.item(st, FinishError)
		it.Err, it.ErrKind = st.pick.err, st.pick.errKind
		return it, true
	}
	early := st.generated() < req.MinNewTokens
	if st.firstToken.IsZero() {
		st.firstToken = s.now()
	}
	st.tokens = append(st.tokens, tok)
	st.sampler.Accept(tok)
	st.ctl.observe(tok)
	st.fctl.observe(tok)
	it = s.item(st, FinishNone)
	stop := func(reason FinishReason) (Item, bool) {
		it.Finished, it.FinishReason = true, reason
		s.times(st, &it)
		return it, true
	}
	if !early && (!req.IgnoreEOS && slices.Contains(s.cfg.EOS, tok) || slices.Contains(req.StopTokenIDs, tok)) {
		it.MatchedStopToken = tok
		return stop(FinishStop)
	}
	if c := req.Constraint; c != nil {
		if err := c.Accept(tok); err != nil {
			it.Err = fmt.Sprintf("constraint rejected token %d: %v", tok, err)
			return stop(FinishError)
		}
		if c.IsTerminated() {
			return stop(FinishStop)
		}
	}
	if req.StopCheck != nil {
		if matched, ok := req.StopCheck(st.tokens[len(st.tokens)-1:]); ok && st.generated() >= req.MinNewTokens {
			it.MatchedStop = matched
			return stop(FinishStop)
		}
	}
	if st.generated() >= req.MaxNewTokens || len(st.tokens) >= s.cfg.MaxModelLen {
		return stop(FinishLength)
	}
	return it, false
}

func setBit(mask []uint64, id int32, on bool) {
	if id < 0 || int(id)/64 >= len(mask) {
		return
	}
	if on {
		mask[id/64] |= 1 << (uint(id) % 64)
	} else {
		mask[id/64] &^= 1 << (uint(id) % 64)
	}
}
