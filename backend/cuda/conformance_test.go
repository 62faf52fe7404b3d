package cuda

import (
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/model"
)

// TestConformance runs the shared backend suite on the CUDA backend: on the emulator in CI
// (every kernel its Go reference, through the same packed arguments), and on GPU 0 where one
// opens with the kernels; with graphs (decode steps replayed from captured graphs) and without.
func TestConformance(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		for _, graphs := range []bool{true, false} {
			if !graphs && testing.Short() && !dv.gpu {
				continue // eager differs from graphs only in decode-only steps; -short runs one
			}
			name := "graphs"
			if !graphs {
				name = "eager"
			}
			t.Run(name, func(t *testing.T) {
				backendtest.Run(t, backendtest.Target{
					Open: func(t testing.TB, m *model.Model, opts backend.Options) backend.Backend {
						opts.Tuning = Tuning{Emulate: !dv.gpu, NoGraphs: !graphs}
						b, err := backend.Open("cuda", m, opts)
						if err != nil {
							t.Fatal(err)
						}
						return b
					},
					Computes: true,
					// decode rows (Generated ones too) always run the decode kernels, prompt
					// rows the tiled ones: rows depend on nothing but their sequence
					Invariant: true,
					AllLogits: true,
					// bf16 weights, activations and KV cache: one bf16 rounding flip upstream
					// moves a logit by about 2^-8 of the scale (see runTol)
					Consistency: runTol,
					Slow:        !dv.gpu,
				})
			})
		}
	})
}
