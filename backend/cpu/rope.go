package cpu

import (
	"math"

	"github.com/llmserve/llmserve/model"
)

// ropeTable caches cos and sin of every (position, frequency) pair seen so far. Row p holds
// HeadDim/2 values; it grows on demand so long contexts cost memory only when used.
type ropeTable struct {
	invFreq  []float32
	cos, sin []float32
	rows     int
}

// newRopeTable derives the inverse frequencies the way transformers does, step by step in float32
// (exponent, power, reciprocal, llama3 smoothing), so positions rotate by the same angles as the
// reference to the last bit wherever float32 operations are correctly rounded.
func newRopeTable(cfg model.Config) *ropeTable {
	half := cfg.HeadDim / 2
	dim := float32(cfg.HeadDim)
	inv := make([]float32, half)
	for i := range inv {
		exponent := float32(2*i) / dim
		inv[i] = 1 / float32(math.Pow(cfg.Rope.Theta, float64(exponent)))
	}
	switch cfg.Rope.Type {
	case model.RopeLinear:
		factor := float32(cfg.Rope.Factor)
		for i := range inv {
			inv[i] /= factor
		}
	case model.RopeLlama3:
		llama3Scale(inv, cfg.Rope)
	}
	return &ropeTable{invFreq: inv}
}

// llama3Scale applies Llama 3.1's frequency-dependent scaling: wavelengths longer than the
// original context divided by low_freq_factor slow down by factor, those shorter than it divided
// by high_freq_factor stay, and the band between interpolates smoothly.
func llama3Scale(inv []float32, r model.Rope) {
	factor := float32(r.Factor)
	oldCtx := float32(r.OriginalMaxPositions)
	lowWavelen := float64(r.OriginalMaxPositions) / r.LowFreqFactor
	highWavelen := float64(r.OriginalMaxPositions) / r.HighFreqFactor
	low, span := float32(r.LowFreqFactor), float32(r.HighFreqFactor-r.LowFreqFactor)
	twoPi := float32(2 * math.Pi)
	for i, f := range inv {
		wavelen := twoPi / f
		scaled := f
		if float64(wavelen) > lowWavelen {
			scaled = f / factor
		}
		if !(float64(wavelen) < highWavelen) && !(float64(wavelen) > lowWavelen) {
			smooth := (oldCtx/wavelen - low) / span
			scaled = (1-smooth)*scaled/factor + smooth*scaled
		}
		inv[i] = scaled
	}
}

// ensure extends the table to cover positions [0, n).
func (r *ropeTable) ensure(n int) {
	if n <= r.rows {
		return
	}
	rows := max(n, 2*r.rows, 256)
	half := len(r.invFreq)
	cos := make([]float32, rows*half)
	sin := make([]float32, rows*half)
	copy(cos, r.cos)
	copy(sin, r.sin)
	for p := r.rows; p < rows; p++ {
		for i, f := range r.invFreq {
			// The angle is rounded to float32 first, as the reference's float32 matmul does.
			angle := float64(f * float32(p))
			cos[p*half+i] = float32(math.Cos(angle))
			sin[p*half+i] = float32(math.Sin(angle))
		}
	}
	r.cos, r.sin, r.rows = cos, sin, rows
}

// apply rotates one head vector x (HeadDim floats) to position pos, pairing element i with
// element i+HeadDim/2 (the "rotate_half" convention of Hugging Face checkpoints).
func (r *ropeTable) apply(x []float32, pos int) {
	half := len(r.invFreq)
	cos := r.cos[pos*half : pos*half+half]
	sin := r.sin[pos*half : pos*half+half]
	lo, hi := x[:half], x[half:2*half]
	for i := range half {
		a, b := lo[i], hi[i]
		lo[i] = a*cos[i] - b*sin[i]
		hi[i] = b*cos[i] + a*sin[i]
	}
}
