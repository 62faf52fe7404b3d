package scheduler

import "github.com/llmserve/llmserve/sampling"

// Prompt logprobs (Request.PromptLogprobs): the prompt's chunks run with backend.Seq.AllLogits,
// each row scoring the prompt token it predicts, without the prefix cache (a cached position has
// no logits). They go out once, on the request's first item.

// promptLogitsChunk bounds a chunk whose logits are all kept: its rows are chunk x vocab floats.
const promptLogitsChunk = 64

// promptScores is one request's prompt logprobs as they are computed.
type promptScores struct {
	scored int       // prompt positions scored so far: [1, scored) (position 0 has no logprob)
	lps    []float32 // lps[p-1]: the logprob of prompt token p
	topIDs []int32   // TopLogprobs entries per scored position, flattened
	topLps []float32
	sent   bool // went out on an item
}

// wantsPromptLogits reports whether st's next chunk must return every position's logits.
func (st *liveRequest) wantsPromptLogits() bool {
	return st.req.PromptLogprobs && st.prompt.scored < st.promptLen && st.computed < st.promptLen
}

// chunkFor is the largest prefill chunk st may take.
func (s *Scheduler) chunkFor(st *liveRequest) int {
	if st.wantsPromptLogits() {
		return min(s.chunk, promptLogitsChunk)
	}
	return s.chunk
}

// scorePrompt scores the prompt tokens predicted by a chunk's rows (all of its positions, back
// to back) and returns the last position's row, the one to sample from.
func (s *Scheduler) scorePrompt(st *liveRequest, pos int, tokens int, rows []float32) []float32 {
	ps := &st.prompt
	if ps.scored == 0 {
		ps.scored = 1
	}
	for j := range tokens {
		p := pos + j + 1 // the prompt token row j predicts
		if p < ps.scored || p >= st.promptLen {
			continue
		}
		row := rows[j*s.vocab : (j+1)*s.vocab]
		ps.lps = append(ps.lps, sampling.LogSoftmaxAt(row, st.tokens[p]))
		if k := st.req.TopLogprobs; k > 0 {
			ps.topIDs, ps.topLps = sampling.TopLogprobs(row, k, ps.topIDs, ps.topLps)
		}
		ps.scored = p + 1
	}
	return rows[(tokens-1)*s.vocab:]
}

// attachPrompt puts the prompt logprobs on st's first item once they are complete.
func (st *liveRequest) attachPrompt(it *Item) {
	ps := &st.prompt
	if !st.req.PromptLogprobs || ps.sent || ps.scored < st.promptLen {
		return
	}
	ps.sent = true
	it.PromptLogprobs, it.PromptTopLogprobIDs, it.PromptTopLogprobs = ps.lps, ps.topIDs, ps.topLps
}

// ownRows copies the backend's row table once per step, so that entries can be replaced.
func (s *Scheduler) ownRows(rows [][]float32) [][]float32 {
	if len(rows) > 0 && len(s.rowsCopy) == len(rows) && &s.rowsCopy[0] == &rows[0] {
		return rows
	}
	s.rowsCopy = append(s.rowsCopy[:0], rows...)
	return s.rowsCopy
}
