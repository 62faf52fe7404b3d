package scheduler

import (
	"slices"

	"github.com/llmserve/llmserve/backend"
)

// schedule builds this step's batch into s.batch and s.inBatch.
//
// Running requests go first, in admission order: each decode takes one token, each partial
// prefill a chunk of what the token budget leaves after the decodes. When a running request
// needs a KV block and none is left, a prefill chunk first shrinks to the blocks there are; if
// not even one token fits, the newest running request is preempted (its blocks freed, itself
// requeued at the front of the waiting queue with its generated tokens kept, to be recomputed)
// until the request fits or is itself the newest. The oldest request therefore always makes
// progress. Waiting requests are then admitted in order while slots, budget and blocks last —
// but not in a step that had to preempt, which would only thrash.
//
// Under PolicyPriority both queues are kept in priority order (lower first, then the order of
// Add), so "newest" above reads "worst", and before anything else running requests of a worse
// priority than the best ready waiting one are preempted while it finds no slot or KV blocks.
func (s *Scheduler) schedule() {
	s.batch.Seqs = s.batch.Seqs[:0]
	s.inBatch = s.inBatch[:0]
	if s.cfg.Policy == PolicyPriority {
		s.preemptForPriority()
	}
	decodes := 0
	for _, st := range s.running {
		if len(st.tokens)-st.computed == 1 {
			decodes++
		}
	}
	budget := max(0, s.cfg.MaxPrefillTokens-decodes) // for prefill chunks
	preempted := false
	for i := 0; i < len(s.running); i++ {
		st := s.running[i]
		left := len(st.tokens) - st.computed
		n := 1
		st.verify, st.ngramDrafted = st.verify[:0], 0
		if left > 1 {
			if n = min(left, s.chunkFor(st), budget); n == 0 {
				continue
			}
		} else if s.cfg.Speculative == SpeculativeNgram {
			k := s.draft(st, budget, decodes)
			budget -= k
			n += k
		}
		granted, fits := 0, false
		for {
			if granted, fits = s.grow(st, n, left > 1); fits {
				break
			}
			victim := s.running[len(s.running)-1]
			s.preempt(victim)
			preempted = true
			if victim == st {
				break
			}
		}
		if !fits {
			st.verify = st.verify[:0]
			break // st was the newest; everything before it is scheduled
		}
		if left > 1 {
			budget -= granted
		}
		s.put(st, granted)
	}
	if preempted {
		return
	}
	outstanding := 0 // blocks the running prefills need for the rest of their prompts
	for _, st := range s.running {
		if len(st.tokens)-st.computed > 1 {
			outstanding += s.blocksFor(len(st.tokens)) - len(st.blocks)
		}
	}
	s.admit(budget, outstanding)
}

// grow gives st the blocks for n more tokens. A prefill (shrink) takes fewer tokens when the
// blocks run short. It returns the tokens granted and false when not even one fits.
func (s *Scheduler) grow(st *liveRequest, n int, shrink bool) (int, bool) {
	avail := s.pool.available()
	if need := s.blocksFor(st.computed+n) - len(st.blocks); need > avail {
		if !shrink {
			return 0, false
		}
		if n = (len(st.blocks)+avail)*s.bs - st.computed; n < 1 {
			return 0, false
		}
	}
	for len(st.blocks) < s.blocksFor(st.computed+n) {
		b, _ := s.pool.alloc() // cannot fail: checked against available above
		st.blocks = append(st.blocks, b)
	}
	return n, true
}

// preempt frees a running request's blocks and puts it at the front of the waiting queue.
// Its tokens (prompt and generated), sampler and constraint state are kept: re-admission
// recomputes the KV (cheaply, where its full blocks are still cached) and decoding resumes
// where it stopped, so its stream neither restarts nor repeats.
func (s *Scheduler) preempt(st *liveRequest) {
	s.running = slices.DeleteFunc(s.running, func(x *liveRequest) bool { return x == st })
	s.release(st)
	st.running = false
	st.verify = st.verify[:0]
	if s.cfg.Policy == PolicyPriority {
		s.waiting = insertOrdered(s.waiting, st)
	} else {
		s.waiting = slices.Insert(s.waiting, 0, st)
	}
	s.stats.Preemptions++
	st.preemptions++
}

// before reports whether a runs before b under PolicyPriority: a lower priority value, or the
// same one and added earlier.
func before(a, b *liveRequest) bool {
	if a.req.Priority != b.req.Priority {
		return a.req.Priority < b.req.Priority
	}
	return a.seq < b.seq
}

// insertOrdered inserts st into q, which is in priority order, keeping that order.
func insertOrdered(q []*liveRequest, st *liveRequest) []*liveRequest {
	i, _ := slices.BinarySearchFunc(q, st, func(x, t *liveRequest) int {
		if before(x, t) {
			return -1
		}
		return 1
	})
	return slices.Insert(q, i, st)
}

