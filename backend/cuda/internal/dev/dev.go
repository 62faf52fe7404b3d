// Package dev is the boundary between the CUDA backend and a device: the Device interface
// (allocate, copy, launch a kernel with packed arguments, events, graphs), the table of kernels
// with one Go argument struct each, and the packing of those structs into the byte buffer a
// launch passes (CU_LAUNCH_PARAM_BUFFER_POINTER on the driver; the emulator's Go references
// decode the same bytes).
package dev

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"
)

// Ptr is a device address. It is an integer, never a Go pointer.
type Ptr = uint64

// Dim3 is a grid or block shape.
type Dim3 [3]uint32

// D1 is a one-dimensional shape.
func D1(x int) Dim3 { return Dim3{uint32(x), 1, 1} }

// Graph is a recorded sequence of launches replayed as one.
type Graph interface{ isGraph() }

// GraphHandle lets implementations define Graph values.
type GraphHandle struct{}

func (GraphHandle) isGraph() {}

// Device is what the backend needs from a GPU. Work is ordered as issued (one stream); copies to
// the host wait for the work before them.
type Device interface {
	// Name describes the device for logs.
	Name() string
	// MemInfo returns free and total memory in bytes.
	MemInfo() (free, total int64, err error)
	// Alloc returns n bytes of device memory, 256-byte aligned, contents undefined.
	Alloc(n int64) (Ptr, error)
	// Free releases an allocation.
	Free(p Ptr) error
	// Upload copies src to dst; src may be reused once Upload returns.
	Upload(dst Ptr, src []byte) error
	// Download copies n=len(dst) bytes from src after all earlier work.
	Download(dst []byte, src Ptr) error
	// Memset sets n bytes at p to v.
	Memset(p Ptr, v byte, n int64) error
	// Copy copies n bytes from src to dst on the device.
	Copy(dst, src Ptr, n int64) error
	// Launch enqueues kernel k over grid x block threads with args (Pack of k's argument struct).
	Launch(k Kernel, grid, block Dim3, shmem int, args []byte) error
	// Sync waits for all issued work.
	Sync() error
	// BeginCapture starts recording launches (and only launches) into a graph instead of
	// running them; EndCapture returns it. Replaying runs the same launches with the same
	// argument bytes, so a graph's inputs must live in buffers that outlive it.
	BeginCapture() error
	EndCapture() (Graph, error)
	LaunchGraph(g Graph) error
	// MatmulLib names the library that runs Matmul (cuBLASLt and its version on a GPU), or
	// says why there is none; it does not change over the device's life.
	MatmulLib() (string, error)
	// Matmul enqueues a library GEMM (see MatmulArgs): cuBLASLt with one algorithm per weight
	// shape on a GPU, its Go reference on the emulator. It is ordered with launches and
	// recorded by a capture like one. With M == 0 it only prepares the shape (a GPU chooses
	// its algorithm then) and reports a shape the library cannot take.
	Matmul(a MatmulArgs) error
	// Elapsed times fn on the device in milliseconds (events around it).
	Elapsed(fn func() error) (float32, error)
	// Run calls fn where the device's calls are cheapest: on a GPU, on the goroutine that owns
	// its context, so the launches of a step run inside fn need no goroutine hand-off each. fn
	// must not wait for another goroutine's device call (that call waits for fn).
	Run(fn func() error) error
	// Close releases the device.
	Close() error
}

// MatmulArgs: Out[r·Ldo+n] (+)= Σ_k X[r·Ldx+k] · W[n·K+k] for r < M, n < N, with bf16 X and W
// and f32 Out, products and accumulation in f32 (K order is the library's: results match the
// reference to bf16-GEMM tolerance, not bit for bit), added to Out when Accumulate is set. W
// is one weight, row-major [N][K]; a device keeps one plan per (N, K, Ldx, Ldo), so a weight's
// rows are computed the same way whatever M is. Every address and row is 16-byte aligned.
type MatmulArgs struct {
	Out, X, W         Ptr
	M, N, K, Ldx, Ldo int
	Accumulate        bool
}

// ErrNoFatbin is returned by a real device when the kernels have never been compiled.
var ErrNoFatbin = errors.New("cuda: the kernel fatbin is not built yet (backend/cuda/kernels/MANIFEST): run scripts/gpu/check.sh on a GPU machine and commit the kernels.fatbin and MANIFEST it writes")

// Pack returns the bytes of *a as a kernel's parameter buffer: the struct's memory up to the
// end of its last field. Argument structs hold only uint64, int32, uint32 and float32 fields,
// so Go's layout is the C ABI's (natural alignment) and the buffer matches the kernel's
// .param offsets.
func Pack[T any](a *T) []byte {
	n := paramSize(reflect.TypeFor[T]())
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(a)), n)...)
}

// Unpack decodes a parameter buffer into T, failing when its size is not T's.
func Unpack[T any](buf []byte) (T, error) {
	var a T
	n := paramSize(reflect.TypeFor[T]())
	if len(buf) != n {
		return a, fmt.Errorf("argument buffer of %d bytes for %s, want %d", len(buf), reflect.TypeFor[T]().Name(), n)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&a)), n), buf)
	return a, nil
}

// paramSize is the end of t's last field.
func paramSize(t reflect.Type) int {
	if t.NumField() == 0 {
		return 0
	}
	f := t.Field(t.NumField() - 1)
	return int(f.Offset + f.Type.Size())
}

// Param is one kernel parameter as PTX declares it.
type Param struct {
	Name string
	// Type is the PTX parameter type: .u64, .u32 or .f32.
	Type string
	// Offset is its byte offset in the packed buffer.
	Offset int
}

// Params lists the PTX parameters an argument struct stands for.
func Params(t reflect.Type) ([]Param, error) {
	var ps []Param
	for i := range t.NumField() {
		f := t.Field(i)
		var pt string
		switch f.Type.Kind() {
		case reflect.Uint64:
			pt = ".u64"
		case reflect.Int32, reflect.Uint32:
			pt = ".u32"
		case reflect.Float32:
			pt = ".f32"
		default:
			return nil, fmt.Errorf("%s.%s: %s cannot be a kernel parameter", t.Name(), f.Name, f.Type)
		}
		ps = append(ps, Param{Name: f.Name, Type: pt, Offset: int(f.Offset)})
	}
	return ps, nil
}
