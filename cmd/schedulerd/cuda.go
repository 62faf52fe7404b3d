package main

import (
	"os"
	"strings"

	// The CUDA backend registers itself as "cuda" (--device cuda:K). Built with the nocuda tag it
	// still registers, and opening it fails saying the binary has no driver loader.
	"github.com/llmserve/llmserve/backend/cuda"
)

// cudaTuning is what goes into backend.Options.Tuning for --device cuda[:K]: nil (the backend's
// defaults, LLMSERVE_CUDA_EMULATE included) unless --batch-dependent sends a step's decode rows
// to cuBLASLt from cuda.BatchDependentDecodeRows of them on.
func cudaTuning(device string, batchDependent bool) any {
	if !batchDependent || (device != "cuda" && !strings.HasPrefix(device, "cuda:")) {
		return nil
	}
	return &cuda.Tuning{Emulate: os.Getenv(cuda.EmulateEnv) == "1", LtDecodeRows: cuda.BatchDependentDecodeRows}
}
