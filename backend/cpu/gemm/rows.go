package gemm

import "sync"

// Row-stable products. OpenBLAS computes an element of C by arithmetic that depends on where its
// row falls in the kernels' blocking, which depends on m: a row multiplied among 4 others and
// among 12 others can differ in the last bits (TestRowStable shows it for both the OpenBLAS and
// the plain entry points). The Go kernels take rows four at a time, every row of a four-row
// group summed alike; only a ragged last group takes other kernels. MatMulNTRows and
// MatMulNNRows run the Go kernels on whole four-row groups only (a ragged last group goes
// through a zero-padded copy), so a row of C is the same bits whatever m is and wherever the row
// sits: the CPU backend multiplies a prompt's rows this way, so how a prompt is cut into chunks
// does not change them.

// rowGroup is the number of rows the Go kernels take at a time.
const rowGroup = 4

// ColumnQuantum is the column count whose multiples keep a column's arithmetic independent of n
// in MatMulNTRows: the kernels take columns three (AVX2) or four (portable) at a time, in tiles
// whose widths are multiples of 12, and only the last n mod 3 (or 4) columns take another
// kernel. A product whose n varies (attention's keys) pads n to a multiple of it; a weight's
// fixed n needs nothing.
const ColumnQuantum = 12

// padPool recycles the scratch of a ragged last group.
var padPool = sync.Pool{New: func() any { return new([]float32) }}

// MatMulNTRows is MatMulNT (on up to workers goroutines) with each row of C computed by the same
// arithmetic whatever m is and wherever the row sits; see the comment above.
func MatMulNTRows(workers, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	checkShapes("MatMulNTRows", m, n, k, a, lda, k, b, ldb, n, k, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clearUnlessAccumulate(m, n, c, ldc, accumulate)
		return
	}
	workers = max(1, workers)
	whole := m / rowGroup * rowGroup
	if whole > 0 {
		matMulNTGoOn(workers, whole, n, k, a, lda, b, ldb, c, ldc, accumulate)
	}
	if whole == m {
		return
	}
	rows := m - whole
	buf := padPool.Get().(*[]float32)
	defer padPool.Put(buf)
	ap, cp := padded(buf, rows, k, n, a[whole*lda:], lda, c[whole*ldc:], ldc, accumulate)
	matMulNTGoOn(workers, rowGroup, n, k, ap, k, b, ldb, cp, n, accumulate)
	for i := range rows {
		copy(c[(whole+i)*ldc:(whole+i)*ldc+n], cp[i*n:(i+1)*n])
	}
}

// MatMulNNRows is MatMulNN on the calling goroutine with each row of C computed by the same
// arithmetic whatever m is and wherever the row sits. Besides, the reduction runs over blocks of
// k that start at fixed offsets and sums each block in order, so zeros appended to a row of A
// (and any rows appended to B) leave its row of C unchanged: attention's weighted values of a
// query do not depend on how many keys past its own the product covers.
func MatMulNNRows(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	checkShapes("MatMulNNRows", m, n, k, a, lda, k, b, ldb, k, n, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clearUnlessAccumulate(m, n, c, ldc, accumulate)
		return
	}
	whole := m / rowGroup * rowGroup
	if whole > 0 {
		matMulNNGoOn(1, whole, n, k, a, lda, b, ldb, c, ldc, accumulate)
	}
	if whole == m {
		return
	}
	rows := m - whole
	buf := padPool.Get().(*[]float32)
	defer padPool.Put(buf)
	ap, cp := padded(buf, rows, k, n, a[whole*lda:], lda, c[whole*ldc:], ldc, accumulate)
	matMulNNGoOn(1, rowGroup, n, k, ap, k, b, ldb, cp, n, accumulate)
	for i := range rows {
		copy(c[(whole+i)*ldc:(whole+i)*ldc+n], cp[i*n:(i+1)*n])
	}
}

// padded copies the last rows (fewer than rowGroup) of A, and of C when accumulating, into a
// zero-padded group of rowGroup rows held in buf.
func padded(buf *[]float32, rows, k, n int, a []float32, lda int, c []float32, ldc int, accumulate bool) (ap, cp []float32) {
	need := rowGroup * (k + n)
	if cap(*buf) < need {
		*buf = make([]float32, need)
	}
	s := (*buf)[:need]
	ap, cp = s[:rowGroup*k], s[rowGroup*k:]
	clear(s)
	for i := range rows {
		copy(ap[i*k:(i+1)*k], a[i*lda:i*lda+k])
		if accumulate {
			copy(cp[i*n:(i+1)*n], c[i*ldc:i*ldc+n])
		}
	}
	return ap, cp
}
