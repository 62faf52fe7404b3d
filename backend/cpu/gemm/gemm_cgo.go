//go:build cgo

package gemm

// #cgo pkg-config: openblas
// #include <cblas.h>
import "C"

import "math"

// Impl names the implementation behind MatMulNT and MatMulNN: "openblas" in cgo builds.
func Impl() string { return "openblas" }

// matMulNT and matMulNN receive validated, non-empty shapes (m, n, k > 0).
func matMulNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	sgemm(C.CblasNoTrans, C.CblasTrans, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

func matMulNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	sgemm(C.CblasNoTrans, C.CblasNoTrans, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

func sgemm(transA, transB C.enum_CBLAS_TRANSPOSE, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	if max(m, n, k, lda, ldb, ldc) > math.MaxInt32 {
		panic("gemm: dimension exceeds OpenBLAS's 32-bit blasint")
	}
	var beta C.float
	if accumulate {
		beta = 1
	}
	// The slices hold no Go pointers, so passing their backing arrays to C is allowed.
	C.cblas_sgemm(C.CblasRowMajor, transA, transB, C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		beta, (*C.float)(&c[0]), C.blasint(ldc))
}
