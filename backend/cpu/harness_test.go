package cpu

import (
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/model"
)

// The scenario harness lives in package backendtest, shared by every backend; these names keep
// this package's tests short.
type (
	reference = backendtest.Reference
	seqRun    = backendtest.SeqRun
	blockPool = backendtest.BlockPool
)

var (
	fixtureModels = backendtest.FixtureModels
	loadReference = backendtest.LoadReference
	loadFixture   = backendtest.LoadFixture
	newBlockPool  = backendtest.NewBlockPool
	newSeqRun     = backendtest.NewSeqRun
	relDiff       = backendtest.RelDiff
	argmax        = backendtest.Argmax
)

func runSeqs(t testing.TB, b *Backend, pool *blockPool, seqs []*seqRun) {
	t.Helper()
	backendtest.RunSeqs(t, b, pool, seqs)
}

func newTestBackend(t testing.TB, m *model.Model, opts backend.Options) *Backend {
	t.Helper()
	b, err := New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
