package replay

import (
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/model"
)

// TestConformance runs the backend suite on the replay runner, opened through the registry: its
// rows depend only on the tokens it reads back through the block tables, and its DeviceSampler
// is the host sampler.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Target{
		Open: func(t testing.TB, m *model.Model, opts backend.Options) backend.Backend {
			b, err := backend.Open("replay", m, opts)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		SharesHostSampler: true,
	})
}
