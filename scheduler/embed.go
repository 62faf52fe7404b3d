package scheduler

import (
	"errors"
	"fmt"

	"github.com/llmserve/llmserve/backend"
)

// Embedding requests (Request.Pooling set) are prefill-only: their prompt runs through the model
// like any other, with no logits and no sampling, and the backend's final hidden states
// (backend.HiddenStates) are pooled chunk by chunk into one vector, which goes out on the
// request's only item as it finishes (FinishStop, no tokens). Its KV blocks are then released
// like a finished request's, full ones staying in the prefix cache. Normalization and
// truncation are the API's: the scheduler returns the raw pooled state.

// Pooling says how an embedding request's per-token hidden states become one vector.
type Pooling uint8

// Pooling modes. The values equal ipc.Pooling's.
const (
	PoolingNone Pooling = 0 // a generation request
	PoolingLast Pooling = 1 // the last prompt token's state (decoder embedders: Qwen3-Embedding)
	PoolingMean Pooling = 2 // the mean over the prompt's tokens
	PoolingCLS  Pooling = 3 // the first prompt token's state
)

func (p Pooling) String() string {
	switch p {
	case PoolingNone:
		return "none"
	case PoolingLast:
		return "last"
	case PoolingMean:
		return "mean"
	case PoolingCLS:
		return "cls"
	}
	return fmt.Sprintf("Pooling(%d)", uint8(p))
}

// ErrNoHiddenStates refuses an embedding request on a rank whose backend returns no hidden
// states (the replay runner): the client's request for what this engine does not serve (Add
// returns it in an invalid *RequestError).
var ErrNoHiddenStates = errors.New("this rank's backend cannot return hidden states, so it serves no embeddings")

// validateEmbed checks what an embedding request may not carry, and that the backend can pool.
func (s *Scheduler) validateEmbed(req *Request) error {
	if req.Pooling > PoolingCLS {
		return invalid(fmt.Errorf("unknown pooling %v", req.Pooling))
	}
	if s.hidden == nil {
		return invalid(ErrNoHiddenStates)
	}
	if req.MaxNewTokens != 0 || req.Constraint != nil || req.Logprobs || req.TopLogprobs > 0 || req.PromptLogprobs {
		return invalid(errors.New("an embedding request generates nothing: no max_new_tokens, constraint or logprobs"))
	}
	if len(req.InputIDs) > s.cfg.MaxModelLen {
		return invalid(fmt.Errorf("prompt (%d tokens) exceeds the context length %d", len(req.InputIDs), s.cfg.MaxModelLen))
	}
	if need := s.blocksFor(len(req.InputIDs)); need > s.pool.numBlocks() {
		return invalid(fmt.Errorf("prompt (%d tokens) needs %d KV blocks, more than the cache's %d", len(req.InputIDs), need, s.pool.numBlocks()))
	}
	return nil
}

// poolChunk folds the hidden states of st's chunk sq (entry k of the step's batch, just run)
// into its vector. When the prompt is complete it returns the finishing item and true.
func (s *Scheduler) poolChunk(st *liveRequest, k int, sq *backend.Seq) (Item, bool) {
	rows, err := s.hidden.Hidden(k, st.hiddenRows)
	st.hiddenRows = rows
	h := len(st.embed)
	if err == nil && len(rows) != len(sq.Tokens)*h {
		err = fmt.Errorf("backend returned %d hidden floats for a chunk of %d tokens of %d", len(rows), len(sq.Tokens), h)
	}
	if err != nil {
		it := s.item(st, FinishError)
		it.Err = fmt.Sprintf("scheduler rank %d: hidden states: %v", s.cfg.Rank, err)
		return it, true
	}
	end := sq.Pos + len(sq.Tokens)
	switch st.req.Pooling {
	case PoolingMean:
		if sq.Pos == 0 {
			clear(st.embed) // a fresh start (a mean never uses the prefix cache; a preempted one restarts)
		}
		for r := range len(sq.Tokens) {
			for j, v := range rows[r*h : (r+1)*h] {
				st.embed[j] += v
			}
		}
	case PoolingCLS:
		if sq.Pos == 0 {
			copy(st.embed, rows[:h])
		}
	case PoolingLast:
		if end == st.promptLen {
			copy(st.embed, rows[len(rows)-h:])
		}
	}
	if end < st.promptLen {
		return Item{}, false
	}
	if st.req.Pooling == PoolingMean {
		inv := 1 / float32(st.promptLen)
		for j := range st.embed {
			st.embed[j] *= inv
		}
	}
	it := s.item(st, FinishStop)
	it.Embedding = st.embed
	return it, true
}
