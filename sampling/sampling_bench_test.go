package sampling

import (
	"math/rand/v2"
	"testing"
)

// qwenVocab is the logits width of Qwen2/Qwen3 models.
const qwenVocab = 151936

// modelLikeLogits resembles a language model's output: a broad low mass plus a handful of
// strong candidates.
func modelLikeLogits() []float32 {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, qwenVocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	for range 30 {
		logits[rng.IntN(qwenVocab)] = 12 + float32(rng.NormFloat64()*2)
	}
	return logits
}

// Sample only rewrites logits for penalties and masks, which these benchmarks leave off or keep
// idempotent, so the row is reused without copying.
func benchSample(b *testing.B, p Params, allowed []uint64) {
	logits := modelLikeLogits()
	s := New(seeded(p, 1), nil)
	for b.Loop() {
		s.Sample(logits, allowed)
	}
}

func BenchmarkSampleGreedy(b *testing.B) {
	p := DefaultParams()
	p.Temperature = 0
	benchSample(b, p, nil)
}

func BenchmarkSampleTopP09Temp07(b *testing.B) {
	p := DefaultParams()
	p.TopP, p.Temperature = 0.9, 0.7
	benchSample(b, p, nil)
}

// A flat distribution keeps most of the vocabulary in play: the worst case for the softmax.
func BenchmarkSampleTopP09Temp07Flat(b *testing.B) {
	logits := make([]float32, qwenVocab)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	p := DefaultParams()
	p.TopP, p.Temperature = 0.9, 0.7
	s := New(seeded(p, 1), nil)
	for b.Loop() {
		s.Sample(logits, nil)
	}
}

func BenchmarkSampleTopK50Temp07(b *testing.B) {
	p := DefaultParams()
	p.TopK, p.Temperature = 50, 0.7
	benchSample(b, p, nil)
}

func BenchmarkSampleTopP09Masked(b *testing.B) {
	allowed := make([]uint64, (qwenVocab+63)/64)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range allowed {
		allowed[i] = rng.Uint64()
	}
	p := DefaultParams()
	p.TopP, p.Temperature = 0.9, 0.7
	benchSample(b, p, allowed)
}

func BenchmarkLogSoftmaxAt(b *testing.B) {
	logits := modelLikeLogits()
	for b.Loop() {
		LogSoftmaxAt(logits, 7)
	}
}
