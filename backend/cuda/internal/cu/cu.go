// Package cu calls the CUDA driver API (libcuda.so.1) without cgo, through purego: symbols are
// resolved with cuGetProcAddress for one CUDA version (so cuMemAlloc means its _v2 ABI, as in
// cuda.h), every failing CUresult comes back as an *Error naming the code, device pointers are
// plain uintptr values (never unsafe.Pointer, which the garbage collector would follow), and
// asynchronous copies go only to and from pinned host memory (cuMemHostAlloc).
//
// A context is current per OS thread, so each Context runs every driver call on one goroutine
// locked to its thread (Context.Do). Built with the nocuda tag, the package links no loader
// and Load reports that, which keeps fully static binaries possible.
package cu

import (
	"fmt"
	"sync"
)

// Result is a CUresult.
type Result int

// The CUresult values this package acts on; every other one is named through cuGetErrorName.
const (
	Success           Result = 0
	ErrNotReady       Result = 600
	ErrNoDevice       Result = 100
	ErrIllegalAddress Result = 700
	ErrLaunchFailed   Result = 719
)

// Error is a failed driver call.
type Error struct {
	// Op is the driver function that failed.
	Op string
	// Code is the CUresult it returned.
	Code Result
	// Name and Desc are cuGetErrorName's and cuGetErrorString's text for Code (empty when
	// the driver could not name it).
	Name, Desc string
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = fmt.Sprintf("CUresult %d", int(e.Code))
	}
	if e.Desc != "" {
		return fmt.Sprintf("%s: %s (%d): %s", e.Op, name, int(e.Code), e.Desc)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Op, name, int(e.Code))
}

// Sticky reports whether the error leaves the context unusable (an illegal address or a failed
// launch): the process must fail its work and exit so its supervisor restarts it.
func (e *Error) Sticky() bool { return e.Code == ErrIllegalAddress || e.Code == ErrLaunchFailed }

// Version is the CUDA version whose ABI the symbols are resolved for (12.0: every _v2 symbol
// this package uses exists from then on, and CUDA 13 drivers still serve it).
const Version = 12000

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens the driver library and resolves every function this package uses, once per
// process. Its error is the loader's own text (dlopen's message, or the missing symbol), which
// tests print when they skip.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}
