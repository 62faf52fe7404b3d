package scheduler

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/llmserve/llmserve/sampling"
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
		if s.batch.Seqs[k].Logits {
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
	req := st.req
	st.pick = pick{tok: -1, topIDs: st.pick.topIDs[:0], topLogprobs: st.pick.topLogprobs[:0]}
	if len(row) != s.vocab {
		st.pick.err = fmt.Sprintf("backend returned a logits row of %d entries, want %d", len(row), s.vocab)
		return
	}
	if st.maskErr != nil {
		st.pick.err = st.maskErr.Error()
		return
	}
	// EOS and stop ids are not allowed before MinNewTokens; under a constraint EOS only where
	// the constraint can end.
	early := st.generated() < req.MinNewTokens
	forbidEarly := early && st.mask == nil && (!req.IgnoreEOS && len(s.cfg.EOS) > 0 || len(req.StopTokenIDs) > 0)
	if s.argmax != nil && st.mask == nil && !st.mutates && !forbidEarly && !req.Logprobs && req.TopLogprobs == 0 && !req.PromptLogprobs && st.sampler.Params().IsGreedy() {
		// Plain greedy: the backend's own argmax of the row is the sampler's answer.
		if tok := s.argmax.Argmax(j.k); tok >= 0 && int(tok) < s.vocab {
			st.pick.tok = tok
			return
		}
	}
	logits := row
	if st.mutates || forbidEarly {
		// Rows are the backend's and read-only here: sample from a copy when it must change.
		if st.scratch == nil {
			st.scratch = make([]float32, s.vocab)
		}
		copy(st.scratch, row)
		logits = st.scratch
	}
	if st.mask != nil {
		eosOK := !req.IgnoreEOS && !early && req.Constraint.CanTerminate()
		for _, id := range s.cfg.EOS {
			setBit(st.mask, id, eosOK)
		}
		if early {
			for _, id := range req.StopTokenIDs {
				setBit(st.mask, id, false)
			}
		}
	} else if forbidEarly {
		if !req.IgnoreEOS {
			forbid(logits, s.cfg.EOS)
		}
		forbid(logits, req.StopTokenIDs)
	}
	tok := st.sampler.Sample(logits, st.mask)
	if tok < 0 || int(tok) >= s.vocab {
		st.pick.err = "the constraint allows no token"
		return
	}
	st.pick.tok = tok
	if req.Logprobs {
		st.pick.logprob = sampling.LogSoftmaxAt(row, tok)
	}
	if req.TopLogprobs > 0 {
		st.pick.topIDs, st.pick.topLogprobs = sampling.TopLogprobs(row, req.TopLogprobs, st.pick.topIDs, st.pick.topLogprobs)
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
		it.Err = st.pick.err
		return it, true
	}
	early := st.generated() < req.MinNewTokens
	if st.firstToken.IsZero() {
		st.firstToken = s.now()
	}
	st.tokens = append(st.tokens, tok)
	st.sampler.Accept(tok)
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

func forbid(logits []float32, ids []int32) {
	for _, id := range ids {
		if id >= 0 && int(id) < len(logits) {
			logits[id] = float32(math.Inf(-1))
		}
	}
}
