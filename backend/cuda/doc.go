// Package cuda is the CUDA backend: the model's forward pass and sampling on an NVIDIA GPU,
// driven through the driver API without cgo (internal/cu), with kernels compiled by nvcc into
// one embedded fatbin (kernels/), and the prompt rows' GEMMs on cuBLASLt loaded at run time
// (internal/cublaslt; lt.go says which GEMM runs where). Everything between the scheduler's batches and the kernels
// (weights, KV pool, batch planning, graph buckets, sampling specs) talks to a small device
// interface (internal/dev), which a Go emulator (internal/emu) also implements, so CI runs the
// whole backend without a GPU.
package cuda
