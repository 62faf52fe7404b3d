// all.cu: the one translation unit nvcc compiles into kernels.fatbin (see Makefile).
#include "elementwise.cu"
#include "gemm.cu"
#include "gemv.cu"
#include "quant.cu"
#include "qkv_post.cu"
#include "attention.cu"
#include "sample.cu"
