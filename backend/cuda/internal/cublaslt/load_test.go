//go:build !nocuda

package cublaslt

import (
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
