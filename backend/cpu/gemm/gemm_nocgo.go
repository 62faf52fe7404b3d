//go:build !cgo

package gemm

// Impl names the implementation behind MatMulNT and MatMulNN: "go" in builds without cgo.
func Impl() string { return "go" }

// matMulNT and matMulNN receive validated, non-empty shapes (m, n, k > 0).
func matMulNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	matMulNTGo(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

func matMulNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	matMulNNGo(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// Core is OpenBLAS's name for its kernels; "" in builds without cgo.
func Core() string { return "" }

func matMulNTSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	matMulNTGoOn(1, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

func matMulNNSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	matMulNNGoOn(1, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}
