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
		lib := &Lib{Path: p, Version: int(v)}
		if err := lib.bind(h); err != nil {
			tried, errs = append(tried, p), append(errs, err)
			_ = purego.Dlclose(h)
			continue
		}
		return lib, nil
	}
	return nil, notFound(tried, errs)
}

// bind resolves every function plans call; a library without one is refused.
func (l *Lib) bind(h uintptr) error {
	for _, s := range l.fns.symbols() {
		addr, err := purego.Dlsym(h, s.name)
		if err != nil {
			return fmt.Errorf("cuBLASLt %d lacks %s: %w", l.Version, s.name, err)
		}
		*s.addr = addr
	}
	return nil
}

// call runs one cuBLASLt function and turns a failing status into an *Error. Pointer arguments
// are converted to uintptr in the caller's argument list: uintptrescapes keeps what they point
// to alive and in place for the call.
//
//go:uintptrescapes
func (l *Lib) call(op string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if s := Status(int32(r)); s != StatusSuccess {
		return &Error{Op: op, Status: s}
	}
	return nil
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
