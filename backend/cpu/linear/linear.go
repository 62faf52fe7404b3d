// Package linear multiplies activations by weight matrices kept in their storage type (float32,
// BF16, F16, and llama.cpp's block quantizations through package quant): the linear layers of
// the CPU backend.
//
// Few activation rows (decode) take the streaming path: every weight row is read once, in place,
// by dot-product kernels that widen 16-bit weights in registers and accumulate in float32 with
// FMA (AVX-512, else AVX2 + FMA + F16C, else portable Go, chosen at run time from the CPU's
// features), four weight rows against one or four activation rows per call (AVX2: two or three
// activation rows per widened weight vector, each output summed exactly as for one row), rows
// spread over all workers. BF16 weights meet activations in a pair layout (each block's even
// elements, then its odd ones), so a shift and a mask widen a load of weights; on AVX2 up to six
// activation rows share each weight row, the rows read one after another as for one activation
// row (a verify pass's tokens, a few batched decodes), each output summed as for one row. With BF16Activations on a CPU with AVX512_BF16, BF16 weights against more than one
// activation row instead meet activations converted to BF16 in VDPBF16PS, which does twice the
// multiplications of an FMA per instruction; that streaming tile outruns the widened product at
// any row count, so such weights always stream. Otherwise many rows (prefill) take the
// matrix-product path: panels of weight rows are widened to float32 and multiplied by gemm's blocked kernel
// (OpenBLAS where built with cgo), where each widened weight is reused by every activation row.
//
// By default every path computes in float32 from the exact stored weights and activations, so
// results differ from a float32 reference only in summation order: a sequence's results then
// barely depend on how many rows share its product, and seeded sampling repeats across batch
// shapes. With Multiplier.BF16Activations, BF16 weights instead meet activations rounded to BF16
// (to nearest even; denormals to zero, as VCVTNEPS2BF16 does) on every path and kernel set, as
// llama.cpp (which converts activations to its BF16 dot-product type) and transformers in bf16
// do: on CPUs with AVX512_BF16 the VDPBF16PS kernels then run batched decode and prefill at up
// to twice the speed, but any difference in summation order upstream flips some roundings and
// spreads to about one BF16 ulp (2^-8) of the logits, so results depend on the batch.
// Denormal BF16 weights count as zero in VDPBF16PS and exactly elsewhere.
package linear

//go:generate go run gen_kernels.go

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/llmserve/llmserve/backend/cpu/gemm"
	"github.com/llmserve/llmserve/backend/cpu/quantmm"
	"github.com/llmserve/llmserve/internal/parallel"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// StreamMaxRows is the largest number of activation rows that takes the streaming path by
// default; more rows go through the widened matrix product (BF16 weights on CPUs with
// AVX512_BF16 stream at any count).
const StreamMaxRows = 32

// widePanelFloats bounds the float32 panel of weight rows one worker widens and multiplies at a
// time on the matrix-product path (1 MiB: it stays in the worker's L2 cache while gemm reuses
// it for every activation row).
const widePanelFloats = 1 << 18

// maxRowsMulti is the most activation rows one rowsMultiFunc kernel of any set takes (AVX-512's
// 32 registers hold two accumulators for each of nine, a verify pass of 8 drafted tokens; AVX2's
// 16 hold them for six).
const maxRowsMulti = 9

// streamChunkRows is the number of weight rows one streaming task covers: a multiple of 4
// (the kernels' row step), small enough that the workers finish together.
const streamChunkRows = 32

// Kernels names the kernel set MatMul uses on this machine ("avx512bf16", "avx512", "avx2" or
// "go").
func Kernels() string { return sets[0].name }

// KernelSets names the kernel sets this machine can run, fastest first (the portable "go" last).
func KernelSets() []string {
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = s.name
	}
	return names
}

// UseKernels makes mu run the kernel set named name (one of KernelSets), "" for the fastest.
func (mu *Multiplier) UseKernels(name string) error {
	if name == "" {
		mu.set = nil
		return nil
	}
	for _, s := range sets {
		if s.name == name {
			mu.set = s
			return nil
		}
	}
	return fmt.Errorf("kernel set %q: this machine runs %v", name, KernelSets())
}

