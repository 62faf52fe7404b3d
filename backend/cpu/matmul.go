package cpu

import (
	"fmt"
	"time"

	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// checkWeights reports the first matrix of m whose storage type this backend cannot multiply.
func checkWeights(m *model.Model) error {
	check := func(name string, w model.Matrix) error {
		if err := linear.Supported(w); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if err := check("embed_tokens", m.Embed); err != nil {
		return err
	}
	if err := check("lm_head", m.LMHead); err != nil {
		return err
	}
	for i, l := range m.Layers {
		for name, w := range map[string]model.Matrix{"qkv": l.QKV, "o_proj": l.O, "gate_up": l.GateUp, "down_proj": l.Down} {
			for _, blk := range w.Blocks() {
				if err := check(fmt.Sprintf("layer %d %s", i, name), blk); err != nil {
					return err
				}
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
	// a group of mixed types runs part by part, each into its columns of out
	off := 0
	for _, blk := range w.Blocks() {
		b.mul.MatMul(blk, m, x, ldx, out[off:], ldo, accumulate)
		off += blk.Rows
	}
	b.stats.GEMMTime += time.Since(t)
	b.stats.GEMMFlops += 2 * float64(m) * float64(w.Rows) * float64(w.Cols)
}

// widenRow writes row r of w to dst as float32 (dequantized for block types). The types were
// checked by New.
func widenRow(w model.Matrix, r int, dst []float32) {
	var err error
	if w.Type.Quantized() {
		err = quant.Dequantize(w.Type, w.Row(r), dst)
	} else {
		err = model.RowFloat32(w, r, dst)
	}
	if err != nil {
		panic(fmt.Sprintf("cpu backend: %v", err))
	}
}
