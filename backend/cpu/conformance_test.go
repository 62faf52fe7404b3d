package cpu

import (
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/model"
)

// TestConformance runs the backend suite on every kernel set this machine runs (and, through
// `make test`'s CGO_ENABLED=0 pass, on the pure-Go matrix products too), opened through the
// registry as a scheduler binary opens it.
func TestConformance(t *testing.T) {
	for _, kernels := range linear.KernelSets() {
		t.Run(kernels, func(t *testing.T) {
			backendtest.Run(t, backendtest.Target{
				Open: func(t testing.TB, m *model.Model, opts backend.Options) backend.Backend {
					opts.Tuning = Tuning{Threads: 2, Kernels: kernels}
					b, err := backend.Open("cpu", m, opts)
					if err != nil {
						t.Fatal(err)
					}
					return b
				},
				Computes:    true,
				AllLogits:   true,
				Invariant:   true,
				Consistency: 2e-3, // the pico's bf16 KV cache: see kv16Tol
				Slow:        kernels == "go",
			})
		})
	}
}
