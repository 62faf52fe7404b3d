package cpu

import (
	"fmt"
	"time"

	"github.com/llmserve/llmserve/backend/cpu/gemm"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// widenChunkFloats bounds the float32 copy of a 16-bit weight panel that the matrix-product
// path widens at a time (4 MiB: it stays in the last-level cache while gemm reuses it).
const widenChunkFloats = 1 << 20

// checkWeights reports the first matrix of m whose storage type this backend cannot multiply.
func checkWeights(m *model.Model) error {
	check := func(name string, w model.Matrix) error {
		switch w.Type {
		case quant.F32, quant.BF16, quant.F16:
			return nil
		}
		return fmt.Errorf("%s is stored as %s, which the CPU backend cannot multiply yet", name, w.Type)
	}
	if err := check("embed_tokens", m.Embed); err != nil {
		return err
	}
	if err := check("lm_head", m.LMHead); err != nil {
		return err
	}
	for i, l := range m.Layers {
		for name, w := range map[string]model.Matrix{"qkv": l.QKV, "o_proj": l.O, "gate_up": l.GateUp, "down_proj": l.Down} {
			if err := check(fmt.Sprintf("layer %d %s", i, name), w); err != nil {
				return err
			}
		}
	}
	return nil
}

// project computes out[i·ldo+j] = Σ_p x[i·ldx+p]·w[j][p] for i < m and j < w.Rows (added to out
// when accumulate is set): the activations times a weight matrix in its storage type. It counts
// the work in b.stats.
func (b *Backend) project(w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool) {
	t := time.Now()
	n, k := w.Rows, w.Cols
	switch w.Type {
	case quant.F32:
		gemm.MatMulNT(m, n, k, x, ldx, w.F32(), k, out, ldo, accumulate)
	default:
		// 16-bit weights: widen a panel of rows at a time into scratch and multiply it.
		rows := max(1, min(n, widenChunkFloats/k))
		b.wide = grow(b.wide, rows*k)
		for j0 := 0; j0 < n; j0 += rows {
			j1 := min(n, j0+rows)
			panel := b.wide[:(j1-j0)*k]
			b.parallelRows(j1-j0, k, func(r int) {
				widenRow(w, j0+r, panel[r*k:(r+1)*k])
			})
			gemm.MatMulNT(m, j1-j0, k, x, ldx, panel, k, out[j0:], ldo, accumulate)
		}
	}
	b.stats.GEMMTime += time.Since(t)
	b.stats.GEMMFlops += 2 * float64(m) * float64(n) * float64(k)
}

// widenRow writes row r of a float matrix to dst as float32. The types were checked by New.
func widenRow(w model.Matrix, r int, dst []float32) {
	if err := model.RowFloat32(w, r, dst); err != nil {
		panic(fmt.Sprintf("cpu backend: %v", err))
	}
}
