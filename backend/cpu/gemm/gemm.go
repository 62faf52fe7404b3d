// Package gemm multiplies single-precision row-major matrices for the CPU backend: OpenBLAS
// cblas_sgemm when built with cgo, a blocked, goroutine-parallel kernel without cgo (AVX2/FMA
// assembly micro-kernels on amd64 CPUs that have them, plain Go elsewhere or with -tags purego).
//
// MatMulNTRows and MatMulNNRows always run the Go kernels, arranged so that a row of C is the
// same bits whatever the number of rows (OpenBLAS does not promise that; see rows.go).
//
// Both entry points follow BLAS conventions for leading dimensions: row i of a matrix X with
// leading dimension ldx starts at X[i*ldx]. Shapes that do not fit their slices panic, because
// they are programming errors and the OpenBLAS path would otherwise read out of bounds.
package gemm

import "fmt"

// MatMulNT computes C = A·Bᵀ (or C += A·Bᵀ when accumulate is set): C[i][j] = Σ_p A[i][p]·B[j][p].
// A is m×k (lda ≥ k), B is n×k (ldb ≥ k; a weight stored [out_features][in_features] as in
// Hugging Face checkpoints), C is m×n (ldc ≥ n).
func MatMulNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	checkShapes("MatMulNT", m, n, k, a, lda, k, b, ldb, n, k, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clearUnlessAccumulate(m, n, c, ldc, accumulate)
		return
	}
	matMulNT(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// MatMulNTSerial is MatMulNT on the calling goroutine alone, for callers that spread their own
// work over goroutines.
func MatMulNTSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	checkShapes("MatMulNTSerial", m, n, k, a, lda, k, b, ldb, n, k, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clearUnlessAccumulate(m, n, c, ldc, accumulate)
		return
	}
	matMulNTSerial(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// MatMulNNSerial is MatMulNN on the calling goroutine alone.
func MatMulNNSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	checkShapes("MatMulNNSerial", m, n, k, a, lda, k, b, ldb, k, n, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clearUnlessAccumulate(m, n, c, ldc, accumulate)
		return
	}
	matMulNNSerial(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// MatMulNN computes C = A·B (or C += A·B when accumulate is set): C[i][j] = Σ_p A[i][p]·B[p][j].
// A is m×k (lda ≥ k), B is k×n (ldb ≥ n), C is m×n (ldc ≥ n).
func MatMulNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	checkShapes("MatMulNN", m, n, k, a, lda, k, b, ldb, k, n, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clearUnlessAccumulate(m, n, c, ldc, accumulate)
		return
	}
	matMulNN(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// checkShapes panics with a descriptive message when a matrix does not fit its slice. B is
// bRows×bCols with leading dimension ldb.
func checkShapes(op string, m, n, k int, a []float32, lda, aCols int, b []float32, ldb, bRows, bCols int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm.%s: negative dimension m=%d n=%d k=%d", op, m, n, k))
	}
	checkMatrix(op, "A", m, aCols, a, lda)
	checkMatrix(op, "B", bRows, bCols, b, ldb)
	checkMatrix(op, "C", m, n, c, ldc)
}

func checkMatrix(op, name string, rows, cols int, x []float32, ld int) {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("gemm.%s: leading dimension of %s is %d, want >= %d", op, name, ld, max(1, cols)))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		panic(fmt.Sprintf("gemm.%s: %s is %dx%d with leading dimension %d and needs %d elements, has %d",
			op, name, rows, cols, ld, need, len(x)))
	}
}

// clearUnlessAccumulate handles k == 0, where the product is the zero matrix.
func clearUnlessAccumulate(m, n int, c []float32, ldc int, accumulate bool) {
	if accumulate {
		return
	}
	for i := range m {
		clear(c[i*ldc : i*ldc+n])
	}
}
