package gemm

import (
	"runtime"

	"github.com/llmserve/llmserve/internal/parallel"
)

// The pure-Go kernel is compiled in every build so that tests and benchmarks can compare it
// with OpenBLAS; builds without cgo route MatMulNT and MatMulNN to it.

const (
	// kBlock is how many elements of the reduction dimension one pass over a tile covers, so the
	// A and B panels a tile touches stay in L2 between the rows and columns that reuse them.
	kBlock = 512
	// rowBlock is the tile height used when m is large (prefill).
	rowBlock = 32
	// minColBlock is the narrowest tile; narrower tiles cost more in scheduling than they give.
	minColBlock = 16
	// parallelFlops is the smallest product worth spreading over goroutines.
	parallelFlops = 1 << 17
)

// tiling splits an m×n output into tiles of at most rows×cols.
type tiling struct {
	m, n       int
	rows, cols int
}

func (t tiling) count() (mTiles, nTiles int) {
	return (t.m + t.rows - 1) / t.rows, (t.n + t.cols - 1) / t.cols
}

// chooseTiling picks tile sizes that give every worker several tiles (so uneven progress evens
// out) while keeping tiles tall enough to reuse each loaded B row across many A rows.
// Tile widths are multiples of colAlign, the micro-kernels' column step.
func chooseTiling(m, n, k, workers, colAlign int) tiling {
	rows := m
	if m > 2*rowBlock {
		rows = rowBlock
	}
	mTiles := (m + rows - 1) / rows
	wantN := max(1, (4*workers+mTiles-1)/mTiles)
	cols := (n + wantN - 1) / wantN
	cols = max((minColBlock+colAlign-1)/colAlign*colAlign, (cols+colAlign-1)/colAlign*colAlign)
	// Cap the width so a tile's B panel (cols × kBlock floats) stays around 256 KiB.
	cols = min(cols, max(minColBlock, 128*512/min(k, kBlock)/colAlign*colAlign))
	return tiling{m: m, n: n, rows: rows, cols: cols}
}

// forEachTile runs fn on every tile, on up to workers goroutines when the product is big enough.
func forEachTile(m, n, k, colAlign, workers int, fn func(i0, i1, j0, j1 int)) {
	if 2*m*n*k < parallelFlops {
		workers = 1
	}
	t := chooseTiling(m, n, k, workers, colAlign)
	mTiles, nTiles := t.count()
	total := mTiles * nTiles
	workers = min(workers, total)
	run := func(_, idx int) {
		// Column tiles vary fastest, so concurrent workers share the same A rows.
		ti, tj := idx/nTiles, idx%nTiles
		i0, j0 := ti*t.rows, tj*t.cols
		fn(i0, min(i0+t.rows, m), j0, min(j0+t.cols, n))
	}
	parallel.For(total, workers, run)
}

