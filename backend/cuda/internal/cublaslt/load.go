//go:build !nocuda

package cublaslt

import (
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

// Load opens the first candidate that loads and reads its version.
func Load() (*Lib, error) {
	var tried []string
	var errs []error
	for _, p := range Candidates() {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried, errs = append(tried, p), append(errs, err)
			continue
		}
		sym, err := purego.Dlsym(h, "cublasLtGetVersion")
		if err != nil {
			tried, errs = append(tried, p), append(errs, err)
			_ = purego.Dlclose(h)
			continue
		}
		v, _, _ := purego.SyscallN(sym)
		return &Lib{Path: p, Version: int(v)}, nil
	}
	return nil, notFound(tried, errs)
}

// notFound lists every place tried and why each failed.
func notFound(tried []string, errs []error) error {
	var b strings.Builder
	b.WriteString("cuBLASLt not found (it ships with the CUDA toolkit and the nvidia-cublas wheel; set " + PathEnv + " to the file):")
	for i, p := range tried {
		fmt.Fprintf(&b, "\n  %s: %v", p, errs[i])
	}
	return fmt.Errorf("%s", b.String())
}
