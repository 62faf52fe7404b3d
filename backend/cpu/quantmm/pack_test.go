package quantmm

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/quant"
)

// packedTypes are the types with a packed layout.
var packedTypes = []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K}

// TestPackedMatchesUnpacked: on every kernel set with a packed kernel, a packed matrix gives the
// portable unpacked path's results bit for bit (real scales, so float rounding is exercised, and
// quant bytes of every value, -128 included), for row counts that leave every remainder of a
// group, activation-row counts across the kernels' tiles (4 or 8 rows) and the 64-row slices, odd block counts,
// and several thread counts; outputs past the rows stay untouched.
func TestPackedMatchesUnpacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type shape struct{ rows, cols, m, threads int }
	shapes := []shape{{1, 32, 1, 1}, {7, 96, 3, 1}, {8, 256, 4, 2}, {9, 160, 5, 2}, {17, 1024, 16, 2},
		{23, 512, 17, 3}, {40, 96, 70, 2}, {130, 288, 9, 4}, {33, 64, 130, 3}}
	for m := 1; m <= 9; m++ {
		shapes = append(shapes, shape{8*m + m%8, 224, m, 2})
	}
	saved := activeKernels
	defer func() { activeKernels = saved }()
	for _, typ := range packedTypes {
		for _, s := range shapes {
			if s.cols%typ.BlockSize() != 0 {
				s.cols = (s.cols + 255) &^ 255
			}
			w, err := quant.Quantize(typ, randomWeights(rng, s.rows*s.cols), s.cols)
			if err != nil {
				t.Fatal(err)
			}
			// Random bytes in a few blocks: Q8_0 quants, -128 (which the quantizer never
			// writes) among them; everything but Q4_K's d and dmin and Q6_K's d (all scale, min
			// and quant bits).
			bb := typ.BlockBytes()
			for b := 0; b+bb <= len(w); b += bb * 5 {
				lo, hi := 2, bb
				switch typ {
				case quant.Q4_K:
					lo = 4
				case quant.Q6_K:
					lo, hi = 0, q6kD
				}
				for k := lo; k < hi; k++ {
					w[b+k] = byte(rng.Uint32())
				}
				if typ == quant.Q8_0 {
					w[b+2+rng.IntN(32)] = 0x80
				}
			}
			x := make([]float32, s.m*s.cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			ldo := s.rows + 5
			activeKernels = goKernels
			want := make([]float32, s.m*ldo)
			MatMul(typ, w, s.rows, s.cols, x, s.m, want, ldo, 1)
			for _, k := range kernelSets() {
				if k.packed == nil {
					continue
				}
				activeKernels = k
				// pack, not Pack: every packed kernel is checked, chosen for its type or not.
				p, err := pack(typ, w, s.rows, s.cols)
				if err != nil {
					t.Fatalf("%s: Pack(%s): %v", k.name, typ, err)
				}
				got := make([]float32, s.m*ldo)
				for i := range got {
					got[i] = 12345
				}
				p.MatMul(x, s.m, got, ldo, s.threads)
				for i := range s.m {
					for j := range ldo {
						g, wnt := got[i*ldo+j], want[i*ldo+j]
						if j >= s.rows {
							wnt = 12345
						}
						if math.Float32bits(g) != math.Float32bits(wnt) {
							t.Fatalf("%s %s %+v: out[%d][%d] = %g, unpacked %g", k.name, typ, s, i, j, g, wnt)
						}
					}
				}
			}
		}
	}
}

// TestPackedRowsIndependent: each activation row's results are the same multiplied alone as in
// a batch with others, whatever the batch size (the packed path is used at every size).
func TestPackedRowsIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const rows, cols, m = 45, 512, 21
	saved := activeKernels
	defer func() { activeKernels = saved }()
	for _, typ := range packedTypes {
		w, err := quant.Quantize(typ, randomWeights(rng, rows*cols), cols)
		if err != nil {
			t.Fatal(err)
		}
		x := randomWeights(rng, m*cols)
		for _, k := range kernelSets() {
			if k.packed == nil {
				continue
			}
			activeKernels = k
			p, err := pack(typ, w, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			batch := make([]float32, m*rows)
			p.MatMul(x, m, batch, rows, 2)
			for i := range m {
				one := make([]float32, rows)
				p.MatMul(x[i*cols:(i+1)*cols], 1, one, rows, 1)
				for j := range rows {
					if math.Float32bits(one[j]) != math.Float32bits(batch[i*rows+j]) {
						t.Fatalf("%s %s: row %d out %d alone %g, in batch %g", k.name, typ, i, j, one[j], batch[i*rows+j])
					}
				}
			}
		}
	}
}

// TestPackErrors: short data and types without a packed layout are refused with a reason.
func TestPackErrors(t *testing.T) {
	if _, err := pack(quant.Q8_0, make([]byte, 33), 1, 32); err == nil {
		t.Error("Pack took 33 bytes for a 34-byte row")
	}
	if _, err := pack(quant.Q4_K, make([]byte, 144), 2, 256); err == nil {
		t.Error("Pack took one q4_k row for two")
	}
	if _, err := pack(quant.Q4_0, make([]byte, 18), 1, 32); err == nil {
		t.Error("Pack took q4_0, which has no packed layout")
	}
	if _, err := pack(quant.Q8_0, make([]byte, 34), 1, 33); err == nil {
		t.Error("Pack took 33 columns of q8_0")
	}
}

// TestPacksFollowsKernels: Pack packs exactly the types the active kernel set lists, and
// returns nil (the caller keeps the rows) for the others.
func TestPacksFollowsKernels(t *testing.T) {
	saved := activeKernels
	defer func() { activeKernels = saved }()
	for _, k := range kernelSets() {
		activeKernels = k
		for _, typ := range quantTypes {
			cols := 256
			w, err := quant.Quantize(typ, make([]float32, 3*cols), cols)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Pack(typ, w, 3, cols)
			if err != nil {
				t.Fatal(err)
			}
			if want := k.packed != nil && slices.Contains(k.packTypes, typ); (p != nil) != want || Packs(typ) != want {
				t.Errorf("%s %s: Pack gave %v, Packs %v, want packed %v", k.name, typ, p != nil, Packs(typ), want)
			}
		}
	}
}
