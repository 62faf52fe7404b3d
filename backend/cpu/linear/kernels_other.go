//go:build !amd64 || purego

package linear

// kernelSets lists the kernel sets this build can run: the portable one only.
func kernelSets() []*kernelSet { return []*kernelSet{goKernels} }
