package backend

import (
	"context"

	"github.com/llmserve/llmserve/sampling"
)

// DeviceSampler is an optional capability of a Backend: it samples the rows it computed where
// they live and returns token ids, so the host never reads a decode's logits row (at a batch of
// 256 and a 150k vocabulary that is 155 MB per step). The scheduler uses it when the backend has
// it and samples host rows from Forward otherwise.
//
// A draw depends only on the row's logits and its SampleSpec: never on the batch, the row's
// position in it, or the prefix cache. A backend that shares the host sampler
// (HostSample) returns exactly its picks for the same rows.
type DeviceSampler interface {
	// ForwardSample runs Forward on b, then picks one token for every Seq with Logits, by
	// specs[i] for b.Seqs[i] (len(specs) == len(b.Seqs); entries of Seqs without Logits are
	// ignored). masks, when not nil, must be called once the forward is under way and before
	// any spec's Mask is read: it returns when the grammar masks (and the scheduler's EOS and
	// stop bits in them) are final, so they are computed while the device runs.
	//
	// picks holds one entry per Seq, in batch order (the zero Pick for Seqs without Logits).
	// rows holds host logits only for Seqs with AllLogits (all their positions back to back, as
	// Forward returns them), nil for the others; rows itself may be nil when no Seq asked.
	// Both are valid until the next call.
	ForwardSample(ctx context.Context, b *Batch, specs []SampleSpec, masks func()) (picks []Pick, rows [][]float32, err error)
}

// SampleSpec is how to sample one row: a request's sampling settings and the state of its
// generation that the settings need, in a form a device can copy (flat slices, no maps, no
// random stream: the draw's randomness comes from Seed and Step alone, see sampling.Uniform).
//
// The order of operations is sampling.Sampler's: logit bias, repetition then frequency and
// presence penalties, Ban, Mask, greedy shortcut, temperature, top-k, softmax, top-p, min-p,
// draw. Logprobs are of the raw logits, before any of them.
type SampleSpec struct {
	// Temperature divides the logits; below 1e-6 (or with TopK 1) the pick is greedy.
	Temperature float32
	// TopP keeps the smallest most likely set whose probability reaches it (1: all).
	TopP float32
	// MinP drops tokens less likely than MinP times the best (0: none).
	MinP float32
	// TopK keeps the TopK most likely tokens; <= 0 disables it.
	TopK int32
	// RepetitionPenalty applies to Seen (1: off); FrequencyPenalty (times the token's count in
	// GenCounts) and PresencePenalty apply to Generated.
	RepetitionPenalty, FrequencyPenalty, PresencePenalty float32
	// Seen lists, once each, the tokens of the prompt and output so far (only when
	// RepetitionPenalty != 1).
	Seen []int32
	// Generated lists, once each, the generated tokens, and GenCounts[i] how often Generated[i]
	// was generated (only when a frequency or presence penalty is set).
	Generated, GenCounts []int32
	// Bias is the request's logit_bias (sampling.Params.LogitBias semantics: -100 bans, +100
	// forces).
	Bias []sampling.Bias
	// Ban lists tokens that may not be chosen at this step (EOS and stop ids before the
	// request's min_new_tokens); ids outside the vocabulary are ignored.
	Ban []int32
	// Mask, when not nil, allows only the tokens whose bit is set (bit i%64 of Mask[i/64]);
	// ((VocabSize+63)/64 words, the scheduler's grammar layout). It is final only once the
	// masks callback has returned.
	Mask []uint64
	// Seed and Step select the draw: Step is the number of tokens the request generated before
	// this one, so a draw repeats across batches, preemption and prefix hits.
	Seed uint64
	Step uint32
	// Logprob asks for the chosen token's log probability under the raw logits; TopLogprobs for
	// that many most likely tokens and their logprobs (0: none).
	Logprob     bool
	TopLogprobs int
}

// Pick is the sample of one row.
type Pick struct {
	// Token is the chosen id; -1 when the mask allowed no token.
	Token int32
	// Logprob is Token's log probability under the raw logits, when the spec asked.
	Logprob float32
	// TopIDs and TopLogprobs are the spec's TopLogprobs most likely tokens under the raw
	// logits, most likely first.
	TopIDs      []int32
	TopLogprobs []float32
}

// PlainGreedy reports whether the pick is the row's argmax as computed: greedy, nothing edits
// the row and nothing but the token is asked for. A device may then take its argmax alone.
func (s *SampleSpec) PlainGreedy() bool {
	return (s.Temperature < 1e-6 || s.TopK == 1) && s.Mask == nil && len(s.Ban) == 0 && len(s.Bias) == 0 &&
		s.RepetitionPenalty == 1 && s.FrequencyPenalty == 0 && s.PresencePenalty == 0 && !s.Logprob && s.TopLogprobs == 0
}

// Params returns the spec's settings as sampling.Params (with the seed set).
func (s *SampleSpec) Params() sampling.Params {
	seed := s.Seed
	return sampling.Params{
		Temperature: s.Temperature, TopP: s.TopP, TopK: int(s.TopK), MinP: s.MinP,
		RepetitionPenalty: s.RepetitionPenalty, FrequencyPenalty: s.FrequencyPenalty, PresencePenalty: s.PresencePenalty,
		Seed: &seed, LogitBias: s.Bias,
	}
}

// HostSample samples row (VocabSize raw logits) by spec with the host sampler, into p (whose
// TopIDs and TopLogprobs buffers it reuses); row is left unchanged, scratch holds the copy the
// sampler edits. It is what a backend without a sampling kernel of its own runs behind
// ForwardSample, and the reference a device's picks are checked against.
func HostSample(row []float32, spec *SampleSpec, scratch *sampling.Scratch, p *Pick) {
	p.Token, p.Logprob = -1, 0
	p.TopIDs, p.TopLogprobs = p.TopIDs[:0], p.TopLogprobs[:0]
	params := spec.Params()
	h := sampling.History{Seen: spec.Seen, Generated: spec.Generated, GenCounts: spec.GenCounts}
	logits := row
	if spec.Mask != nil || len(spec.Ban) > 0 || len(spec.Bias) > 0 || (len(spec.Seen) > 0 && spec.RepetitionPenalty != 1) ||
		(len(spec.Generated) > 0 && (spec.FrequencyPenalty != 0 || spec.PresencePenalty != 0)) {
		// The sampler edits the row it samples; the backend's stays as computed.
		logits = scratch.Copy(row)
	}
	p.Token = scratch.Sample(logits, &params, h, spec.Ban, spec.Mask, spec.Seed, spec.Step)
	if p.Token >= 0 && spec.Logprob {
		p.Logprob = sampling.LogSoftmaxAt(row, p.Token)
	}
	if spec.TopLogprobs > 0 {
		p.TopIDs, p.TopLogprobs = sampling.TopLogprobs(row, spec.TopLogprobs, p.TopIDs, p.TopLogprobs)
	}
}
