package cpu

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
)

// reference is testdata/models/*/expected.json, made by transformers in float32.
type reference struct {
	Model   string `json:"model"`
	DType   string `json:"dtype"`
	Prompts []struct {
		InputIDs     []int32   `json:"input_ids"`
		FirstLogits  []float32 `json:"first_logits"`
		LastLogits   []float32 `json:"last_logits"`
		GreedyNewIDs []int32   `json:"greedy_new_ids"`
		MinTop2Gap   float64   `json:"min_top2_gap"`
	} `json:"prompts"`
}

const fixtureDir = "../../testdata/models"

var fixtureModels = []string{"llama", "llama32", "qwen2", "qwen3", "qwen3-bf16"}

func loadReference(t testing.TB, name string) reference {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// loadFixture loads a fixture model; with configFile "config.v5.json" the directory is copied so
// that the transformers-5 config is the one read as config.json.
func loadFixture(t testing.TB, name, configFile string) *model.Model {
	t.Helper()
	dir := filepath.Join(fixtureDir, name)
	if configFile != "config.json" {
		tmp := t.TempDir()
		for _, f := range []string{"model.safetensors", "generation_config.json"} {
			if err := os.Symlink(mustAbs(t, filepath.Join(dir, f)), filepath.Join(tmp, f)); err != nil {
				t.Fatal(err)
			}
		}
		data, err := os.ReadFile(filepath.Join(dir, configFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		dir = tmp
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustAbs(t testing.TB, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// blockPool hands out KV blocks in a shuffled order, so a sequence's blocks are scattered over
// the pool and never contiguous by accident.
type blockPool struct {
	free []int32
}

func newBlockPool(n int, seed uint64) *blockPool {
	p := &blockPool{free: make([]int32, n)}
	for i := range p.free {
		p.free[i] = int32(i)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(n, func(i, j int) { p.free[i], p.free[j] = p.free[j], p.free[i] })
	return p
}

func (p *blockPool) take(t testing.TB) int32 {
	t.Helper()
	if len(p.free) == 0 {
		t.Fatal("KV block pool exhausted")
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b
}

func (p *blockPool) release(blocks []int32) { p.free = append(p.free, blocks...) }

// seqRun is one sequence driven through prefill (in chunks) and greedy decoding, the way a
// scheduler would: it feeds tokens, grows its block table, and reads logits.
type seqRun struct {
	prompt []int32
	chunk  int // prefill chunk length; 0 means the whole prompt at once
	steps  int // greedy tokens to generate
	start  int // scheduler step at which the sequence joins

	fed       int // tokens whose K/V are in the cache
	tokens    []int32
	table     []int32
	prefill   []float32 // logits after the last prompt token
	generated []int32
}

func newSeqRun(prompt []int32, chunk, steps, start int) *seqRun {
	return &seqRun{prompt: prompt, chunk: chunk, steps: steps, start: start, tokens: slices.Clone(prompt)}
}

func (s *seqRun) done() bool { return len(s.generated) >= s.steps && s.prefill != nil }

// runSeqs drives all sequences to completion, batching every active one into each Forward.
func runSeqs(t testing.TB, b *Backend, pool *blockPool, seqs []*seqRun) {
	t.Helper()
	for step := 0; ; step++ {
		var batch backend.Batch
		var active []*seqRun
		for _, s := range seqs {
			if s.done() || step < s.start {
				continue
			}
			var toks []int32
			if s.fed < len(s.prompt) {
				n := len(s.prompt) - s.fed
				if s.chunk > 0 {
					n = min(n, s.chunk)
				}
				toks = s.tokens[s.fed : s.fed+n]
			} else {
				toks = s.tokens[s.fed : s.fed+1]
			}
			for len(s.table)*b.BlockSize() < s.fed+len(toks) {
				s.table = append(s.table, pool.take(t))
			}
			batch.Seqs = append(batch.Seqs, backend.Seq{
				Tokens: toks, Pos: s.fed, BlockTable: s.table,
				Logits: s.fed+len(toks) >= len(s.prompt),
			})
			active = append(active, s)
		}
		if len(active) == 0 {
			if slices.ContainsFunc(seqs, func(s *seqRun) bool { return !s.done() }) {
				continue // a sequence has not joined yet
			}
			break
		}
		out, err := b.Forward(context.Background(), &batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(active) {
			t.Fatalf("Forward returned %d rows for %d seqs", len(out), len(active))
		}
		for i, s := range active {
			s.fed += len(batch.Seqs[i].Tokens)
			if !batch.Seqs[i].Logits {
				if out[i] != nil {
					t.Fatalf("seq %d got logits it did not ask for", i)
				}
				continue
			}
			if len(out[i]) != b.VocabSize() {
				t.Fatalf("logits row has %d entries, want %d", len(out[i]), b.VocabSize())
			}
			if s.prefill == nil {
				s.prefill = slices.Clone(out[i])
			}
			if len(s.generated) < s.steps {
				next := argmax(out[i])
				s.generated = append(s.generated, next)
				s.tokens = append(s.tokens, next)
			}
		}
		for _, s := range active {
			if s.done() {
				pool.release(s.table)
				s.table = nil
			}
		}
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// relDiff is max |got-want| over max |want|.
func relDiff(t testing.TB, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("length %d, want %d", len(got), len(want))
	}
	var maxDiff, maxRef float64
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			t.Fatalf("logit %d is %v", i, got[i])
		}
		maxDiff = max(maxDiff, math.Abs(float64(got[i]-want[i])))
		maxRef = max(maxRef, math.Abs(float64(want[i])))
	}
	return maxDiff / maxRef
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
