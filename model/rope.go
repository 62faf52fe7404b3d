package model

import "math"

// RopeInvFreq returns the HeadDim/2 rotary inverse frequencies of c: dimension pair i (element i
// with element i+HeadDim/2, the rotate_half convention) turns by position·RopeInvFreq()[i]
// radians. They are derived the way transformers derives them, step by step in float32
// (exponent, power, reciprocal, then the linear or Llama 3 scaling), so a backend rotating by
// them (with the angle rounded to float32 first, as the reference's float32 product does)
// matches the reference to the last bit wherever float32 operations are correctly rounded.
func (cfg Config) RopeInvFreq() []float32 {
	half := cfg.HeadDim / 2
	dim := float32(cfg.HeadDim)
	inv := make([]float32, half)
	for i := range inv {
		exponent := float32(2*i) / dim
		inv[i] = 1 / float32(math.Pow(cfg.Rope.Theta, float64(exponent)))
	}
	switch cfg.Rope.Type {
	case RopeLinear:
		factor := float32(cfg.Rope.Factor)
		for i := range inv {
			inv[i] /= factor
		}
	case RopeLlama3:
		llama3Scale(inv, cfg.Rope)
	}
	return inv
}

// llama3Scale applies Llama 3.1's frequency-dependent scaling: wavelengths longer than the
// original context divided by low_freq_factor slow down by factor, those shorter than it divided
// by high_freq_factor stay, and the band between interpolates smoothly.
func llama3Scale(inv []float32, r Rope) {
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
