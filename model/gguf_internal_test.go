package model

import (
	"math"
	"testing"
)

// TestFitLlama3Rope: the factors llama.cpp's converter writes for Llama 3.1 and 3.2 give back
// their parameters.
func TestFitLlama3Rope(t *testing.T) {
	for _, want := range []Rope{
		{Theta: 500000, Type: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		{Theta: 500000, Type: RopeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
	} {
		got, err := fitLlama3Rope(want.Theta, 128, llama3Factors(want.Theta, 128, want), 8192)
		if err != nil {
			t.Fatal(err)
		}
		if got.Factor != want.Factor || math.Abs(got.LowFreqFactor-1) > 1e-3 || math.Abs(got.HighFreqFactor-4) > 1e-3 {
			t.Errorf("fit %+v, want %+v", got, want)
		}
	}
	flat := make([]float32, 64)
	for i := range flat {
		flat[i] = 1
	}
	if r, err := fitLlama3Rope(10000, 128, flat, 8192); err != nil || r.Type != RopeDefault {
		t.Errorf("all-ones factors: %+v, %v", r, err)
	}
	flat[3] = 0.5 // not a monotone scaling
	if _, err := fitLlama3Rope(10000, 128, flat, 8192); err == nil {
		t.Error("non-Llama-3 factors accepted")
	}
}

// TestQKPermutation checks the row order against convert_hf_to_gguf.py's permute:
// w.reshape(heads, 2, d/2, cols).swapaxes(1, 2).reshape(w.shape).
func TestQKPermutation(t *testing.T) {
	const heads, d = 3, 8
	rows := heads * d
	for g := range rows {
		// Position g of the permuted array is index (h, j, half) of the swapped view, which
		// reads (h, half, j) of the original.
		h, j, half := g/d, (g%d)/2, g%2
		if want := h*d + half*(d/2) + j; permutedRow(g, heads, rows) != want {
			t.Fatalf("permutedRow(%d) = %d, want %d", g, permutedRow(g, heads, rows), want)
		}
		if unpermutedRow(permutedRow(g, heads, rows), heads, rows) != g {
			t.Fatalf("unpermutedRow does not invert permutedRow at %d", g)
		}
	}
}