// sets are the kernel sets this machine can run, fastest first.
var sets = kernelSets()

// Multiplier runs MatMul with its own scratch; it must not be used concurrently.
type Multiplier struct {
	// Threads is the number of workers (at least 1).
	Threads int
	// StreamMaxRows is the row count up to which the streaming path runs (when 0:
	// StreamMaxRows, and no limit for BF16 weights with VDPBF16PS kernels).
	StreamMaxRows int
	// BF16Activations rounds the activations that BF16 weights multiply to BF16 (see the
	// package comment): faster where VDPBF16PS runs, at the cost of batch-dependent results.
	BF16Activations bool
	// wide holds each worker's float32 panel for the matrix-product path.
	wide [][]float32
	// pairs holds the activations in pair layout for the BF16 pair kernels.
	pairs []float32
	// scratch holds each worker's result buffers for the streaming path.
	scratch []*streamScratch
	// round holds the activations rounded to BF16 (as float32) for BF16 weights; bf16 holds
	// them as BF16 for the dp kernels.
	round []float32
	bf16  []uint16
	// packed and sum are the quantized path's dense activation rows and products to add.
	packed, sum []float32
	// set is the kernel set in use (sets[0] unless a test picks another).
	set *kernelSet
	// packs holds the quantized matrices Prepack repacked, by their data's first byte.
	packs map[*byte]*quantmm.Packed
}

// Prepack repacks w's quantized blocks for the multi-row integer kernels where this machine runs
// them (quantmm.Packed): MatMul then reads the packed copy, which reads each weight block once
// for several activation rows, with results equal bit for bit at every row count (so a row's
// result still depends only on that row). The copy takes as much memory again as those blocks;
// w's own data is not read after (file-backed pages of a mapped GGUF can then be dropped).
// Call it before the Multiplier is used, not concurrently with it.
func (mu *Multiplier) Prepack(w model.Matrix) error {
	for _, blk := range w.Blocks() {
		if !blk.Type.Quantized() || blk.Rows == 0 || len(blk.Data) == 0 || !quantmm.Packs(blk.Type) {
			continue
		}
		if mu.packOf(blk) != nil {
			continue
		}
		p, err := quantmm.Pack(blk.Type, blk.Data, blk.Rows, blk.Cols)
		if err != nil {
			return fmt.Errorf("prepack %s %dx%d: %w", blk.Type, blk.Rows, blk.Cols, err)
		}
		if p == nil {
			continue
		}
		if mu.packs == nil {
			mu.packs = make(map[*byte]*quantmm.Packed)
		}
		mu.packs[&blk.Data[0]] = p
	}
	return nil
}

// PackedBytes is the memory the matrices Prepack repacked take.
func (mu *Multiplier) PackedBytes() int {
	n := 0
	for _, p := range mu.packs {
		n += p.Bytes()
	}
	return n
}

// packOf returns the packed copy of w, or nil.
func (mu *Multiplier) packOf(w model.Matrix) *quantmm.Packed {
	if len(mu.packs) == 0 || len(w.Data) == 0 {
		return nil
	}
	p := mu.packs[&w.Data[0]]
	if p == nil || p.Type() != w.Type || p.Rows() != w.Rows || p.Cols() != w.Cols {
		return nil
	}
	return p
}

// Supported reports whether MatMul can multiply matrices of w's type, or why not.
func Supported(w model.Matrix) error {
	if _, ok := floatIndex(w.Type); ok || (w.Type.Known() && w.Type.Quantized()) {
		return nil
	}
	return fmt.Errorf("%s weights have no CPU kernel", w.Type)
}

// MatMul computes out[i·ldo+j] = Σ_p x[i·ldx+p]·w[j][p] for i < m, j < w.Rows (added to out when
// accumulate is set). It panics when a slice is too short for its shape or w's type is not
// Supported: both are programming errors.
func (mu *Multiplier) MatMul(w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool) {
	mu.matMul(w, m, x, ldx, out, ldo, accumulate, pathAuto)
}

