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

// The paths a row group's products take.
const (
	// pathFast is linear's choice by row count (MatMul): the fastest, batch-dependent.
	pathFast = iota
	// pathRows streams (MatMulRows): each row computed as it would be alone.
	pathRows
	// pathStable is the row-stable matrix product (MatMulStable): each row computed as it
	// would be alone, at the matrix product's speed for many rows.
	pathStable
	// pathOwn is a long prompt chunk's own product on linear's fastest path for its row count
	// (never shared with another chunk): its rows do not depend on the batch, but do on the
	// chunk's length.
	pathOwn
)

// rowGroup is a run of activation rows that go through one product. By default the rows of
// Generated chunks (decodes, speculative tokens) and of short prompt chunks go through the
// streaming kernels, and a long prompt chunk through a product of its own: a sequence's rows are
// computed exactly as they would be in a batch of their own, and a Generated token's row as its
// one-token decode computes it. With Deterministic every prompt chunk goes through the
// row-stable matrix product instead, whatever its length, so a prompt token's row is also the
// same however the prompt is cut into chunks.
type rowGroup struct {
	start, n int
	path     int
}

// rowGroups appends to dst the groups of consecutive chunks of lengths n(0), n(1), ...
// (count chunks), chunk i on the path path(i); consecutive chunks on one path share a product.
// With BF16Activations, whose results depend on the batch anyway, or BatchDependent, all rows
// are one product on the fastest path.
func (b *Backend) rowGroups(dst []rowGroup, count int, n func(i int) int, path func(i int) int) []rowGroup {
	dst = dst[:0]
	fast := b.fast()
	start := 0
	for i := range count {
		ni := n(i)
		p := pathFast
		if !fast {
			p = path(i)
		}
		if last := len(dst) - 1; last >= 0 && dst[last].path == p && p != pathOwn {
			dst[last].n += ni
		} else {
			dst = append(dst, rowGroup{start: start, n: ni, path: p})
		}
		start += ni
	}
	return dst
}

// fast reports whether rows are grouped for speed rather than invariance (BF16Activations or
// BatchDependent).
func (b *Backend) fast() bool { return b.mul.BF16Activations || b.batchDependent }

// chunkPath is the path of the n rows of chunk s through the layers' products: the streaming
// kernels for Generated tokens (as their one-token decodes); for prompt tokens the row-stable
// product with Deterministic, else the streaming kernels for a short chunk and a product of its
// own for a long one.
func (b *Backend) chunkPath(s *backend.Seq, n int) int {
	switch {
	case s.Generated:
		return pathRows
	case b.deterministic:
		return pathStable
	case n <= linear.StreamMaxRows:
		return pathRows
	}
	return pathOwn
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
			switch g.path {
			case pathRows:
				b.mul.MatMulRows(blk, g.n, xs, ldx, os[off:], ldo, accumulate)
			case pathStable:
				b.mul.MatMulStable(blk, g.n, xs, ldx, os[off:], ldo, accumulate)
			default:
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
