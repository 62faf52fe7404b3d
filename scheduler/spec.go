package scheduler

// Verification of speculative drafts ("sample and compare"). A decoding request with drafts
// d1..dk runs [last, d1..dk] as one chunk with every row's logits. Row i is sampled exactly as
// the request's next token would be without drafts, given that d1..di were generated: the same
// SampleSpec (Step counts the tokens before it, so sampling.Uniform gives the same draw; the
// penalties' history and the grammar mask include the drafts accepted before it; min_new_tokens
// bans by the tokens before it). Its pick is emitted; while it equals d(i+1) the next row is
// valid and is sampled too, else (or after row k: the bonus token) the step ends. Each emitted
// token is therefore the token plain decoding would emit, bit for bit where the backend computes
// a generated token's row as a one-token decode does (backend.Seq.Generated): greedy and seeded
// outputs do not change with speculation, and every token is distributed as the model says.

// draft fills st.verify with st's last token and its drafts for this step and returns how many
// drafts it holds (0: a plain decode). budget is the step's token budget left, and decodes the
// step's decoding requests (what a draft token costs is relative to their step).
func (s *Scheduler) draft(st *liveRequest, budget, decodes int) int {
	st.verify, st.ngramDrafted = st.verify[:0], 0
	req := st.req
	if req.Pooling != PoolingNone || st.maskErr != nil {
		return 0
	}
	// k drafts emit at most k+1 tokens: no more than the request may still generate.
	k := min(s.cfg.MaxDraft, budget, req.MaxNewTokens-st.generated()-1, s.cfg.MaxModelLen-len(st.tokens)-1)
	// Drafts take free blocks only: they never evict a cached prefix nor preempt a request.
	k = min(k, (len(st.blocks)+len(s.pool.free))*s.bs-st.computed-1)
	if k <= 0 {
		return 0
	}
	d := append(st.verify, st.tokens[len(st.tokens)-1])
	rho := s.cost.rho(decodes)
	dc, _ := req.Constraint.(DraftConstraint)
	st.forced = false
	if dc != nil {
		// Jump-forward: where the grammar admits one continuation only, its tokens are drafts
		// (sized by their own record: a model may spell the continuation otherwise).
		if fk := st.fctl.length(k, rho); fk > 0 {
			d = dc.ForcedTokens(d, fk)
			if len(d) > 1+fk {
				d = d[:1+fk]
			}
			st.forced = len(d) > 1
		} else if !st.fctl.watching() {
			sd := dc.ForcedTokens(st.fctl.shadow[:0], min(k, shadowMax))
			st.fctl.watch(sd[:min(len(sd), k, shadowMax)])
		}
	}
	if len(d) == 1 {
		if kn := st.ctl.length(k, rho); kn > 0 {
			d = ngramDraft(d, st.tokens, kn, ngramMax, ngramMin)
		} else if !st.ctl.watching() {
			sd := ngramDraft(st.ctl.shadow[:0], st.tokens, min(k, shadowMax), ngramMax, ngramMin)
			if dc != nil {
				sd = sd[:dc.Admits(sd)]
			}
			st.ctl.watch(sd)
		}
		if dc != nil && len(d) > 1 {
			// A draft token the grammar refuses ends the draft: it could never be accepted.
			d = d[:1+dc.Admits(d[1:])]
		}
		st.ngramDrafted = len(d) - 1
	}
	if len(d) == 1 {
		d = d[:0]
	}
	st.verify = d
	return max(0, len(d)-1)
}

// verifyDrafts samples the rows of st's speculative chunk (entry k of the batch, rows back to
// back) in order, records the tokens it emits (their ids appended to ids, their logprobs to lps)
// and returns st's item, whether st finished, and how many of the chunk's tokens have valid KV
// (the last token and the drafts accepted).
func (s *Scheduler) verifyDrafts(st *liveRequest, k int, rows []float32, ids []int32, lps []float32) (it Item, done bool, valid int, _ []int32, _ []float32) {
	drafts := st.verify[1:]
	start, lstart := len(ids), len(lps)
	st.vTopIDs, st.vTopLps = st.vTopIDs[:0], st.vTopLps[:0]
	matched := 0
	for i := 0; i <= len(drafts); i++ {
		if i > 0 && st.mask != nil {
			// The mask after the drafts accepted so far (the constraint has accepted them).
			s.wg.Add(1)
			s.fillMask(st)
		}
		s.pickOne(pickJob{st: st, row: rows[i*s.vocab : (i+1)*s.vocab], k: k})
		tok := st.pick.tok
		it, done = s.record(st)
		valid++
		if tok >= 0 {
			ids = append(ids, tok)
			if st.req.Logprobs {
				lps = append(lps, st.pick.logprob)
			}
			if st.req.TopLogprobs > 0 {
				st.vTopIDs = append(st.vTopIDs, st.pick.topIDs...)
				st.vTopLps = append(st.vTopLps, st.pick.topLogprobs...)
			}
		}
		if i == len(drafts) || tok != drafts[i] {
			break
		}
		matched++
		if done {
			break
		}
	}
	s.stats.DraftTokens += len(drafts)
	s.stats.AcceptedTokens += matched
	s.countDrafts(st, &it, len(drafts), matched)
	if st.ngramDrafted > 0 {
		st.ctl.update(st.ngramDrafted, min(matched, st.ngramDrafted))
	}
	if st.forced {
		st.fctl.update(len(drafts), matched)
	}
	if len(ids) > start {
		it.NewIDs = ids[start:len(ids):len(ids)] // capped: an append must not reach the next item's ids
		if st.req.Logprobs {
			it.Logprobs = lps[lstart:len(lps):len(lps)]
		}
		if st.req.TopLogprobs > 0 {
			it.TopLogprobIDs, it.TopLogprobs = st.vTopIDs, st.vTopLps
		}
	}
	st.verify = st.verify[:0]
	return it, done, valid, ids, lps
}

// trimDraftBlocks releases the blocks st took for drafts that were rejected: past its computed
// positions no block holds KV it will read (their KV is rewritten when reached again).
func (s *Scheduler) trimDraftBlocks(st *liveRequest) {
	for keep := s.blocksFor(st.computed); len(st.blocks) > keep; {
		last := len(st.blocks) - 1
		s.pool.release(st.blocks[last])
		st.blocks = st.blocks[:last]
	}
}
