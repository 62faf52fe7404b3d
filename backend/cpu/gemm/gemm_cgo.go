//go:build cgo

package gemm

// OpenBLAS is loaded at run time (dlopen), not linked, so that its kernels can be chosen before
// it initialises: OpenBLAS reads OPENBLAS_CORETYPE once, when the library loads, and releases
// that predate a CPU (Debian's 0.3.21 on AMD Zen 4, for one) fall back to generic SSE3 kernels
// that run 4-5x slower than the AVX-512 ones the CPU can use.

// #cgo LDFLAGS: -ldl
// #include <dlfcn.h>
// #include <stdlib.h>
//
// typedef void (*sgemm_fn)(int order, int transa, int transb, int m, int n, int k, float alpha,
//     const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
// typedef void (*set_threads_fn)(int);
// typedef char *(*corename_fn)(void);
//
// static sgemm_fn blas_sgemm;
// static set_threads_fn blas_set_threads;
// static corename_fn blas_corename;
//
// // blas_load opens OpenBLAS and resolves its entry points; it returns NULL or dlerror's text.
// static const char *blas_load(void) {
//     const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblas.dylib"};
//     void *h = NULL;
//     for (int i = 0; i < 3 && h == NULL; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
//     if (h == NULL) return dlerror();
//     blas_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
//     blas_set_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
//     blas_corename = (corename_fn)dlsym(h, "openblas_get_corename");
//     if (blas_sgemm == NULL) return "cblas_sgemm not found in OpenBLAS";
//     return NULL;
// }
//
// static void blas_call(int transb, int m, int n, int k, const float *a, int lda, const float *b,
//     int ldb, float beta, float *c, int ldc) {
//     blas_sgemm(101 /* CblasRowMajor */, 111 /* CblasNoTrans */, transb, m, n, k, 1.0f, a, lda,
//         b, ldb, beta, c, ldc);
// }
//
// static void blas_threads(int n) { if (blas_set_threads != NULL) blas_set_threads(n); }
// static const char *blas_core(void) { return blas_corename != NULL ? blas_corename() : "unknown"; }
import "C"

import (
	"log/slog"
	"math"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/llmserve/llmserve/internal/parallel"
)

// CBLAS transpose codes.
const (
	cblasNoTrans = 111
	cblasTrans   = 112
)

// blas is the outcome of loading OpenBLAS, once.
var blas struct {
	once sync.Once
	// ok is set when cblas_sgemm resolved; otherwise the Go kernel runs.
	ok bool
	// core is OpenBLAS's name for the kernels it runs (openblas_get_corename).
	core string
}

// coreType picks the OpenBLAS kernel family for this CPU: SkylakeX (AVX-512) where the CPU has
// the AVX-512 subsets those kernels use, Haswell (AVX2 + FMA) where it has those, nothing (let
// OpenBLAS decide) otherwise.
func coreType() string {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512CD:
		return "SkylakeX"
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return "Haswell"
	}
	return ""
}

// loadBLAS sets OPENBLAS_CORETYPE (unless the user set it), loads OpenBLAS, and limits it to one
// thread: the parallelism is Go's (each of GOMAXPROCS goroutines multiplies its own slice with
// a single-threaded call). OpenBLAS's own threads spin while they wait for work, which costs
// several times their speed when they share cores with Go's workers or other processes, as
// the widening, attention and element-wise steps between two products make them do.
// Without OpenBLAS the Go kernel runs.
func loadBLAS() {
	blas.once.Do(func() {
		if _, set := os.LookupEnv("OPENBLAS_CORETYPE"); !set {
			if ct := coreType(); ct != "" {
				// os.Setenv also sets the C environment in cgo programs, which OpenBLAS reads.
				_ = os.Setenv("OPENBLAS_CORETYPE", ct)
			}
		}
		if msg := C.blas_load(); msg != nil {
			slog.Warn("OpenBLAS not available; using the Go matrix kernel", "err", C.GoString(msg))
			return
		}
		blas.ok = true
		C.blas_threads(1)
		blas.core = C.GoString(C.blas_core())
		slog.Debug("loaded OpenBLAS", "core", blas.core, "coretype", os.Getenv("OPENBLAS_CORETYPE"))
	})
}

// Impl names the implementation behind MatMulNT and MatMulNN: "openblas" in cgo builds where the
// library loads, "go" otherwise.
func Impl() string {
	loadBLAS()
	if blas.ok {
		return "openblas"
	}
	return "go"
}

// Core is OpenBLAS's name for the kernels it runs (for example "SkylakeX"), or "" without it.
func Core() string {
	loadBLAS()
	return blas.core
}

// matMulNT and matMulNN receive validated, non-empty shapes (m, n, k > 0). With OpenBLAS they
// split C into one block of columns (or rows, when C is narrow) per worker.
func matMulNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	loadBLAS()
	if !blas.ok {
		matMulNTGo(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
		return
	}
	split(m, n, k, func(i0, i1, j0, j1 int) {
		sgemm(cblasTrans, i1-i0, j1-j0, k, a[i0*lda:], lda, b[j0*ldb:], ldb, c[i0*ldc+j0:], ldc, accumulate)
	})
}

func matMulNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	loadBLAS()
	if !blas.ok {
		matMulNNGo(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
		return
	}
	split(m, n, k, func(i0, i1, j0, j1 int) {
		sgemm(cblasNoTrans, i1-i0, j1-j0, k, a[i0*lda:], lda, b[j0:], ldb, c[i0*ldc+j0:], ldc, accumulate)
	})
}

func matMulNTSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	loadBLAS()
	if !blas.ok {
		matMulNTGoOn(1, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
		return
	}
	sgemm(cblasTrans, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

func matMulNNSerial(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	loadBLAS()
	if !blas.ok {
		matMulNNGoOn(1, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
		return
	}
	sgemm(cblasNoTrans, m, n, k, a, lda, b, ldb, c, ldc, accumulate)
}

// split runs fn over one block of C per worker (GOMAXPROCS): column blocks, multiples of 16
// wide, unless C has too few columns, then row blocks. Small products run whole.
func split(m, n, k int, fn func(i0, i1, j0, j1 int)) {
	workers := runtime.GOMAXPROCS(0)
	if 2*m*n*k < 4*parallelFlops || workers == 1 {
		fn(0, m, 0, n)
		return
	}
	if n >= 64*workers {
		cols := (n/workers + 15) / 16 * 16
		parallel.For((n+cols-1)/cols, workers, func(_, t int) {
			fn(0, m, t*cols, min(n, (t+1)*cols))
		})
		return
	}
	rows := (m + workers - 1) / workers
	parallel.For((m+rows-1)/rows, workers, func(_, t int) {
		fn(t*rows, min(m, (t+1)*rows), 0, n)
	})
}

func sgemm(transB int, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	if max(m, n, k, lda, ldb, ldc) > math.MaxInt32 {
		panic("gemm: dimension exceeds OpenBLAS's 32-bit blasint")
	}
	var beta C.float
	if accumulate {
		beta = 1
	}
	// The slices hold no Go pointers, so passing their backing arrays to C is allowed.
	C.blas_call(C.int(transB), C.int(m), C.int(n), C.int(k),
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		beta, (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}
