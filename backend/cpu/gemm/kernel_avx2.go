package gemm

import (
	"sync"

	"github.com/llmserve/llmserve/backend/cpu/gemm/internal/avx2"
)

// useAVX2 routes the pure-Go NT kernel through the AVX2/FMA assembly micro-kernels; it is a
// variable so tests can exercise the portable path on machines that have AVX2.
var useAVX2 = avx2.Available

// ntTileAVX2 is ntTile on the assembly micro-kernels: four rows of A against three rows of B,
// eight reduction elements per instruction; the reduction tail (fewer than eight elements) and
// ragged tile edges use the same kernels or scalar dot products.
func ntTileAVX2(i0, i1, j0, j1, p0, p1 int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	blocks := (p1 - p0) / 8
	tail := p0 + 8*blocks
	var out12 [12]float32
	var out4 [4]float32
	i := i0
	for ; i+4 <= i1; i += 4 {
		_ = a[(i+3)*lda+p1-1] // the kernels read four full rows of A
		j := j0
		for ; j+3 <= j1; j += 3 {
			_ = b[(j+2)*ldb+p1-1]
			avx2.Dot4x3(blocks, &a[i*lda+p0], lda, &b[j*ldb+p0], ldb, &out12)
			for r := range 4 {
				ar := a[(i+r)*lda+tail : (i+r)*lda+p1]
				cr := c[(i+r)*ldc : (i+r)*ldc+j1]
				for q := range 3 {
					s := out12[r*3+q]
					if tail < p1 {
						s += dot(ar, b[(j+q)*ldb+tail:(j+q)*ldb+p1])
					}
					store1(cr, j+q, s, add)
				}
			}
		}
		// The last one or two columns: one row of B against the four rows of A.
		for ; j < j1; j++ {
			bj := b[j*ldb+p0 : j*ldb+p1]
			avx2.Dot1x4(blocks, &bj[0], &a[i*lda+p0], lda, &out4)
			for r := range 4 {
				s := out4[r]
				if tail < p1 {
					s += dot(bj[tail-p0:], a[(i+r)*lda+tail:(i+r)*lda+p1])
				}
				store1(c[(i+r)*ldc:(i+r)*ldc+j1], j, s, add)
			}
		}
	}
	for ; i < i1; i++ {
		ar := a[i*lda+p0 : i*lda+p1]
		cr := c[i*ldc : i*ldc+j1]
		j := j0
		for ; j+4 <= j1; j += 4 {
			_ = b[(j+3)*ldb+p1-1]
			avx2.Dot1x4(blocks, &ar[0], &b[j*ldb+p0], ldb, &out4)
			for q := range 4 {
				s := out4[q]
				if tail < p1 {
					s += dot(ar[tail-p0:], b[(j+q)*ldb+tail:(j+q)*ldb+p1])
				}
				store1(cr, j+q, s, add)
			}
		}
		for ; j < j1; j++ {
			store1(cr, j, dot(ar, b[j*ldb+p0:j*ldb+p1]), add)
		}
	}
}

// packPool recycles the per-tile buffers nnTileAVX2 packs B panels into.
var packPool = sync.Pool{New: func() any { return new([]float32) }}

// nnTileAVX2 is nnTile on the assembly outer-product kernel, 4×16 blocks of C at a time; ragged
// edges (fewer than four rows or sixteen columns) go through the plain-Go nnTile.
//
// The kernel walks down a 16-column strip of B; read in place, consecutive rows are ldb apart
// and a strip of kBlock rows touches hundreds of pages, so the strips are first copied into a
// contiguous kk×16 panel each, which every row group of the tile then reuses.
func nnTileAVX2(i0, i1, j0, j1, p0, p1 int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	kk := p1 - p0
	strips := (j1 - j0) / 16
	rows4 := (i1 - i0) / 4 * 4
	if rows4 == 0 || strips == 0 {
		nnTile(i0, i1, j0, j1, p0, p1, a, lda, b, ldb, c, ldc)
		return
	}
	bufp := packPool.Get().(*[]float32)
	defer packPool.Put(bufp)
	if cap(*bufp) < strips*kk*16 {
		*bufp = make([]float32, strips*kk*16)
	}
	packed := (*bufp)[:strips*kk*16]
	for s := range strips {
		dst := packed[s*kk*16 : (s+1)*kk*16]
		j := j0 + 16*s
		for p := range kk {
			copy(dst[p*16:p*16+16], b[(p0+p)*ldb+j:(p0+p)*ldb+j+16])
		}
	}
	for i := i0; i < i0+rows4; i += 4 {
		_ = a[(i+3)*lda+p1-1] // the kernel reads four rows of A and writes four rows of C
		for s := range strips {
			j := j0 + 16*s
			_ = c[(i+3)*ldc+j+15]
			avx2.AddNN4x16(kk, &a[i*lda+p0], lda, &packed[s*kk*16], 16, &c[i*ldc+j], ldc)
		}
	}
	if jEnd := j0 + 16*strips; jEnd < j1 {
		nnTile(i0, i0+rows4, jEnd, j1, p0, p1, a, lda, b, ldb, c, ldc)
	}
	if i0+rows4 < i1 {
		nnTile(i0+rows4, i1, j0, j1, p0, p1, a, lda, b, ldb, c, ldc)
	}
}
