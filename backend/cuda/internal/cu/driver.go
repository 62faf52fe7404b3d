//go:build !nocuda

package cu

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// proc is one driver function: its base name (cuGetProcAddress picks the ABI version) and
// address once loaded.
type proc struct {
	name string
	addr uintptr
}

// Functions only the loader and the error path call.
var (
	fnInit           = &proc{name: "cuInit"}
	fnGetErrorName   = &proc{name: "cuGetErrorName"}
	fnGetErrorString = &proc{name: "cuGetErrorString"}
)

// procs lists every function for the loader; cuInit first, the error names next so that later
// failures can be named.
var procs = []*proc{
	fnInit, fnGetErrorName, fnGetErrorString, fnDriverGetVersion, fnDeviceGet, fnDeviceGetCount,
	fnDeviceGetName, fnDeviceGetAttribute, fnPrimaryCtxRetain, fnPrimaryCtxRelease,
	fnCtxSetCurrent, fnMemGetInfo, fnMemAlloc, fnMemFree, fnMemHostAlloc,
	fnMemFreeHost, fnMemcpyHtoD, fnMemcpyDtoH, fnMemcpyDtoD, fnMemcpyHtoDAsync, fnMemcpyDtoHAsync,
	fnMemsetD8Async, fnModuleLoadData, fnModuleUnload, fnModuleGetFunction, fnLaunchKernel,
	fnStreamCreate, fnStreamDestroy, fnStreamSynchronize, fnStreamBeginCapture, fnStreamEndCapture,
	fnGraphInstantiate, fnGraphLaunch, fnGraphExecDestroy, fnGraphDestroy, fnEventCreate,
	fnEventRecord, fnEventSynchronize, fnEventElapsedTime, fnEventDestroy,
}

// cString copies a NUL-terminated string the driver owns.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := unsafe.Add(unsafe.Pointer(nil), p)
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// libNames are tried in order: the driver's versioned soname first, as the CUDA runtime does.
var libNames = []string{"libcuda.so.1", "libcuda.so"}

func load() error {
	var handle uintptr
	var firstErr error
	for _, name := range libNames {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			handle = h
			break
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if handle == 0 {
		return fmt.Errorf("cuda: load driver: %w", firstErr)
	}
	// cuGetProcAddress_v2 (CUDA 12+) takes a fifth argument, the symbol's query status;
	// older drivers only have the four-argument form.
	getProc, err := purego.Dlsym(handle, "cuGetProcAddress_v2")
	v2 := err == nil
	if !v2 {
		if getProc, err = purego.Dlsym(handle, "cuGetProcAddress"); err != nil {
			return fmt.Errorf("cuda: driver has no cuGetProcAddress: %w", err)
		}
	}
	for _, p := range procs {
		name := append([]byte(p.name), 0)
		var addr uintptr
		var status int32
		var r uintptr
		if v2 {
			r, _, _ = purego.SyscallN(getProc, uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&addr)),
				uintptr(Version), 0, uintptr(unsafe.Pointer(&status)))
		} else {
			r, _, _ = purego.SyscallN(getProc, uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&addr)),
				uintptr(Version), 0)
		}
		if r != 0 || addr == 0 {
			return fmt.Errorf("cuda: driver does not provide %s for CUDA %d.%d (CUresult %d, status %d)",
				p.name, Version/1000, Version%1000/10, int(r), status)
		}
		p.addr = addr
	}
	r, _, _ := purego.SyscallN(fnInit.addr, 0)
	if r != 0 {
		return callError("cuInit", Result(r))
	}
	return nil
}

// call runs one driver function and turns a failing CUresult into an *Error. Callers pass
// pointers converted to uintptr in the argument list; uintptrescapes moves what they point to
// off the stack, which could otherwise be copied elsewhere (stack growth on the way into the
// driver) while the driver writes to the old address: cuDeviceGetCount's count read 0 on an H200.
//
//go:uintptrescapes
func call(p *proc, args ...uintptr) error {
	r, _, _ := purego.SyscallN(p.addr, args...)
	if r == 0 {
		return nil
	}
	return callError(p.name, Result(r))
}

// callError names code through the driver.
func callError(op string, code Result) error {
	e := &Error{Op: op, Code: code}
	var s uintptr
	if fnGetErrorName.addr != 0 {
		if r, _, _ := purego.SyscallN(fnGetErrorName.addr, uintptr(code), uintptr(unsafe.Pointer(&s))); r == 0 {
			e.Name = cString(s)
		}
	}
	if fnGetErrorString.addr != 0 {
		if r, _, _ := purego.SyscallN(fnGetErrorString.addr, uintptr(code), uintptr(unsafe.Pointer(&s))); r == 0 {
			e.Desc = cString(s)
		}
	}
	return e
}
