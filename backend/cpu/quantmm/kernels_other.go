//go:build !cgo || !amd64

package quantmm

// bestKernels: without cgo on amd64 the portable kernels are the only ones.
func bestKernels() kernelSet { return goKernels }

// kernelSets lists the kernel sets this build can run on this machine, best first.
func kernelSets() []kernelSet { return []kernelSet{goKernels} }
