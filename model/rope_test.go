package model

import (
	"math"
	"testing"
)

// TestRopeLlama3Frequencies checks the llama3 frequency scaling against values computed by
// transformers' _compute_llama3_parameters for the llama32 fixture (head_dim 16, theta 5e5,
// factor 32, low 1, high 4, original context 64).
func TestRopeLlama3Frequencies(t *testing.T) {
	cfg, err := LoadConfig("../testdata/models/llama32")
	if err != nil {
		t.Fatal(err)
	}
	inv := cfg.RopeInvFreq()
	// Computed in float64 from the formula: index 0 keeps its frequency (wavelength < 16),
	// index 1 lies in the smoothed band, the rest are divided by the factor.
	want := []float64{1, 0.06713303751, 0.001175188467, 0.000227895773, 4.419417382e-05, 8.57025549e-06,
		1.661967468e-06, 3.22293293e-07}
	for i, w := range want {
		if d := math.Abs(float64(inv[i]) - w); d > 1e-6*w {
			t.Errorf("inv_freq[%d] = %.9g, want %.9g", i, inv[i], w)
		}
	}
}
