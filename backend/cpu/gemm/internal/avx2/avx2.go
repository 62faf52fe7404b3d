// Package avx2 holds the AVX2/FMA assembly micro-kernels of the pure-Go GEMM. It is separate
// from package gemm because a package that uses cgo (gemm's OpenBLAS binding) cannot contain Go
// assembly.
package avx2

// Available reports whether the kernels can run: amd64 with AVX2 and FMA, not built with the
// purego tag. Calling a kernel when it is false panics.
var Available = available()
