// Package cublaslt finds and loads NVIDIA's cuBLASLt (libcublasLt) at run time, without cgo,
// for the CUDA backend's GEMMs. cuBLASLt is not part of the driver: it comes with the CUDA
// toolkit or the nvidia-cublas Python wheel, and Load looks in the places Candidates lists.
//
// Past the loader, it binds the dozen functions a BF16 GEMM needs (purego >= v0.11.3:
// cublasLtMatmul takes 16 arguments) and builds Plans: one per weight shape, with one
// algorithm chosen once by the library's heuristic, rejecting split-K, and reused for every row
// count (see Plan for what batch invariance rests on). The layout a plan describes is derived
// in Shape.Problem; everything but the calls themselves is plain Go, tested without a GPU.
package cublaslt

import (
	"os"
	"path/filepath"
)

// PathEnv names the library file to load, ahead of every other place.
const PathEnv = "LLMSERVE_CUBLASLT"

// sonames are the library's names, newest CUDA first.
var sonames = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}

// Candidates lists, in order, the files Load tries: PathEnv; the toolkit under $CUDA_HOME,
// $CUDA_PATH and /usr/local/cuda; the nvidia-cublas wheel in the Python package directories;
// then the bare names, which the dynamic loader resolves through LD_LIBRARY_PATH and ldconfig.
func Candidates() []string {
	var out []string
	if p := os.Getenv(PathEnv); p != "" {
		out = append(out, p)
	}
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if root := os.Getenv(env); root != "" {
			dirs = append(dirs, filepath.Join(root, "lib64"), filepath.Join(root, "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	home, _ := os.UserHomeDir()
	for _, pattern := range []string{
		"/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib",
		"/usr/local/lib/python3*/site-packages/nvidia/cublas/lib",
		"/usr/lib/python3*/dist-packages/nvidia/cublas/lib",
		"/usr/lib/python3/dist-packages/nvidia/cublas/lib",
		filepath.Join(home, ".local/lib/python3*/site-packages/nvidia/cublas/lib"),
	} {
		matches, _ := filepath.Glob(pattern)
		dirs = append(dirs, matches...)
	}
	for _, d := range dirs {
		for _, n := range sonames {
			if _, err := os.Stat(filepath.Join(d, n)); err == nil {
				out = append(out, filepath.Join(d, n))
			}
		}
	}
	return append(out, sonames...)
}

// Lib is a loaded cuBLASLt.
type Lib struct {
	// Path is the file that was loaded.
	Path string
	// Version is cublasLtGetVersion's value (e.g. 130100 for 13.1.0).
	Version int
	// fns are the bound functions' addresses.
	fns funcs
}

// funcs are the addresses of the functions plans call (cublasLt.h).
type funcs struct {
	create, destroy                          uintptr
	descCreate, descSetAttr, descDestroy     uintptr
	layoutCreate, layoutDestroy              uintptr
	prefCreate, prefSetAttr, prefDestroy     uintptr
	heuristic, algoConfigGetAttr, matmulCall uintptr
}

// symbols pairs each function's name with its slot, for the loader.
func (f *funcs) symbols() []struct {
	name string
	addr *uintptr
} {
	return []struct {
		name string
		addr *uintptr
	}{
		{"cublasLtCreate", &f.create}, {"cublasLtDestroy", &f.destroy},
		{"cublasLtMatmulDescCreate", &f.descCreate}, {"cublasLtMatmulDescSetAttribute", &f.descSetAttr},
		{"cublasLtMatmulDescDestroy", &f.descDestroy},
		{"cublasLtMatrixLayoutCreate", &f.layoutCreate}, {"cublasLtMatrixLayoutDestroy", &f.layoutDestroy},
		{"cublasLtMatmulPreferenceCreate", &f.prefCreate}, {"cublasLtMatmulPreferenceSetAttribute", &f.prefSetAttr},
		{"cublasLtMatmulPreferenceDestroy", &f.prefDestroy},
		{"cublasLtMatmulAlgoGetHeuristic", &f.heuristic},
		{"cublasLtMatmulAlgoConfigGetAttribute", &f.algoConfigGetAttr},
		{"cublasLtMatmul", &f.matmulCall},
	}
}