// MatMulRows is MatMul on the streaming path whatever m is: each output row is then computed by
// the same kernel, in the same summation order, whether its activation row is multiplied alone
// or among any number of others, so a row's result depends only on that row (unless
// BF16Activations is set, which rounds differently by row count). MatMul's choice of path by m
// does not have that property: the matrix-product path sums in another order.
func (mu *Multiplier) MatMulRows(w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool) {
	mu.matMul(w, m, x, ldx, out, ldo, accumulate, pathRows)
}

// MatMulStable is MatMul on the matrix-product path whatever m is, through products that compute
// each output row by the same arithmetic whatever m is and wherever the row sits among the m
// (gemm.MatMulNTRows, not OpenBLAS, whose blocking by m changes a row's last bits): a row's
// result depends only on that row, as on the streaming path, at the matrix product's speed for
// many rows. The CPU backend multiplies prompt rows this way, so a prompt's rows are the same
// bits however it is cut into chunks. BF16Activations and block-quantized weights take MatMul's
// paths.
func (mu *Multiplier) MatMulStable(w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool) {
	mu.matMul(w, m, x, ldx, out, ldo, accumulate, pathStable)
}

// The paths matMul can be asked for.
const (
	pathAuto   = iota // by row count (MatMul)
	pathRows          // streaming (MatMulRows)
	pathStable        // row-stable matrix products (MatMulStable)
)

