// Package sampling turns one row of next-token logits into a token id for one request, applying
// that request's penalties, grammar mask, temperature, top-k, top-p and min-p, with a per-request
// random stream so a seeded request is reproducible.
package sampling

import (
	"errors"
	"fmt"
	"math"
)

// Params are one request's sampling settings, with OpenAI / SGLang meanings. The zero value is
// not valid (top_p and repetition_penalty would be 0); start from DefaultParams.
type Params struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float32
	// TopP keeps the smallest set of most likely tokens whose probability reaches TopP.
	TopP float32
	// TopK keeps the TopK most likely tokens; -1 or 0 disables it.
	TopK int
	// MinP drops tokens whose probability is below MinP times the most likely token's.
	MinP float32
	// RepetitionPenalty divides positive (multiplies negative) logits of every token seen in the
	// prompt or the output so far, as in Hugging Face and vLLM; 1 disables it.
	RepetitionPenalty float32
	// FrequencyPenalty is subtracted from a token's logit once per time it was generated.
	FrequencyPenalty float32
	// PresencePenalty is subtracted from the logit of every token generated at least once.
	PresencePenalty float32
	// Seed makes the random stream reproducible; nil draws a fresh seed.
	Seed *uint64
	// LogitBias is added to the named tokens' logits before anything else (OpenAI's logit_bias):
	// a bias of -100 bans its token, and if any bias is +100 only the tokens biased +100 may be
	// chosen, as OpenAI describes those values ("ban or exclusive selection").
	LogitBias []Bias
}

// Bias is one logit_bias entry: Value (in [-100, 100]) added to token ID's logit.
type Bias struct {
	ID    int32
	Value float32
}

// MaxBias bounds a logit bias's magnitude; the bounds themselves ban or force.
const MaxBias = 100

// DefaultParams returns the OpenAI / SGLang defaults: temperature 1, top_p 1, top_k disabled,
// min_p 0, no penalties, no seed.
func DefaultParams() Params {
	return Params{Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1}
}

// MaxTopK is the largest top_k accepted: the wire carries it as an int32, and no vocabulary
// comes near it.
const MaxTopK = math.MaxInt32

// Validate reports every setting that is out of range, each with the accepted range. NaN and
// infinities fail every check: a value too large for a float32 (the API's parsers round it to
// +Inf) is refused, never sampled with.
func (p Params) Validate() error {
	var errs []error
	if !(p.Temperature >= 0 && p.Temperature <= math.MaxFloat32) {
		errs = append(errs, fmt.Errorf("temperature must be a finite number >= 0 (0 means greedy), got %v", p.Temperature))
	}
	if !(p.TopP > 0 && p.TopP <= 1) {
		errs = append(errs, fmt.Errorf("top_p must be in (0, 1], got %v", p.TopP))
	}
	if p.TopK < -1 || p.TopK > MaxTopK {
		errs = append(errs, fmt.Errorf("top_k must be -1 or 0 (disabled) or in [1, %d], got %d", MaxTopK, p.TopK))
	}
	if !(p.MinP >= 0 && p.MinP <= 1) {
		errs = append(errs, fmt.Errorf("min_p must be in [0, 1], got %v", p.MinP))
	}
	if !(p.RepetitionPenalty > 0 && p.RepetitionPenalty <= math.MaxFloat32) {
		errs = append(errs, fmt.Errorf("repetition_penalty must be a finite number > 0 (1 disables it), got %v", p.RepetitionPenalty))
	}
	if !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2) {
		errs = append(errs, fmt.Errorf("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty))
	}
	if !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2) {
		errs = append(errs, fmt.Errorf("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty))
	}
	for _, b := range p.LogitBias {
		if !(b.Value >= -MaxBias && b.Value <= MaxBias) {
			errs = append(errs, fmt.Errorf("logit_bias for token %d must be in [-100, 100], got %v", b.ID, b.Value))
		}
		if b.ID < 0 {
			errs = append(errs, fmt.Errorf("logit_bias token id %d is negative", b.ID))
		}
	}
	return errors.Join(errs...)
}

// greedyEpsilon is the temperature below which sampling is treated as greedy: dividing by a
// smaller one only overflows toward the same argmax.
const greedyEpsilon = 1e-6

// IsGreedy reports whether these settings always pick the most likely allowed token.
func (p Params) IsGreedy() bool {
	return p.Temperature < greedyEpsilon || p.TopK == 1
}
