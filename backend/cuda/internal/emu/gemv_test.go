package emu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/quant"
)

// decodeCase is one weight matrix in one storage type, its values as the kernels must see them.
type decodeCase struct {
	name string
	kern dev.Kernel
	qt   quant.Type // 0: bf16
	w    []byte     // device bytes
	deq  []float32  // the weights, dequantized (or widened)
}

func decodeCases(t *testing.T, rng *rand.Rand, n, k int) []decodeCase {
	w32 := make([]float32, n*k)
	for i := range w32 {
		w32[i] = float32(rng.NormFloat64()) * 0.05
	}
	bf := make([]byte, 2*n*k)
	deqBF := make([]float32, n*k)
	for i, v := range w32 {
		binary.LittleEndian.PutUint16(bf[2*i:], ToBF16(v))
		deqBF[i] = RoundBF16(v)
	}
	cases := []decodeCase{{"bf16", dev.KGemv, 0, bf, deqBF}}
	for _, c := range []struct {
		qt   quant.Type
		kern dev.Kernel
	}{{quant.Q8_0, dev.KGemvQ8_0}, {quant.Q4_K, dev.KGemvQ4_K}} {
		q, err := quant.Quantize(c.qt, w32, k)
		if err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, n*k)
		rb, _ := c.qt.RowBytes(k)
		for r := range n {
			if err := quant.Dequantize(c.qt, q[r*rb:(r+1)*rb], deq[r*k:(r+1)*k]); err != nil {
				t.Fatal(err)
			}
		}
		cases = append(cases, decodeCase{c.qt.String(), c.kern, c.qt, q, deq})
	}
	return cases
}

// The decode GEMMs against a float64 product of the same operands (activations rounded to bf16
// for bf16 weights), the tiled GEMMs against the decode ones, a row alone against the same row in
// a group (bit for bit: the decode rows' batch invariance), and accumulation.
func TestDecodeGemms(t *testing.T) {
	const m, n, k, ldx = 19, 37, 512, 516 // two row groups; a padded activation stride
	rng := rand.New(rand.NewPCG(3, 4))
	d := New(1 << 30)
	x := make([]float32, m*ldx)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	xp := mustAlloc(t, d, f32bytes(x))
	for _, c := range decodeCases(t, rng, n, k) {
		t.Run(c.name, func(t *testing.T) {
			wp := mustAlloc(t, d, c.w)
			out, _ := d.Alloc(4 * m * n)
			a := dev.GemvArgs{Out: out, X: xp, W: wp, M: m, N: n, K: k, Ldx: ldx, Ldo: n}
			if err := d.Launch(c.kern, dev.GemvGrid(m, n), dev.D1(32*dev.GemvWarps), 0, dev.Pack(&a)); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, out, m*n)
			for r := range m {
				for j := range n {
					var s, mag float64
					for kk := range k {
						xv := x[r*ldx+kk]
						if c.qt == 0 {
							xv = RoundBF16(xv)
						}
						p := float64(xv) * float64(c.deq[j*k+kk])
						s += p
						mag += math.Abs(p)
					}
					if diff := math.Abs(float64(got[r*n+j]) - s); diff > 1e-5*mag {
						t.Fatalf("row %d col %d: %v, float64 product %v (|diff| %.3g of Σ|x·w| %.3g)", r, j, got[r*n+j], s, diff, mag)
					}
				}
			}
			// row 17 alone (the second group's second row) equals its value in the group
			one, _ := d.Alloc(4 * n)
			a1 := dev.GemvArgs{Out: one, X: xp + 17*ldx*4, W: wp, M: 1, N: n, K: k, Ldx: ldx, Ldo: n}
			if err := d.Launch(c.kern, dev.GemvGrid(1, n), dev.D1(32*dev.GemvWarps), 0, dev.Pack(&a1)); err != nil {
				t.Fatal(err)
			}
			for j, v := range download(t, d, one, n) {
				if math.Float32bits(v) != math.Float32bits(got[17*n+j]) {
					t.Fatalf("col %d: row alone %v, in its group %v", j, v, got[17*n+j])
				}
			}
			// accumulate adds to what is there
			a1.Accumulate = 1
			if err := d.Launch(c.kern, dev.GemvGrid(1, n), dev.D1(32*dev.GemvWarps), 0, dev.Pack(&a1)); err != nil {
				t.Fatal(err)
			}
			for j, v := range download(t, d, one, n) {
				if v != got[17*n+j]+got[17*n+j] {
					t.Fatalf("col %d: accumulated %v, want %v", j, v, 2*got[17*n+j])
				}
			}
			// the tiled GEMM of the same type agrees within float32 reordering
			tiled, _ := d.Alloc(4 * m * n)
			grid := dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}
			if c.qt == 0 {
				err := d.Launch(dev.KGemm, grid, dev.D1(256), 0, dev.Pack(&dev.GemmArgs{Out: tiled, X: xp, W: wp, M: m, N: n, K: k, Ldx: ldx, Ldo: n}))
				if err != nil {
					t.Fatal(err)
				}
			} else {
				err := d.Launch(dev.KGemmQ, grid, dev.D1(256), 0, dev.Pack(&dev.GemmQArgs{Out: tiled, X: xp, W: wp, M: m, N: n, K: k, Ldx: ldx, Ldo: n, QType: int32(c.qt)}))
				if err != nil {
					t.Fatal(err)
				}
			}
			for i, v := range download(t, d, tiled, m*n) {
				if diff := math.Abs(float64(v - got[i])); diff > 1e-4*(1+math.Abs(float64(v))) {
					t.Fatalf("element %d: tiled %v, decode %v", i, v, got[i])
				}
			}
		})
	}
}