// matMulNTGo is the pure-Go C (+)= A·Bᵀ on GOMAXPROCS workers. Shapes are validated by the
// caller and non-empty.
func matMulNTGo(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	matMulNTGoOn(runtime.GOMAXPROCS(0), m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// matMulNTGoOn is matMulNTGo on at most workers goroutines.
func matMulNTGoOn(workers, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	// 12 columns: four passes of the 1×4 kernel or four of the 4×3 one.
	forEachTile(m, n, k, 12, workers, func(i0, i1, j0, j1 int) {
		for p0 := 0; p0 < k; p0 += kBlock {
			p1 := min(p0+kBlock, k)
			add := accumulate || p0 > 0
			if useAVX2 {
				ntTileAVX2(i0, i1, j0, j1, p0, p1, a, lda, b, ldb, c, ldc, add)
			} else {
				ntTile(i0, i1, j0, j1, p0, p1, a, lda, b, ldb, c, ldc, add)
			}
		}
	})
}

// ntTile computes one tile over the reduction range [p0, p1), two rows of A against four rows of
// B at a time so every loaded element feeds several independent accumulators.
func ntTile(i0, i1, j0, j1, p0, p1 int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	i := i0
	for ; i+2 <= i1; i += 2 {
		a0 := a[i*lda+p0 : i*lda+p1]
		a1 := a[(i+1)*lda+p0 : (i+1)*lda+p1]
		c0 := c[i*ldc : i*ldc+j1]
		c1 := c[(i+1)*ldc : (i+1)*ldc+j1]
		j := j0
		for ; j+4 <= j1; j += 4 {
			b0 := b[j*ldb+p0 : j*ldb+p1]
			b1 := b[(j+1)*ldb+p0 : (j+1)*ldb+p1]
			b2 := b[(j+2)*ldb+p0 : (j+2)*ldb+p1]
			b3 := b[(j+3)*ldb+p0 : (j+3)*ldb+p1]
			s00, s01, s02, s03, s10, s11, s12, s13 := dot2x4(a0, a1, b0, b1, b2, b3)
			store4(c0[j:j+4], s00, s01, s02, s03, add)
			store4(c1[j:j+4], s10, s11, s12, s13, add)
		}
		for ; j < j1; j++ {
			bj := b[j*ldb+p0 : j*ldb+p1]
			store1(c0, j, dot(a0, bj), add)
			store1(c1, j, dot(a1, bj), add)
		}
	}
	for ; i < i1; i++ {
		a0 := a[i*lda+p0 : i*lda+p1]
		c0 := c[i*ldc : i*ldc+j1]
		j := j0
		for ; j+4 <= j1; j += 4 {
			b0 := b[j*ldb+p0 : j*ldb+p1]
			b1 := b[(j+1)*ldb+p0 : (j+1)*ldb+p1]
			b2 := b[(j+2)*ldb+p0 : (j+2)*ldb+p1]
			b3 := b[(j+3)*ldb+p0 : (j+3)*ldb+p1]
			s0, s1, s2, s3 := dot1x4(a0, b0, b1, b2, b3)
			store4(c0[j:j+4], s0, s1, s2, s3, add)
		}
		for ; j < j1; j++ {
			store1(c0, j, dot(a0, b[j*ldb+p0:j*ldb+p1]), add)
		}
	}
}

func store4(c []float32, s0, s1, s2, s3 float32, add bool) {
	c = c[:4]
	if add {
		c[0] += s0
		c[1] += s1
		c[2] += s2
		c[3] += s3
		return
	}
	c[0], c[1], c[2], c[3] = s0, s1, s2, s3
}

func store1(c []float32, j int, s float32, add bool) {
	if add {
		c[j] += s
		return
	}
	c[j] = s
}

// dot2x4 returns the eight dot products of a0 and a1 with b0..b3 (all the same length).
func dot2x4(a0, a1, b0, b1, b2, b3 []float32) (s00, s01, s02, s03, s10, s11, s12, s13 float32) {
	a1 = a1[:len(a0)]
	b0 = b0[:len(a0)]
	b1 = b1[:len(a0)]
	b2 = b2[:len(a0)]
	b3 = b3[:len(a0)]
	for p, x0 := range a0 {
		x1 := a1[p]
		y0, y1, y2, y3 := b0[p], b1[p], b2[p], b3[p]
		s00 += x0 * y0
		s01 += x0 * y1
		s02 += x0 * y2
		s03 += x0 * y3
		s10 += x1 * y0
		s11 += x1 * y1
		s12 += x1 * y2
		s13 += x1 * y3
	}
	return
}

// dot1x4 returns the dot products of a0 with b0..b3, unrolled by two along the reduction so
// eight independent sums hide the floating-point add latency.
func dot1x4(a0, b0, b1, b2, b3 []float32) (s0, s1, s2, s3 float32) {
	b0 = b0[:len(a0)]
	b1 = b1[:len(a0)]
	b2 = b2[:len(a0)]
	b3 = b3[:len(a0)]
	var t0, t1, t2, t3 float32
	p := 0
	for ; p+2 <= len(a0); p += 2 {
		x, y := a0[p], a0[p+1]
		s0 += x * b0[p]
		s1 += x * b1[p]
		s2 += x * b2[p]
		s3 += x * b3[p]
		t0 += y * b0[p+1]
		t1 += y * b1[p+1]
		t2 += y * b2[p+1]
		t3 += y * b3[p+1]
	}
	if p < len(a0) {
		x := a0[p]
		s0 += x * b0[p]
		s1 += x * b1[p]
		s2 += x * b2[p]
		s3 += x * b3[p]
	}
	return s0 + t0, s1 + t1, s2 + t2, s3 + t3
}

// dot returns Σ x[p]·y[p] over len(x) elements, with four independent partial sums.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	p := 0
	for ; p+4 <= len(x); p += 4 {
		s0 += x[p] * y[p]
		s1 += x[p+1] * y[p+1]
		s2 += x[p+2] * y[p+2]
		s3 += x[p+3] * y[p+3]
	}
	for ; p < len(x); p++ {
		s0 += x[p] * y[p]
	}
	return (s0 + s1) + (s2 + s3)
}

// matMulNNGo is the pure-Go C (+)= A·B on GOMAXPROCS workers. Shapes are validated by the
// caller and non-empty.
func matMulNNGo(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	matMulNNGoOn(runtime.GOMAXPROCS(0), m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// matMulNNGoOn is matMulNNGo on at most workers goroutines.
func matMulNNGoOn(workers, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	forEachTile(m, n, k, 16, workers, func(i0, i1, j0, j1 int) {
		if !accumulate {
			for i := i0; i < i1; i++ {
				clear(c[i*ldc+j0 : i*ldc+j1])
			}
		}
		for p0 := 0; p0 < k; p0 += kBlock {
			p1 := min(p0+kBlock, k)
			if useAVX2 {
				nnTileAVX2(i0, i1, j0, j1, p0, p1, a, lda, b, ldb, c, ldc)
			} else {
				nnTile(i0, i1, j0, j1, p0, p1, a, lda, b, ldb, c, ldc)
			}
		}
	})
}

// nnTile adds A[i0:i1, p0:p1]·B[p0:p1, j0:j1] into C, streaming rows of B along contiguous
// columns: two rows of C take four rows of B per pass, eight multiply-adds per C element update.
func nnTile(i0, i1, j0, j1, p0, p1 int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	w := j1 - j0
	i := i0
	for ; i+2 <= i1; i += 2 {
		ar0 := a[i*lda : i*lda+p1]
		ar1 := a[(i+1)*lda : (i+1)*lda+p1]
		c0 := c[i*ldc+j0 : i*ldc+j1]
		c1 := c[(i+1)*ldc+j0 : (i+1)*ldc+j1]
		p := p0
		for ; p+4 <= p1; p += 4 {
			b0 := b[p*ldb+j0 : p*ldb+j0+w]
			b1 := b[(p+1)*ldb+j0 : (p+1)*ldb+j0+w]
			b2 := b[(p+2)*ldb+j0 : (p+2)*ldb+j0+w]
			b3 := b[(p+3)*ldb+j0 : (p+3)*ldb+j0+w]
			axpy2x4(c0, c1, ar0[p:p+4], ar1[p:p+4], b0, b1, b2, b3)
		}
		for ; p < p1; p++ {
			bp := b[p*ldb+j0 : p*ldb+j0+w]
			axpy(c0, ar0[p], bp)
			axpy(c1, ar1[p], bp)
		}
	}
	for ; i < i1; i++ {
		ar0 := a[i*lda : i*lda+p1]
		c0 := c[i*ldc+j0 : i*ldc+j1]
		p := p0
		for ; p+4 <= p1; p += 4 {
			b0 := b[p*ldb+j0 : p*ldb+j0+w]
			b1 := b[(p+1)*ldb+j0 : (p+1)*ldb+j0+w]
			b2 := b[(p+2)*ldb+j0 : (p+2)*ldb+j0+w]
			b3 := b[(p+3)*ldb+j0 : (p+3)*ldb+j0+w]
			axpy1x4(c0, ar0[p:p+4], b0, b1, b2, b3)
		}
		for ; p < p1; p++ {
			axpy(c0, ar0[p], b[p*ldb+j0:p*ldb+j0+w])
		}
	}
}

// axpy2x4 adds Σ_q x0[q]·bq to c0 and Σ_q x1[q]·bq to c1 for q = 0..3.
func axpy2x4(c0, c1, x0, x1, b0, b1, b2, b3 []float32) {
	x0, x1 = x0[:4], x1[:4]
	a00, a01, a02, a03 := x0[0], x0[1], x0[2], x0[3]
	a10, a11, a12, a13 := x1[0], x1[1], x1[2], x1[3]
	c1 = c1[:len(c0)]
	b0 = b0[:len(c0)]
	b1 = b1[:len(c0)]
	b2 = b2[:len(c0)]
	b3 = b3[:len(c0)]
	for j := range c0 {
		y0, y1, y2, y3 := b0[j], b1[j], b2[j], b3[j]
		c0[j] += a00*y0 + a01*y1 + a02*y2 + a03*y3
		c1[j] += a10*y0 + a11*y1 + a12*y2 + a13*y3
	}
}

// axpy1x4 adds Σ_q x[q]·bq to c for q = 0..3.
func axpy1x4(c, x, b0, b1, b2, b3 []float32) {
	x = x[:4]
	a0, a1, a2, a3 := x[0], x[1], x[2], x[3]
	b0 = b0[:len(c)]
	b1 = b1[:len(c)]
	b2 = b2[:len(c)]
	b3 = b3[:len(c)]
	for j := range c {
		c[j] += a0*b0[j] + a1*b1[j] + a2*b2[j] + a3*b3[j]
	}
}

// axpy adds alpha·x to c.
func axpy(c []float32, alpha float32, x []float32) {
	x = x[:len(c)]
	for j := range c {
		c[j] += alpha * x[j]
	}
}
