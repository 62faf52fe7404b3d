package cpu

import (
	"fmt"
	"time"

	"github.com/llmserve/llmserve/backend"
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

// rowGroup is a run of activation rows that go through one product: the rows of decodes
// (Generated chunks) and short prefill chunks together, on the streaming path, where every
// row's result is independent of the others; a long chunk (prefill) alone, on the path its own
// length picks. Either way a sequence's rows are computed exactly as they would be in a batch
// of their own, and a Generated token's row as a one-token decode computes it.
type rowGroup struct {
	start, n int
	rowwise  bool
}

// rowGroups appends to dst the groups of consecutive chunks of lengths n(0), n(1), ...
// (count chunks), where chunk i goes row by row when rowwise(i). With BF16Activations, whose
// results depend on the batch anyway, or BatchDependent, all rows are one product on the
// fastest path.
func (b *Backend) rowGroups(dst []rowGroup, count int, n func(i int) int, rowwise func(i int) bool) []rowGroup {
	dst = dst[:0]
	fast := b.mul.BF16Activations || b.batchDependent
	start := 0
	for i := range count {
		ni := n(i)
		short := fast || rowwise(i)
		if last := len(dst) - 1; short && last >= 0 && dst[last].rowwise {
			dst[last].n += ni
		} else {
			dst = append(dst, rowGroup{start: start, n: ni, rowwise: short})
		}
		start += ni
	}
	if fast {
		for i := range dst {
			dst[i].rowwise = false
		}
	}
	return dst
}

// streams reports whether a chunk of n tokens goes row by row through the streaming kernels:
// every Generated chunk (as its one-token decodes would), and a prompt chunk that is short.
func streams(s *backend.Seq, n int) bool {
	return s.Generated || n <= linear.StreamMaxRows
}

// project computes out[i·ldo+j] = Σ_p x[i·ldx+p]·w[j][p] for the rows of groups (added to out
// when accumulate is set): the activations times a weight matrix in its storage type. It counts
// the work in b.stats.
func (b *Backend) project(w model.Matrix, groups []rowGroup, x []float32, ldx int, out []float32, ldo int, accumulate bool) {
	t := time.Now()
	m := 0
	for _, g := range groups {
		xs, os := x[g.start*ldx:], out[g.start*ldo:]
		// a group of mixed types runs part by part, each into its columns of out
		off := 0
		for _, blk := range w.Blocks() {
			if g.rowwise {
				b.mul.MatMulRows(blk, g.n, xs, ldx, os[off:], ldo, accumulate)
			} else {
				b.mul.MatMul(blk, g.n, xs, ldx, os[off:], ldo, accumulate)
			}
			off += blk.Rows
		}
		m += g.n
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