// gemm_q is gemm_bf16's f32-weight product over the dequantized rows, bit for bit, and embed_q
// gathers dequantized rows exactly.
func TestQuantizedTiledAndEmbed(t *testing.T) {
	const m, n, k = 70, 65, 256
	rng := rand.New(rand.NewPCG(5, 6))
	d := New(1 << 30)
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	xp := mustAlloc(t, d, f32bytes(x))
	grid := dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}
	for _, c := range decodeCases(t, rng, n, k)[1:] {
		t.Run(c.name, func(t *testing.T) {
			wq := mustAlloc(t, d, c.w)
			w32 := mustAlloc(t, d, f32bytes(c.deq))
			a, _ := d.Alloc(4 * m * n)
			b, _ := d.Alloc(4 * m * n)
			if err := d.Launch(dev.KGemmQ, grid, dev.D1(256), 0, dev.Pack(&dev.GemmQArgs{Out: a, X: xp, W: wq, M: m, N: n, K: k, Ldx: k, Ldo: n, QType: int32(c.qt)})); err != nil {
				t.Fatal(err)
			}
			if err := d.Launch(dev.KGemm, grid, dev.D1(256), 0, dev.Pack(&dev.GemmArgs{Out: b, X: xp, W: w32, M: m, N: n, K: k, Ldx: k, Ldo: n, WF32: 1})); err != nil {
				t.Fatal(err)
			}
			ga, gb := download(t, d, a, m*n), download(t, d, b, m*n)
			for i := range ga {
				if math.Float32bits(ga[i]) != math.Float32bits(gb[i]) {
					t.Fatalf("element %d: gemm_q %v, f32 gemm of the dequantized weights %v", i, ga[i], gb[i])
				}
			}
			ids := []int32{3, 0, 64, 3}
			idp := mustAlloc(t, d, i32bytes(ids))
			out, _ := d.Alloc(int64(4 * len(ids) * k))
			if err := d.Launch(dev.KEmbedQ, dev.D1(len(ids)), dev.D1(256), 0, dev.Pack(&dev.EmbedQArgs{Out: out, Table: wq, IDs: idp, Rows: int32(len(ids)), H: k, QType: int32(c.qt)})); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, out, len(ids)*k)
			for r, id := range ids {
				for i := range k {
					if got[r*k+i] != c.deq[int(id)*k+i] {
						t.Fatalf("row %d (id %d) element %d: %v, dequantized %v", r, id, i, got[r*k+i], c.deq[int(id)*k+i])
					}
				}
			}
			// a type without kernels, and a K the blocks do not divide, are refused
			bad := dev.GemmQArgs{Out: a, X: xp, W: wq, M: m, N: n, K: k, Ldx: k, Ldo: n, QType: int32(quant.Q4_0)}
			if err := d.Launch(dev.KGemmQ, grid, dev.D1(256), 0, dev.Pack(&bad)); err == nil {
				t.Fatal("gemm_q took Q4_0")
			}
			gv := dev.GemvArgs{Out: a, X: xp, W: wq, M: 1, N: n, K: 48, Ldx: k, Ldo: n}
			if err := d.Launch(dev.KGemvQ4_K, dev.GemvGrid(1, n), dev.D1(256), 0, dev.Pack(&gv)); err == nil {
				t.Fatal("gemv_q4_k took K=48")
			}
		})
	}
}
