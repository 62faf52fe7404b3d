package cu

import "unsafe"

// proc is one driver function: its base name (cuGetProcAddress picks the ABI version) and
// address once loaded.
type proc struct {
	name string
	addr uintptr
}

// The driver functions this package calls.
var (
	fnInit               = &proc{name: "cuInit"}
	fnGetErrorName       = &proc{name: "cuGetErrorName"}
	fnGetErrorString     = &proc{name: "cuGetErrorString"}
	fnDriverGetVersion   = &proc{name: "cuDriverGetVersion"}
	fnDeviceGet          = &proc{name: "cuDeviceGet"}
	fnDeviceGetCount     = &proc{name: "cuDeviceGetCount"}
	fnDeviceGetName      = &proc{name: "cuDeviceGetName"}
	fnDeviceGetAttribute = &proc{name: "cuDeviceGetAttribute"}
	fnDeviceTotalMem     = &proc{name: "cuDeviceTotalMem"}
	fnPrimaryCtxRetain   = &proc{name: "cuDevicePrimaryCtxRetain"}
	fnPrimaryCtxRelease  = &proc{name: "cuDevicePrimaryCtxRelease"}
	fnCtxSetCurrent      = &proc{name: "cuCtxSetCurrent"}
	fnCtxSynchronize     = &proc{name: "cuCtxSynchronize"}
	fnMemGetInfo         = &proc{name: "cuMemGetInfo"}
	fnMemAlloc           = &proc{name: "cuMemAlloc"}
	fnMemFree            = &proc{name: "cuMemFree"}
	fnMemHostAlloc       = &proc{name: "cuMemHostAlloc"}
	fnMemFreeHost        = &proc{name: "cuMemFreeHost"}
	fnMemcpyHtoD         = &proc{name: "cuMemcpyHtoD"}
	fnMemcpyDtoH         = &proc{name: "cuMemcpyDtoH"}
	fnMemcpyDtoD         = &proc{name: "cuMemcpyDtoDAsync"}
	fnMemcpyHtoDAsync    = &proc{name: "cuMemcpyHtoDAsync"}
	fnMemcpyDtoHAsync    = &proc{name: "cuMemcpyDtoHAsync"}
	fnMemsetD8Async      = &proc{name: "cuMemsetD8Async"}
	fnModuleLoadData     = &proc{name: "cuModuleLoadData"}
	fnModuleUnload       = &proc{name: "cuModuleUnload"}
	fnModuleGetFunction  = &proc{name: "cuModuleGetFunction"}
	fnLaunchKernel       = &proc{name: "cuLaunchKernel"}
	fnStreamCreate       = &proc{name: "cuStreamCreate"}
	fnStreamDestroy      = &proc{name: "cuStreamDestroy"}
	fnStreamSynchronize  = &proc{name: "cuStreamSynchronize"}
	fnStreamBeginCapture = &proc{name: "cuStreamBeginCapture"}
	fnStreamEndCapture   = &proc{name: "cuStreamEndCapture"}
	fnGraphInstantiate   = &proc{name: "cuGraphInstantiateWithFlags"}
	fnGraphLaunch        = &proc{name: "cuGraphLaunch"}
	fnGraphExecDestroy   = &proc{name: "cuGraphExecDestroy"}
	fnGraphDestroy       = &proc{name: "cuGraphDestroy"}
	fnEventCreate        = &proc{name: "cuEventCreate"}
	fnEventRecord        = &proc{name: "cuEventRecord"}
	fnEventSynchronize   = &proc{name: "cuEventSynchronize"}
	fnEventElapsedTime   = &proc{name: "cuEventElapsedTime"}
	fnEventDestroy       = &proc{name: "cuEventDestroy"}
)

// procs lists them for the loader; cuInit first so later ones can report through the names.
var procs = []*proc{
	fnInit, fnGetErrorName, fnGetErrorString, fnDriverGetVersion, fnDeviceGet, fnDeviceGetCount,
	fnDeviceGetName, fnDeviceGetAttribute, fnDeviceTotalMem, fnPrimaryCtxRetain, fnPrimaryCtxRelease,
	fnCtxSetCurrent, fnCtxSynchronize, fnMemGetInfo, fnMemAlloc, fnMemFree, fnMemHostAlloc,
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
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+uintptr(n))) != 0 { //nolint:govet // driver-owned static string
		n++
	}
	return string(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n))
}
