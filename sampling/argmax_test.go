package sampling

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// specials are the values whose ordering the vector kernel must treat exactly like the scalar
// comparison: NaN never wins, -Inf never wins, -0 equals +0, +Inf wins over everything.
var specials = []float32{
	float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)),
	float32(math.Copysign(0, -1)), 0, -math.MaxFloat32, math.MaxFloat32, math.SmallestNonzeroFloat32,
}

func checkArgmax(t *testing.T, name string, logits []float32) {
	t.Helper()
	gotI, gotL := argmax(logits)
	wantI, wantL := argmaxScalar(logits)
	if gotI != wantI || math.Float32bits(gotL) != math.Float32bits(wantL) {
		t.Fatalf("%s (len %d): argmax = (%d, %v), scalar = (%d, %v)", name, len(logits), gotI, gotL, wantI, wantL)
	}
}

func TestArgmaxMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	lengths := []int{0, 1, 7, 31, 32, 127, 128, 129, 160, 255, 1000, 8192, 8193, 151936}
	for _, n := range lengths {
		for trial := range 40 {
			logits := make([]float32, n)
			switch trial % 4 {
			case 0: // continuous values: a unique maximum
				for i := range logits {
					logits[i] = float32(rng.NormFloat64() * 3)
				}
			case 1: // few distinct values: many ties for the maximum
				for i := range logits {
					logits[i] = float32(rng.IntN(4))
				}
			case 2: // specials sprinkled over continuous values
				for i := range logits {
					logits[i] = float32(rng.NormFloat64())
					if rng.IntN(8) == 0 {
						logits[i] = specials[rng.IntN(len(specials))]
					}
				}
			case 3: // only NaN, -Inf and signed zeros
				for i := range logits {
					logits[i] = specials[rng.IntN(2)]
					if rng.IntN(16) == 0 {
						logits[i] = specials[3+rng.IntN(2)]
					}
				}
			}
			checkArgmax(t, "random", logits)
		}
	}
}

func TestArgmaxEdgeCases(t *testing.T) {
	nan, negInf, posInf := float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	const n = 300 // four vector blocks plus a scalar tail
	fill := func(v float32) []float32 {
		row := make([]float32, n)
		for i := range row {
			row[i] = v
		}
		return row
	}
	for _, pos := range []int{0, 1, 31, 32, 100, 255, 256, 299} {
		row := fill(nan)
		row[pos] = -5
		if i, l := argmax(row); i != int32(pos) || l != -5 {
			t.Fatalf("one finite among NaN at %d: got (%d, %v)", pos, i, l)
		}
		row = fill(0)
		row[pos] = posInf
		if i, _ := argmax(row); i != int32(pos) {
			t.Fatalf("+Inf at %d: got %d", pos, i)
		}
		row = fill(negInf)
		row[pos] = nan
		if i, _ := argmax(row); i != -1 {
			t.Fatalf("-Inf row with a NaN at %d: got %d, want -1", pos, i)
		}
		row = fill(negZero)
		row[pos] = 0
		checkArgmax(t, "signed zeros", row)
	}
	if i, _ := argmax(fill(nan)); i != -1 {
		t.Fatalf("all NaN: got %d, want -1", i)
	}
	if i, _ := argmax(fill(7)); i != 0 {
		t.Fatalf("all equal: got %d, want the first index", i)
	}
	// Equal maxima in different vector lanes and in the tail: the first index wins.
	row := fill(1)
	row[290], row[40], row[200] = 2, 2, 2
	if i, _ := argmax(row); i != 40 {
		t.Fatalf("tied maxima at 40, 200, 290: got %d", i)
	}
	row = fill(1)
	row[299] = 2
	if i, _ := argmax(row); i != 299 {
		t.Fatalf("maximum in the tail: got %d", i)
	}
	// A slice that does not start at its array's first element (unaligned kernel loads).
	big := make([]float32, 8200)
	for i := range big {
		big[i] = float32(i % 97)
	}
	big[4099] = 500
	if i, _ := argmax(big[3:]); i != 4096 {
		t.Fatalf("offset slice: got %d, want 4096", i)
	}
}

func BenchmarkArgmax(b *testing.B) {
	for _, n := range []int{8192, qwenVocab} {
		logits := modelLikeLogits()[:n]
		b.Run("vector/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				argmax(logits)
			}
		})
		b.Run("scalar/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				argmaxScalar(logits)
			}
		})
	}
}

// BenchmarkArgmaxRows takes the argmax of many distinct rows, as a batch does: the rows do not
// fit in the caches, so this measures memory traffic, not the kernel.
func BenchmarkArgmaxRows(b *testing.B) {
	const rows, n = 2048, 8192
	all := make([]float32, rows*n)
	one := modelLikeLogits()[:n]
	for r := range rows {
		copy(all[r*n:], one)
		all[r*n+(r*977)%n] = 1e9 // the winner anywhere in the row
	}
	r := 0
	for b.Loop() {
		argmax(all[r*n : (r+1)*n])
		r = (r + 1) % rows
	}
}
