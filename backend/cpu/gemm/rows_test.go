package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// rowCounts are the row counts the row-stability tests multiply: every count to 64, and odd
// larger ones (past the Go kernels' 64-row single tile).
var rowCounts = func() []int {
	var ms []int
	for m := 1; m <= 64; m++ {
		ms = append(ms, m)
	}
	return append(ms, 67, 97, 130)
}()

// firstDiff is the first index where a and b differ bit for bit, or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// checkRowStable multiplies, for every m of rowCounts and two offsets, rows [off, off+m) of A
// in one product and requires every row of C to equal, bit for bit, that row multiplied alone.
func checkRowStable(t *testing.T, f mulFunc, transB bool, n, k int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	maxM := rowCounts[len(rowCounts)-1] + 3
	a := randMatrix(rng, maxM, k, k+1)
	var b []float32
	ldb := k + 2
	if transB {
		b = randMatrix(rng, n, k, ldb)
	} else {
		ldb = n + 2
		b = randMatrix(rng, k, n, ldb)
	}
	ldc := n + 3
	start := randMatrix(rng, maxM, n, ldc) // C's prior contents, for accumulate
	for _, accumulate := range []bool{false, true} {
		alone := make([]float32, maxM*ldc)
		copy(alone, start)
		for i := range maxM {
			f(1, n, k, a[i*(k+1):], k+1, b, ldb, alone[i*ldc:], ldc, accumulate)
		}
		for _, m := range rowCounts {
			for _, off := range []int{0, 3} {
				c := make([]float32, maxM*ldc)
				copy(c, start)
				f(m, n, k, a[off*(k+1):], k+1, b, ldb, c[off*ldc:], ldc, accumulate)
				for i := off; i < off+m; i++ {
					if j := firstDiff(c[i*ldc:i*ldc+n], alone[i*ldc:i*ldc+n]); j >= 0 {
						t.Fatalf("n=%d k=%d accumulate=%v: row %d of a %d-row product from row %d differs at column %d from the row alone: %v, %v",
							n, k, accumulate, i-off, m, off, j, c[i*ldc+j], alone[i*ldc+j])
					}
				}
			}
		}
	}
}

// rowShapes are (n, k) pairs: odd sizes, the reduction past one kBlock, attention's shapes.
var rowShapes = [][2]int{{1, 1}, {7, 5}, {33, 1029}, {64, 128}, {100, 1100}, {61, 13}, {128, 37}}

// TestRowStable: MatMulNTRows (serial and on two workers) and MatMulNNRows give every row the
// same bits whatever the row count and the row's place among them, on the AVX2 kernels and the
// portable ones.
func TestRowStable(t *testing.T) {
	for _, avx := range []bool{useAVX2, false} {
		t.Run(fmt.Sprint("avx2=", avx), func(t *testing.T) {
			saved := useAVX2
			useAVX2 = avx
			defer func() { useAVX2 = saved }()
			for _, nk := range rowShapes {
				for _, workers := range []int{1, 2} {
					checkRowStable(t, func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
						MatMulNTRows(workers, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
					}, true, nk[0], nk[1])
				}
				checkRowStable(t, MatMulNNRows, false, nk[0], nk[1])
			}
		})
	}
}

// TestRowStableMatchesReference: the row-stable products are products (float64 reference).
func TestRowStableMatchesReference(t *testing.T) {
	checkMul(t, "MatMulNTRows", func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
		MatMulNTRows(2, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
	}, true)
	checkMul(t, "MatMulNNRows", MatMulNNRows, false)
}

// TestNNRowsZeroExtension: a row of A whose entries past L are zero gives the same row of C
// whatever k ≥ L the product covers (n a multiple of the kernels' 16-column strip; k a multiple
// of 4 on the portable kernels, which sum four products before adding them): a query's weighted
// values do not depend on how many later keys its attention tile spans.
func TestNNRowsZeroExtension(t *testing.T) {
	for _, avx := range []bool{useAVX2, false} {
		t.Run(fmt.Sprint("avx2=", avx), func(t *testing.T) {
			saved := useAVX2
			useAVX2 = avx
			defer func() { useAVX2 = saved }()
			testNNRowsZeroExtension(t, avx)
		})
	}
}

func testNNRowsZeroExtension(t *testing.T, avx bool) {
	const n, rows = 64, 6
	rng := rand.New(rand.NewPCG(5, 6))
	const maxK = 1300
	b := randMatrix(rng, maxK, n, n)
	a := randMatrix(rng, rows, maxK, maxK)
	for _, l := range []int{1, 5, 200, 511, 513, 1030} {
		row := make([]float32, maxK)
		copy(row, a[:l])
		var want []float32
		first := l
		if !avx {
			first = (l + 3) / 4 * 4
		}
		for _, k := range []int{first, l + 1, l + 7, 512, 1024, 1100, maxK} {
			if k < first || !avx && k%4 != 0 {
				continue
			}
			// The row sits among others (row 2 of 6), as a query in a tile.
			x := make([]float32, rows*k)
			for i := range rows {
				copy(x[i*k:(i+1)*k], a[i*maxK:i*maxK+k])
			}
			copy(x[2*k:3*k], row[:k])
			c := make([]float32, rows*n)
			MatMulNNRows(rows, n, k, x, k, b, n, c, n, false)
			if want == nil {
				want = c[2*n : 3*n]
				continue
			}
			if j := firstDiff(c[2*n:3*n], want); j >= 0 {
				t.Fatalf("row of %d nonzero entries: k=%d differs from k=%d at column %d", l, k, first, j)
			}
		}
	}
}

// TestNTRowsColumnStable: a product's column (attention: one key's scores) is the same bits
// whatever the number of columns n, a multiple of ColumnQuantum, so whatever context a query's
// tile spans.
func TestNTRowsColumnStable(t *testing.T) {
	for _, avx := range []bool{useAVX2, false} {
		t.Run(fmt.Sprint("avx2=", avx), func(t *testing.T) {
			saved := useAVX2
			useAVX2 = avx
			defer func() { useAVX2 = saved }()
			rng := rand.New(rand.NewPCG(7, 8))
			for _, k := range []int{64, 37, 128} {
				const maxN, m = 20 * ColumnQuantum, 6
				a := randMatrix(rng, m, k, k)
				b := randMatrix(rng, maxN, k, k)
				want := make([]float32, m*maxN)
				MatMulNTRows(1, m, maxN, k, a, k, b, k, want, maxN, false)
				for n := ColumnQuantum; n < maxN; n += ColumnQuantum {
					c := make([]float32, m*n)
					MatMulNTRows(1, m, n, k, a, k, b, k, c, n, false)
					for i := range m {
						if j := firstDiff(c[i*n:(i+1)*n], want[i*maxN:i*maxN+n]); j >= 0 {
							t.Fatalf("k=%d: column %d of row %d differs with %d columns from %d", k, j, i, n, maxN)
						}
					}
				}
			}
		})
	}
}
