package api

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/llmserve/llmserve/sampling"
)

// fillGenerationExtras applies the generation fields beyond sampling proper: logit_bias and
// truncate_prompt_tokens. It runs before the length check, so a truncated prompt is what counts.
func (s *Server) fillGenerationExtras(req *Request, f *samplingFields) error {
	vocab := -1
	if tok := s.engine.Tokenizer(); tok != nil {
		vocab = tok.VocabSize()
	}
	for k, v := range f.LogitBias {
		id, err := strconv.ParseInt(k, 10, 32)
		// Only a canonical id: "+5" or "05" would be the key of a second entry for token 5.
		if err != nil || id < 0 || strconv.FormatInt(id, 10) != k || (vocab > 0 && int(id) >= vocab) {
			return badRequest("logit_bias", fmt.Sprintf("key %q is not a token id of this model's vocabulary", k))
		}
		if !(v >= -sampling.MaxBias && v <= sampling.MaxBias) {
			return badRequest("logit_bias", fmt.Sprintf("bias for token %s must be in [-100, 100], got %v", k, v))
		}
		if v != 0 {
			req.Sampling.LogitBias = append(req.Sampling.LogitBias, sampling.Bias{ID: int32(id), Value: float32(v)})
		}
	}
	// Map order is random: sort so the same request is the same wire message.
	slices.SortFunc(req.Sampling.LogitBias, func(a, b sampling.Bias) int { return cmp.Compare(a.ID, b.ID) })
	var err error
	req.InputIDs, err = s.truncatePrompt(req.InputIDs, f.TruncatePromptTokens)
	return err
}

// truncatePrompt keeps the last t tokens of ids (truncate_prompt_tokens; -1: the context length).
func (s *Server) truncatePrompt(ids []int32, t *int) ([]int32, error) {
	if t == nil {
		return ids, nil
	}
	k := *t
	if k == -1 {
		k = s.cfg.ContextLength
	}
	if k < 1 {
		return nil, badRequest("truncate_prompt_tokens", fmt.Sprintf("must be -1 (the context length) or >= 1, got %d", *t))
	}
	if n := len(ids); n > k {
		ids = ids[n-k:]
	}
	return ids, nil
}
