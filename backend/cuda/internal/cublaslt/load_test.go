//go:build !nocuda

package cublaslt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without the library, the error names every place searched and the variable that overrides
// them; with it, the version is read.
func TestLoad(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcublasLt.so.13")
	t.Setenv(PathEnv, missing)
	lib, err := Load()
	if err == nil {
		if lib.Path == missing || lib.Version <= 0 {
			t.Fatalf("loaded %+v", lib)
		}
		t.Skipf("cuBLASLt %d found at %s", lib.Version, lib.Path)
	}
	for _, want := range []string{missing, "libcublasLt.so.12", PathEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// On a machine with cuBLASLt and a GPU (check.sh's env stage runs this binary): a handle opens
// and plans for Qwen3-0.6B's and Llama-8B's shapes pick an algorithm that splits nothing.
func TestPlanOnDevice(t *testing.T) {
	required := os.Getenv("LLMSERVE_CUDA_REQUIRE_GPU") == "1"
	skip := func(err error) {
		if required {
			t.Fatalf("LLMSERVE_CUDA_REQUIRE_GPU=1: %v", err)
		}
		t.Skip(err)
	}
	lib, err := Load()
	if err != nil {
		skip(err)
		return
	}
	h, err := lib.NewHandle()
	if err != nil {
		skip(fmt.Errorf("cuBLASLt %d at %s: %w", lib.Version, lib.Path, err))
		return
	}
	defer h.Destroy()
	for _, s := range []Shape{{N: 4096, K: 1024, Ldx: 1024, Ldo: 4096}, {N: 151936, K: 1024, Ldx: 1024, Ldo: 151936}, {N: 4096, K: 14336, Ldx: 14336, Ldo: 4096}} {
		p, err := h.NewPlan(s)
		if err != nil {
			t.Fatalf("cuBLASLt %d: %v", lib.Version, err)
		}
		t.Logf("cuBLASLt %d plan N=%d K=%d: algorithm %d, tile %d, workspace %d bytes", lib.Version, s.N, s.K, p.AlgoID, p.TileID, p.workspace)
		if err := p.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}