// preemptForPriority preempts the worst running requests while the best ready waiting request
// has a strictly better priority and finds no slot, or not the KV blocks for its prompt (and
// the decode reserve). Equal priorities never preempt each other: they are served in order.
func (s *Scheduler) preemptForPriority() {
	i := slices.IndexFunc(s.waiting, func(st *liveRequest) bool { return st.req.Ready == nil || st.req.Ready() })
	if i < 0 {
		return
	}
	head := s.waiting[i]
	for len(s.running) > 0 {
		worst := s.running[len(s.running)-1]
		if worst.req.Priority <= head.req.Priority {
			return
		}
		need := s.blocksFor(len(head.tokens)) - len(head.blocks) + s.watermark
		if len(s.running) < s.cfg.MaxRunning && need <= s.pool.available() {
			return
		}
		s.preempt(worst)
	}
}

// admit moves waiting requests into the running batch in queue order (skipping those whose
// constraint is still compiling) while there are slots, prefill budget and KV blocks for the
// whole of each one's remaining prompt, after the blocks promised to running prefills and a
// small reserve for decodes to grow into. It stops at the first request that does not fit, so
// large prompts are not starved.
func (s *Scheduler) admit(budget, promised int) {
	for i := 0; i < len(s.waiting) && len(s.running) < s.cfg.MaxRunning && budget > 0; {
		st := s.waiting[i]
		if st.req.Ready != nil && !st.req.Ready() {
			i++
			continue
		}
		s.matchPrefix(st)
		reserve := 0
		if len(s.running) > 0 {
			reserve = s.watermark
		}
		needAll := s.blocksFor(len(st.tokens)) - len(st.blocks)
		if needAll+reserve+promised > s.pool.available() {
			s.release(st)
			return
		}
		n := min(len(st.tokens)-st.computed, s.chunkFor(st), budget)
		n, _ = s.grow(st, n, false) // fits: needAll covers it
		promised += needAll - (s.blocksFor(st.computed+n) - s.blocksFor(st.computed))
		if !st.admitted {
			st.admitted, st.cached = true, st.computed
			st.scheduled = s.now()
		}
		s.stats.PrefixHitTokens += st.computed
		s.waiting = slices.Delete(s.waiting, i, i+1)
		st.running = true
		if s.cfg.Policy == PolicyPriority {
			s.running = insertOrdered(s.running, st)
		} else {
			s.running = append(s.running, st)
		}
		budget -= n
		st.verify = st.verify[:0]
		s.put(st, n)
	}
}

// matchPrefix points st's first blocks at cached blocks holding the same prefix. At least one
// token is left to compute, since sampling needs the logits of the last one.
func (s *Scheduler) matchPrefix(st *liveRequest) {
	limit := (len(st.tokens) - 1) / s.bs
	if st.req.PromptLogprobs && st.prompt.scored < st.promptLen {
		limit = 0 // every prompt position's logits are needed
	}
	if p := st.req.Pooling; p == PoolingMean || p == PoolingCLS {
		limit = 0 // the pooled positions' hidden states are needed; a cached one has none
	}
	for len(st.blocks) < limit {
		h, parent, toks := s.blockKey(st, len(st.blocks))
		b := s.pool.lookup(h, parent, toks)
		if b < 0 {
			break
		}
		s.pool.acquire(b)
		st.blocks = append(st.blocks, b)
		st.hashes = append(st.hashes, h)
	}
	st.computed = len(st.blocks) * s.bs
}

// put adds st's next n tokens to the batch.
func (s *Scheduler) put(st *liveRequest, n int) {
	end := st.computed + n
	if len(st.verify) > 0 {
		// A speculative chunk: the last token and its drafts, every row sampled (spec.go).
		s.batch.Seqs = append(s.batch.Seqs, backend.Seq{
			Tokens: st.verify, Pos: st.computed, BlockTable: st.blocks[:s.blocksFor(end)],
			Logits: true, AllLogits: true, Generated: true,
		})
		s.inBatch = append(s.inBatch, st)
		return
	}
	s.batch.Seqs = append(s.batch.Seqs, backend.Seq{
		Tokens:     st.tokens[st.computed:end],
		Pos:        st.computed,
		BlockTable: st.blocks[:s.blocksFor(end)],
		Logits:     end == len(st.tokens) && st.req.Pooling == PoolingNone, // an embedding samples nothing
		AllLogits:  st.wantsPromptLogits(),
		Generated:  st.computed >= st.promptLen, // a decode: its tokens were sampled here
	})
	s.inBatch = append(s.inBatch, st)
}
