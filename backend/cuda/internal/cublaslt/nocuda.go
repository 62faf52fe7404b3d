//go:build nocuda

package cublaslt

import "errors"

// Load fails: the binary was built without the loader.
func Load() (*Lib, error) {
	return nil, errors.New("cuBLASLt: this binary was built with the nocuda tag (no loader)")
}

// call fails: nothing is loaded in this build.
func (l *Lib) call(op string, fn uintptr, args ...uintptr) error {
	return &Error{Op: op, Status: StatusNotInitialized}
}
