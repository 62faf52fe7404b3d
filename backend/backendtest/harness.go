// Package backendtest is the conformance suite every backend runs (Run), and the scenario
// harness its checks are built from: fixture models and their transformers references, a
// shuffled KV block pool, and sequences driven through chunked prefill and greedy decoding the
// way a scheduler drives them. It imports package testing and is meant for tests only.
package backendtest

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

// Root returns the repository's root directory (where go.mod is), found from the working
// directory of the test.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("backendtest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// FixtureDir is testdata/models: small random models with transformers' float32 references.
func FixtureDir(t testing.TB) string { return filepath.Join(Root(t), "testdata", "models") }

// Free is the number of blocks not handed out.
func (p *BlockPool) Free() int { return len(p.free) }

// Reference is testdata/models/*/expected.json, made by transformers in float32.
type Reference struct {
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

// FixtureModels are the models under testdata/models with transformers references.
var FixtureModels = []string{"llama", "llama32", "qwen2", "qwen3", "qwen3-bf16"}

func LoadReference(t testing.TB, name string) Reference {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(FixtureDir(t), name, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref Reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// LoadFixture loads a fixture model; with configFile "config.v5.json" the directory is copied so
// that the transformers-5 config is the one read as config.json.
func LoadFixture(t testing.TB, name, configFile string) *model.Model {
	t.Helper()
	dir := filepath.Join(FixtureDir(t), name)
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

// BlockPool hands out KV blocks in a shuffled order, so a sequence's blocks are scattered over
// the pool and never contiguous by accident.
type BlockPool struct {
	free []int32
}

func NewBlockPool(n int, seed uint64) *BlockPool {
	p := &BlockPool{free: make([]int32, n)}
	for i := range p.free {
		p.free[i] = int32(i)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(n, func(i, j int) { p.free[i], p.free[j] = p.free[j], p.free[i] })
	return p
}

func (p *BlockPool) Take(t testing.TB) int32 {
	t.Helper()
	if len(p.free) == 0 {
		t.Fatal("KV block pool exhausted")
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b
}

func (p *BlockPool) Release(blocks []int32) { p.free = append(p.free, blocks...) }

// SeqRun is one sequence driven through prefill (in chunks) and greedy decoding, the way a
// scheduler would: it feeds tokens, grows its block table, and reads logits.
type SeqRun struct {
	Prompt []int32
	Chunk  int // prefill chunk length; 0 means the whole prompt at once
	Steps  int // greedy tokens to generate
	Start  int // scheduler step at which the sequence joins

	Fed       int // tokens whose K/V are in the cache
	Tokens    []int32
	Table     []int32
	Prefill   []float32 // logits after the last prompt token
	Generated []int32
	// KeepRows keeps a copy of every logits row the sequence receives in Rows, in order.
	KeepRows bool
	Rows     [][]float32
}

func NewSeqRun(prompt []int32, chunk, steps, start int) *SeqRun {
	return &SeqRun{Prompt: prompt, Chunk: chunk, Steps: steps, Start: start, Tokens: slices.Clone(prompt)}
}

func (s *SeqRun) done() bool { return len(s.Generated) >= s.Steps && s.Prefill != nil }

// RunSeqs drives all sequences to completion, batching every active one into each Forward.
func RunSeqs(t testing.TB, b backend.Backend, pool *BlockPool, seqs []*SeqRun) {
	t.Helper()
	for step := 0; ; step++ {
		var batch backend.Batch
		var active []*SeqRun
		for _, s := range seqs {
			if s.done() || step < s.Start {
				continue
			}
			var toks []int32
			if s.Fed < len(s.Prompt) {
				n := len(s.Prompt) - s.Fed
				if s.Chunk > 0 {
					n = min(n, s.Chunk)
				}
				toks = s.Tokens[s.Fed : s.Fed+n]
			} else {
				toks = s.Tokens[s.Fed : s.Fed+1]
			}
			for len(s.Table)*b.BlockSize() < s.Fed+len(toks) {
				s.Table = append(s.Table, pool.Take(t))
			}
			batch.Seqs = append(batch.Seqs, backend.Seq{
				Tokens: toks, Pos: s.Fed, BlockTable: s.Table,
				Logits:    s.Fed+len(toks) >= len(s.Prompt),
				Generated: s.Fed >= len(s.Prompt), // a decode, as the scheduler marks it
			})
			active = append(active, s)
		}
		if len(active) == 0 {
			if slices.ContainsFunc(seqs, func(s *SeqRun) bool { return !s.done() }) {
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
			s.Fed += len(batch.Seqs[i].Tokens)
			if !batch.Seqs[i].Logits {
				if out[i] != nil {
					t.Fatalf("seq %d got logits it did not ask for", i)
				}
				continue
			}
			if len(out[i]) != b.VocabSize() {
				t.Fatalf("logits row has %d entries, want %d", len(out[i]), b.VocabSize())
			}
			if s.Prefill == nil {
				s.Prefill = slices.Clone(out[i])
			}
			if s.KeepRows {
				s.Rows = append(s.Rows, slices.Clone(out[i]))
			}
			if len(s.Generated) < s.Steps {
				next := Argmax(out[i])
				s.Generated = append(s.Generated, next)
				s.Tokens = append(s.Tokens, next)
			}
		}
		for _, s := range active {
			if s.done() {
				pool.Release(s.Table)
				s.Table = nil
			}
		}
	}
}

// Argmax is the index of the first largest entry of x.
func Argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// RelDiff is max |got-want| over max |want|.
func RelDiff(t testing.TB, got, want []float32) float64 {
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