func (mu *Multiplier) matMul(w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool, path int) {
	n, k := w.Rows, w.Cols
	ti, ok := floatIndex(w.Type)
	if !ok && Supported(w) != nil {
		panic(fmt.Sprintf("linear.MatMul: %s weights are not supported", w.Type))
	}
	rb := w.RowBytes()
	if len(w.Data) < n*rb {
		panic(fmt.Sprintf("linear.MatMul: %s matrix %dx%d has %d bytes, needs %d", w.Type, n, k, len(w.Data), n*rb))
	}
	if m < 0 || ldx < k || ldo < n {
		panic(fmt.Sprintf("linear.MatMul: m=%d ldx=%d ldo=%d for a %dx%d matrix", m, ldx, ldo, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	if len(x) < (m-1)*ldx+k || len(out) < (m-1)*ldo+n {
		panic(fmt.Sprintf("linear.MatMul: x has %d floats, out %d, for m=%d ldx=%d ldo=%d k=%d n=%d", len(x), len(out), m, ldx, ldo, k, n))
	}
	threads := max(1, mu.Threads)
	if !ok {
		mu.quantized(w, m, x, ldx, out, ldo, accumulate, threads)
		return
	}
	set := mu.set
	if set == nil {
		set = sets[0]
	}
	limit := mu.StreamMaxRows
	if path == pathRows {
		limit = math.MaxInt
	}
	if limit == 0 {
		limit = StreamMaxRows
		if mu.useDP(set, ti, 2) {
			// The dp kernels' 4x4 tile outruns the widened product at every row count measured.
			limit = math.MaxInt
		}
	}
	if k == 0 {
		if !accumulate {
			for i := range m {
				clear(out[i*ldo : i*ldo+n])
			}
		}
		return
	}
	if ti == idxBF16 && mu.BF16Activations {
		if m <= limit && mu.useDP(set, ti, m) {
			mu.stream(set, ti, w, m, x, ldx, out, ldo, accumulate, threads)
			return
		}
		x, ldx = mu.rounded(set, m, x, ldx, k), k
	}
	if path == pathStable && !mu.BF16Activations {
		if ti == idxF32 {
			gemm.MatMulNTRows(threads, m, n, k, x, ldx, w.F32(), k, out, ldo, accumulate)
		} else {
			mu.widened(set, ti, w, m, x, ldx, out, ldo, accumulate, threads, true)
		}
		return
	}
	if m <= limit || (ti == idxF32 && gemm.Impl() == "go" && m <= 4*limit) {
		mu.stream(set, ti, w, m, x, ldx, out, ldo, accumulate, threads)
		return
	}
	if ti == idxF32 {
		gemm.MatMulNT(m, n, k, x, ldx, w.F32(), k, out, ldo, accumulate)
		return
	}
	mu.widened(set, ti, w, m, x, ldx, out, ldo, accumulate, threads, false)
}

// quantized multiplies by block-quantized weights through package quant (integer dot products
// on 8-bit quantized activations, as llama.cpp does), which takes dense activation rows and sets
// its output: strided rows are packed first, and accumulation goes through scratch.
func (mu *Multiplier) quantized(w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool, threads int) {
	n, k := w.Rows, w.Cols
	xs := x[:(m-1)*ldx+k]
	if ldx != k && m > 1 {
		mu.packed = growFloats(mu.packed, m*k)
		for i := range m {
			copy(mu.packed[i*k:(i+1)*k], x[i*ldx:i*ldx+k])
		}
		xs = mu.packed
	}
	mul := func(out []float32, ldo int) { quantmm.MatMul(w.Type, w.Data, n, k, xs, m, out, ldo, threads) }
	if p := mu.packOf(w); p != nil {
		mul = func(out []float32, ldo int) { p.MatMul(xs, m, out, ldo, threads) }
	}
	if !accumulate {
		mul(out, ldo)
		return
	}
	mu.sum = growFloats(mu.sum, m*n)
	mul(mu.sum, n)
	for i := range m {
		o := out[i*ldo : i*ldo+n]
		for j, v := range mu.sum[i*n : (i+1)*n] {
			o[j] += v
		}
	}
}

// growFloats returns buf resliced to n, reallocated when too small.
func growFloats(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// widened is the matrix-product path for 16-bit weights: the weight rows are cut into panels
// that fit a worker's L2 cache; each worker widens a panel to float32 and multiplies it by all
// activation rows with a single-threaded gemm call, so the parallelism is Go's alone.
// With stable the panels go through gemm.MatMulNTRows (see MatMulStable).
func (mu *Multiplier) widened(set *kernelSet, ti int, w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool, threads int, stable bool) {
	n, k := w.Rows, w.Cols
	rb := w.RowBytes()
	rows := max(16, widePanelFloats/k/16*16)
	rows = min(rows, (n+threads-1)/threads) // at least one panel per worker
	if len(mu.wide) < threads {
		mu.wide = make([][]float32, threads)
	}
	kv := k - k%set.lanes
	parallel.For((n+rows-1)/rows, threads, func(wk, t int) {
		j0, j1 := t*rows, min(n, (t+1)*rows)
		if cap(mu.wide[wk]) < rows*k {
			mu.wide[wk] = make([]float32, rows*k)
		}
		panel := mu.wide[wk][:(j1-j0)*k]
		for r := range j1 - j0 {
			src := w.Data[(j0+r)*rb:]
			dst := panel[r*k : (r+1)*k]
			if kv > 0 {
				set.widen[ti](&src[0], &dst[0], kv)
			}
			if kv < k {
				widenGo(w.Type, &src[2*kv], &dst[kv], k-kv)
			}
		}
		if stable {
			gemm.MatMulNTRows(1, m, j1-j0, k, x, ldx, panel, k, out[j0:], ldo, accumulate)
		} else {
			gemm.MatMulNTSerial(m, j1-j0, k, x, ldx, panel, k, out[j0:], ldo, accumulate)
		}
	})
}

// stream is the path for few activation rows: weight rows are split into chunks of
// streamChunkRows over the workers, and each group of four rows meets every activation row
// while it is in the L1 cache. BF16 weights take activations already rounded to BF16, except
// where the set's dp kernels run (useDP), which round them here into the BF16 array they read.
func (mu *Multiplier) stream(set *kernelSet, ti int, w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool, threads int) {
	n, k := w.Rows, w.Cols
	rb := w.RowBytes()
	kv := k - k%set.lanes
	d1, d4, rowsK := set.dot4x1[ti], set.dot4x4[ti], set.rows[ti]
	// xk is what the float kernels read: x itself, or x in pair layout for the BF16 pair
	// kernels; xb is x in BF16 for the dp kernels (dp non-nil).
	xk, ldk := x, ldx
	var xb []uint16
	var dp *dpKernels
	// multi are the kernels that take several activation rows per weight vector with dot4x1's
	// results; none take the dp kernels' BF16 rows or the pair layout.
	multi := set.multi[ti]
	// rowsMulti, where set, takes several activation rows against weight rows streamed one
	// after another (see rowsMultiFunc), before multi.
	var rowsMulti []rowsMultiFunc
	switch {
	case mu.useDP(set, ti, m):
		multi = nil
		dp = set.dp
		kv = k - k%dpBlock
		xb = mu.bf16Rows(dp, m, x, ldx, k)
	case ti == idxBF16 && set.pair1 != nil && k >= set.pairBlock:
		kv = k - k%set.pairBlock
		d1, d4, rowsK = set.pair1, set.pair4, set.pairRows
		multi = nil
		rowsMulti = set.pairRowsMulti
		if cap(mu.pairs) < m*kv {
			mu.pairs = make([]float32, m*kv)
		}
		xk, ldk = mu.pairs[:m*kv], kv
		pairLayout(xk, x, m, ldx, kv, set.pairBlock)
	}
	if dp != nil {
		d4, rowsK = nil, nil // the dp kernels are called below in their place
	} else {
		// The 4x4 kernels keep one accumulator per output where the 4x1 and row kernels keep
		// two (their registers do not allow more), so a row's sum would depend on whether it
		// fell into a group of four activation rows: the 4x1 kernels (or the multi kernels,
		// whose every output equals theirs) take every row instead.
		d4 = nil
	}
	tasks := (n + streamChunkRows - 1) / streamChunkRows
	if n*k*max(m, 4) < 1<<16 {
		threads = 1
	}
	put := func(i, j int, v float32) {
		if accumulate {
			out[i*ldo+j] += v
		} else {
			out[i*ldo+j] = v
		}
	}
	// tail returns the product of weight row j and activation row i over the columns from p0,
	// in plain Go.
	tail := func(i, j, p0 int) float32 {
		if dp != nil {
			return dotTailBF16(w, j, xb[i*k:(i+1)*k], p0)
		}
		return dotTail(w, j, x[i*ldx:i*ldx+k], p0)
	}
	// store adds the columns past the kernels' lane multiple to a kernel's result.
	store := func(i, j int, v float32) {
		if kv < k {
			v += tail(i, j, kv)
		}
		put(i, j, v)
	}
	for len(mu.scratch) < threads {
		mu.scratch = append(mu.scratch, new(streamScratch))
	}
	parallel.For(tasks, threads, func(wk, t int) {
		j0 := t * streamChunkRows
		j1 := min(n, j0+streamChunkRows)
		sc := mu.scratch[wk]
		o4, o16, om, rowsBuf := &sc.o4, &sc.o16, &sc.om, &sc.rows
		// One activation row: stream the chunk's rows one after another (one sequential pass,
		// which the prefetchers follow at nearly the full read bandwidth; four interleaved rows
		// reach about half of it).
		j := j0
		if m == 1 && kv == k && rowsK != nil && j1-j0 >= 4 {
			// The row kernels sum each row as the 4x1 kernels do; the matrix's last rows past a
			// multiple of four go through tail below, as they do for more activation rows.
			buf := &sc.buf
			nr := (j1 - j0) &^ 3
			rowsK(&w.Data[j0*rb], nr, &xk[0], kv, &buf[0])
			dst := out[j0 : j0+nr]
			if accumulate {
				for r, v := range buf[:nr] {
					dst[r] += v
				}
			} else {
				copy(dst, buf[:nr])
			}
			j = j0 + nr
		}
		if m > 1 && rowsMulti != nil && j1-j0 >= 4 {
			// Several activation rows, the chunk's weight rows streamed one after another
			// (as for one row) in passes of as many activation rows as the set's widest kernel
			// takes and its pairPassBytes allows, split evenly, two or more per pass; the
			// matrix's last rows past a multiple of four go through tail below.
			nr := (j1 - j0) &^ 3
			widest := len(rowsMulti) - 1
			most := widest
			if set.pairPassBytes > 0 {
				most = min(widest, max(2, set.pairPassBytes/(4*kv)))
			}
			passes := max(min((m+most-1)/most, m/2), (m+widest-1)/widest)
			for p, i := 0, 0; p < passes; p++ {
				mp := (m - i) / (passes - p)
				rowsMulti[mp](&w.Data[j0*rb], rb, nr, &xk[i*ldk], 4*ldk, kv, &rowsBuf[0])
				if kv < k {
					for r := range nr {
						for ii := range mp {
							store(i+ii, j0+r, rowsBuf[r*mp+ii])
						}
					}
				} else {
					// No tail columns: the results go straight out (through store's closures
					// they cost a fifth of a 4-row verify step's extra time).
					scatterRows(out[i*ldo+j0:], ldo, rowsBuf[:nr*mp], mp, accumulate)
				}
				i += mp
			}
			j = j0 + nr
		}
		for ; j+4 <= j1; j += 4 {
			wp := &w.Data[j*rb]
			i := 0
			if kv == 0 {
				clear(o4[:])
			}
			if (d4 != nil || dp != nil) && kv > 0 {
				for ; i+4 <= m; i += 4 {
					if dp != nil {
						dp.dot4x4(wp, rb, &xb[i*k], 2*k, kv, o16)
					} else {
						d4(wp, rb, &xk[i*ldk], 4*ldk, kv, o16)
					}
					if kv < k {
						for ii := range 4 {
							for r := range 4 {
								store(i+ii, j+r, o16[4*ii+r])
							}
						}
						continue
					}
					// No tail columns: the 16 results go straight out (through store they
					// cost a sixth of the kernel's time at 16 activation rows).
					for ii := range 4 {
						dst := (*[4]float32)(out[(i+ii)*ldo+j:])
						v := (*[4]float32)(o16[4*ii:])
						if accumulate {
							dst[0] += v[0]
							dst[1] += v[1]
							dst[2] += v[2]
							dst[3] += v[3]
						} else {
							*dst = *v
						}
					}
				}
			}
			if kv > 0 {
				// Several activation rows per widened weight vector, each output summed as
				// dot4x1 sums it; the remaining rows go through dot4x1 below.
				for _, mk := range multi {
					// Four rows left go as two and two (not three and one through dot4x1).
					for ; i+mk.m <= m && !(mk.m == 3 && m-i == 4 && len(multi) > 1); i += mk.m {
						mk.f(wp, rb, 4, &xk[i*ldk], 4*ldk, kv, &om[0])
						for ii := range mk.m {
							for r := range 4 {
								store(i+ii, j+r, om[mk.m*r+ii])
							}
						}
					}
				}
			}
			for ; i < m; i++ {
				if kv > 0 {
					if dp != nil {
						dp.dot4x1(wp, rb, &xb[i*k], kv, o4)
					} else {
						d1(wp, rb, &xk[i*ldk], kv, o4)
					}
				}
				for r := range 4 {
					store(i, j+r, o4[r])
				}
			}
		}
		// The last rows of a matrix whose height is not a multiple of 4.
		for ; j < j1; j++ {
			for i := range m {
				put(i, j, tail(i, j, 0))
			}
		}
	})
}

// streamScratch is one worker's result buffers in stream. Arrays declared in its task closure
// would escape to the heap (their addresses reach the kernels through function values): five
// allocations per task of 32 weight rows, thousands per decode step of a small model.
type streamScratch struct {
	o4   [4]float32                              // a dot4x1 kernel's outputs
	o16  [16]float32                             // a dot4x4 kernel's outputs
	om   [4 * 3]float32                          // a multi kernel's outputs
	rows [streamChunkRows * maxRowsMulti]float32 // a rowsMulti kernel's outputs
	buf  [streamChunkRows]float32                // the one-row kernel's outputs
}

// scatterRows writes (or adds, with accumulate) the results of a rowsMultiFunc kernel, src[r·mp+i]
// for weight row r and activation row i, to dst[i·ldo+r]. A function of its own: inside stream's
// task closure (inlined there) the compiler kept the loop's index on the stack.
//
//go:noinline
func scatterRows(dst []float32, ldo int, src []float32, mp int, accumulate bool) {
	nr := len(src) / mp
	for i := range mp {
		d := dst[i*ldo : i*ldo+nr]
		if accumulate {
			for r := range d {
				d[r] += src[r*mp+i]
			}
		} else {
			for r := range d {
				d[r] = src[r*mp+i]
			}
		}
	}
}

// bf16Rows returns the first k elements of each of m rows of x (stride ldx) rounded to BF16, in
// m rows of k in the Multiplier's scratch.
func (mu *Multiplier) bf16Rows(dp *dpKernels, m int, x []float32, ldx, k int) []uint16 {
	if cap(mu.bf16) < m*k {
		mu.bf16 = make([]uint16, m*k)
	}
	xb := mu.bf16[:m*k]
	kv := k - k%16
	for i := range m {
		src, dst := x[i*ldx:i*ldx+k], xb[i*k:(i+1)*k]
		if kv > 0 {
			dp.toBF16(&src[0], &dst[0], kv)
		}
		for p := kv; p < k; p++ {
			dst[p] = roundBF16(src[p])
		}
	}
	return xb
}

// useDP reports whether m activation rows meet weights of type index ti in set's VDPBF16PS
// kernels: only with BF16Activations.
func (mu *Multiplier) useDP(set *kernelSet, ti, m int) bool {
	return mu.BF16Activations && set.useDP(ti, m)
}

// rounded returns the first k elements of each of m rows of x (stride ldx) rounded to BF16 and
// widened back, in m rows of k in the Multiplier's scratch: the activations BF16 weights are
// multiplied by.
func (mu *Multiplier) rounded(set *kernelSet, m int, x []float32, ldx, k int) []float32 {
	mu.round = growFloats(mu.round, m*k)
	xr := mu.round
	if set.round == nil {
		roundRowsGo(xr, x, m, ldx, k)
		return xr
	}
	kv := k - k%set.lanes
	for i := range m {
		src, dst := x[i*ldx:i*ldx+k], xr[i*k:(i+1)*k]
		if kv > 0 {
			set.round(&src[0], &dst[0], kv)
		}
		roundRowsGo(dst[kv:], src[kv:], 1, k-kv, k-kv)
	}
	return xr
}

// dotTailBF16 returns Σ_{p0≤p<k} w[j][p]·x[p] in plain Go for BF16 weights and activations.
func dotTailBF16(w model.Matrix, j int, x []uint16, p0 int) float32 {
	row := w.Row(j)
	var s float32
	for p := p0; p < w.Cols; p++ {
		wv := math.Float32frombits(uint32(binary.LittleEndian.Uint16(row[2*p:])) << 16)
		s += wv * math.Float32frombits(uint32(x[p])<<16)
	}
	return s
}

// dotTail returns Σ_{p0≤p<k} w[j][p]·x[p] in plain Go: the columns past the kernels' lane
// multiple, or whole rows.
func dotTail(w model.Matrix, j int, x []float32, p0 int) float32 {
	k := w.Cols
	var buf [goChunk]float32
	var s float32
	row := w.Row(j)
	for p := p0; p < k; p += goChunk {
		c := min(goChunk, k-p)
		ws := buf[:c]
		if w.Type == quant.F32 {
			ws = w.F32()[j*k+p : j*k+p+c]
		} else {
			widenGo(w.Type, &row[2*p], &buf[0], c)
		}
		for i, v := range ws {
			s += v * x[p+i]
		}
	}
	return s
}

// Widen converts 16-bit floats of type t (BF16 or F16) to float32: dst[i] = src[i] exactly.
func Widen(t quant.Type, src []uint16, dst []float32) {
	n := len(src)
	if len(dst) < n {
		panic(fmt.Sprintf("linear.Widen: %d values into %d", n, len(dst)))
	}
	if n == 0 {
		return
	}
	ti, ok := floatIndex(t)
	if !ok || ti == idxF32 {
		panic(fmt.Sprintf("linear.Widen: %s is not a 16-bit float type", t))
	}
	set := sets[0]
	nv := n - n%set.lanes
	src8 := unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 2*n)
	if nv > 0 {
		set.widen[ti](&src8[0], &dst[0], nv)
	}
	if nv < n {
		widenGo(t, &src8[2*nv], &dst[nv], n-nv)
	}
}
