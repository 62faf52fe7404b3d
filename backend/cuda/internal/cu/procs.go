package cu

// The driver functions the Context calls.
var (
	fnDriverGetVersion   = &proc{name: "cuDriverGetVersion"}
	fnDeviceGet          = &proc{name: "cuDeviceGet"}
	fnDeviceGetCount     = &proc{name: "cuDeviceGetCount"}
	fnDeviceGetName      = &proc{name: "cuDeviceGetName"}
	fnDeviceGetAttribute = &proc{name: "cuDeviceGetAttribute"}
	fnPrimaryCtxRetain   = &proc{name: "cuDevicePrimaryCtxRetain"}
	fnPrimaryCtxRelease  = &proc{name: "cuDevicePrimaryCtxRelease"}
	fnCtxSetCurrent      = &proc{name: "cuCtxSetCurrent"}
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
