package cublaslt

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCandidatesSearchCUDAHome(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "lib64")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libcublasLt.so.12"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CUDA_HOME", root)
	t.Setenv(PathEnv, "")
	c := Candidates()
	if len(c) == 0 || c[0] != filepath.Join(lib, "libcublasLt.so.12") {
		t.Fatalf("candidates %v do not start with $CUDA_HOME/lib64's library", c)
	}
	if c[len(c)-1] != "libcublasLt.so" {
		t.Fatalf("candidates %v do not end with the bare names", c)
	}
}
