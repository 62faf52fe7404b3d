package backendtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
)

// Tolerances against the transformers references (relative to the largest |logit|): float32
// checkpoints are compared at float32 precision; bf16 ones were run by transformers in bf16
// arithmetic, so they get a looser bound.
const (
	FP32Tol = 1e-4
	BF16Tol = 4e-2
)

// Target is one backend (with one configuration) under the suite.
type Target struct {
	// Open returns a new backend for m; the suite sets opts.NumBlocks and opts.BlockSize and
	// closes the backend when the test ends.
	Open func(t testing.TB, m *model.Model, opts backend.Options) backend.Backend
	// Computes is set for a backend that runs the model's math: its logits are checked against
	// the references, and two computations that differ in chunking agree within Consistency.
	// Unset (the replay runner), those checks are skipped and every comparison is exact.
	Computes bool
	// AllLogits is set when the backend returns every position's logits (Seq.AllLogits);
	// unset, the suite requires that it refuses them.
	AllLogits bool
	// Consistency bounds the relative difference of two computations of one prompt that
	// differ in chunking or prefix reuse (a 16-bit KV cache rounds differently by one ulp).
	Consistency float64
	// SharesHostSampler is set when a DeviceSampler uses backend.HostSample (or the same
	// arithmetic): its seeded draws must then equal the host's exactly, not only its greedy picks.
	SharesHostSampler bool
	// Invariant is set for a backend that claims its rows depend on nothing but the sequence:
	// a Generated Seq's rows equal its one-token decodes', and a prompt's rows do not depend on
	// how it is cut into chunks. Those checks are then bit for bit, else within Consistency.
	Invariant bool
	// Slow marks a configuration that computes slowly (portable kernels): with -short, its
	// batch-invariance check runs two batch sizes instead of four.
	Slow bool
}

// Run runs every check of the suite on tg.
func Run(t *testing.T, tg Target) {
	t.Run("BlockTable", func(t *testing.T) { testBlockTable(t, tg) })
	t.Run("PrefixReuse", func(t *testing.T) { testPrefixReuse(t, tg) })
	t.Run("AllLogits", func(t *testing.T) { testAllLogits(t, tg) })
	t.Run("Reference", func(t *testing.T) { testReference(t, tg) })
	t.Run("DeviceSampler", func(t *testing.T) { testDeviceSampler(t, tg) })
	t.Run("BatchInvariance", func(t *testing.T) { testBatchInvariance(t, tg) })
	t.Run("Generated", func(t *testing.T) { testGenerated(t, tg) })
	t.Run("HiddenStates", func(t *testing.T) { testHiddenStates(t, tg) })
}

// Pico loads models/pico, the bundled Qwen3-family checkpoint (bf16 weights).
func Pico(t testing.TB) *model.Model {
	t.Helper()
	m, err := model.Load(filepath.Join(Root(t), "models", "pico"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func open(t testing.TB, tg Target, m *model.Model, blocks, bs int) backend.Backend {
	t.Helper()
	b := tg.Open(t, m, backend.Options{NumBlocks: blocks, BlockSize: bs})
	t.Cleanup(func() { _ = b.Close() })
	if b.BlockSize() != bs || b.NumBlocks() != blocks || b.VocabSize() != m.Config.VocabSize {
		t.Fatalf("backend has %d blocks of %d, vocab %d; asked for %d of %d, vocab %d",
			b.NumBlocks(), b.BlockSize(), b.VocabSize(), blocks, bs, m.Config.VocabSize)
	}
	return b
}

// tokens returns n token ids below vocab from seed.
func tokens(n, vocab int, seed uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, 9))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(1 + rng.IntN(vocab-1))
	}
	return ids
}

// equalBits reports the first index where a and b differ bit for bit, or -1.
func equalBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// compare checks got against want: bit for bit when tol is 0, else within tol relative.
func compare(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if tol == 0 {
		if i := equalBits(got, want); i >= 0 {
			t.Fatalf("%s: differs at %d of %d", what, i, len(want))
		}
		return
	}
	if d := RelDiff(t, got, want); d > tol {
		t.Fatalf("%s: differs by %.3g (tolerance %.3g)", what, d, tol)
	}
}

// testBlockTable: a prompt written in chunks that straddle block boundaries, into blocks
// scattered over the pool, reads back the same whatever blocks hold it (bit for bit), and agrees
// with the prompt written whole; the greedy continuations read the blocks the decodes wrote.
func testBlockTable(t *testing.T, tg Target) {
	m := Pico(t)
	const bs = 4
	prompt := tokens(37, m.Config.VocabSize, 1)
	run := func(seed uint64, chunk int) *SeqRun {
		b := open(t, tg, m, 64, bs)
		s := NewSeqRun(prompt, chunk, 6, 0)
		s.KeepRows = true
		RunSeqs(t, b, NewBlockPool(b.NumBlocks(), seed), []*SeqRun{s})
		return s
	}
	a, b := run(1, 7), run(2, 7)
	for i := range a.Rows {
		compare(t, fmt.Sprintf("step %d, other blocks", i), b.Rows[i], a.Rows[i], 0)
	}
	whole := run(3, 0)
	compare(t, "chunks of 7 against the whole prompt", a.Prefill, whole.Prefill, tg.Consistency)
	if !tg.Computes && !slices.Equal(a.Generated, whole.Generated) {
		t.Fatalf("chunked greedy ids %v, whole %v", a.Generated, whole.Generated)
	}
}

// testPrefixReuse: a sequence that reuses another's full blocks and computes only its suffix
// gets what computing its whole prompt gives.
func testPrefixReuse(t *testing.T, tg Target) {
	m := Pico(t)
	const bs = 4
	vocab := m.Config.VocabSize
	shared := tokens(24, vocab, 2)
	suffix := tokens(9, vocab, 3)
	prompt := append(slices.Clone(shared), suffix...)
	ctx := context.Background()
	b := open(t, tg, m, 64, bs)
	// The donor writes the shared prefix into blocks 10.. (6 full blocks).
	donor := []int32{10, 11, 12, 13, 14, 15}
	if _, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: shared, BlockTable: donor}}}); err != nil {
		t.Fatal(err)
	}
	table := append(slices.Clone(donor), 30, 31, 32)
	rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: suffix, Pos: len(shared), BlockTable: table, Logits: true}}})
	if err != nil {
		t.Fatal(err)
	}
	reused := slices.Clone(rows[0])
	rows, err = b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt, BlockTable: []int32{40, 41, 42, 43, 44, 45, 46, 47, 48}, Logits: true}}})
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "suffix over a reused prefix against the whole prompt", reused, rows[0], tg.Consistency)
}

// testAllLogits: a chunk with AllLogits returns one row per position, the last equal (bit for
// bit) to a plain Logits chunk's in the same batch and each within Consistency of a forward of
// its prefix alone; a backend without AllLogits refuses it.
func testAllLogits(t *testing.T, tg Target) {
	m := Pico(t)
	const bs, n = 16, 12
	vocab := m.Config.VocabSize
	prompt := tokens(n, vocab, 4)
	ctx := context.Background()
	b := open(t, tg, m, 16, bs)
	rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{
		{Tokens: prompt, BlockTable: []int32{0}, AllLogits: true, Logits: true},
		{Tokens: prompt, BlockTable: []int32{1}, Logits: true},
	}})
	if !tg.AllLogits {
		if err == nil {
			t.Fatal("a backend without AllLogits accepted a chunk asking for them")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	all, last := slices.Clone(rows[0]), slices.Clone(rows[1])
	if len(all) != n*vocab || len(last) != vocab {
		t.Fatalf("rows of %d and %d floats, want %d and %d", len(all), len(last), n*vocab, vocab)
	}
	compare(t, "last AllLogits row against the plain chunk's", all[(n-1)*vocab:], last, 0)
	for j := 0; j < n-1; j += 4 {
		rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt[:j+1], BlockTable: []int32{2}, Logits: true}}})
		if err != nil {
			t.Fatal(err)
		}
		compare(t, fmt.Sprintf("position %d against its prefix's own forward", j), all[j*vocab:(j+1)*vocab], rows[0], tg.Consistency)
	}
}

// testReference runs the fixture models' prompts (whole and in chunks of 5) and compares the
// first and last logits with transformers'.
func testReference(t *testing.T, tg Target) {
	if !tg.Computes {
		t.Skip("the backend does not compute the model")
	}
	for _, name := range FixtureModels {
		t.Run(name, func(t *testing.T) {
			ref := LoadReference(t, name)
			tol := FP32Tol
			if ref.DType == "bfloat16" {
				tol = BF16Tol
			}
			b := open(t, tg, LoadFixture(t, name, "config.json"), 256, 16)
			pool := NewBlockPool(b.NumBlocks(), 5)
			for p, prompt := range ref.Prompts {
				first := NewSeqRun(prompt.InputIDs[:1], 0, 0, 0)
				RunSeqs(t, b, pool, []*SeqRun{first})
				compare(t, fmt.Sprintf("prompt %d: first logits", p), first.Prefill, prompt.FirstLogits, tol)
				for _, chunk := range []int{0, 5} {
					s := NewSeqRun(prompt.InputIDs, chunk, 0, 0)
					RunSeqs(t, b, pool, []*SeqRun{s})
					compare(t, fmt.Sprintf("prompt %d chunk %d: last logits", p, chunk), s.Prefill, prompt.LastLogits, tol)
				}
			}
		})
	}
}

// sampleSpecs returns one spec per kind of request: greedy, greedy with logprobs, seeded
// temperature with top-p, top-k and min-p, penalties, logit bias, a ban and a grammar mask.
func sampleSpecs(vocab int, step uint32) []backend.SampleSpec {
	base := backend.SampleSpec{Temperature: 1, TopP: 1, RepetitionPenalty: 1, Seed: 11, Step: step}
	mask := make([]uint64, (vocab+63)/64)
	for i := range mask {
		mask[i] = 0x5555555555555555 // even ids only
	}
	specs := []backend.SampleSpec{
		{Temperature: 0, TopP: 1, RepetitionPenalty: 1},
		{Temperature: 0, TopP: 1, RepetitionPenalty: 1, Logprob: true, TopLogprobs: 3},
		base,
		{Temperature: 0.7, TopP: 0.9, TopK: 40, MinP: 0.02, RepetitionPenalty: 1, Seed: 12, Step: step, Logprob: true, TopLogprobs: 2},
		{Temperature: 1.3, TopP: 1, RepetitionPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: 0.4, Seed: 13, Step: step,
			Seen: []int32{1, 5, 9}, Generated: []int32{5, 7}, GenCounts: []int32{2, 1}},
		{Temperature: 0.9, TopP: 1, RepetitionPenalty: 1, Seed: 14, Step: step, Bias: []sampling.Bias{{ID: 3, Value: 5}, {ID: 4, Value: -100}}},
		{Temperature: 0.8, TopP: 1, RepetitionPenalty: 1, Seed: 15, Step: step, Ban: []int32{0, 1, 2}, Mask: mask},
	}
	return specs
}

// testDeviceSampler: a backend that samples on the device picks, for the same rows, what the
// host sampler picks from Forward's rows: every greedy pick, and every seeded one when it shares
// the host's arithmetic; logprobs and top logprobs alike.
func testDeviceSampler(t *testing.T, tg Target) {
	m := Pico(t)
	vocab := m.Config.VocabSize
	probe := open(t, tg, m, 8, 16)
	if _, ok := probe.(backend.DeviceSampler); !ok {
		t.Skip("the backend has no DeviceSampler")
	}
	host := open(t, tg, m, 64, 16)
	dev := open(t, tg, m, 64, 16).(backend.DeviceSampler)
	ctx := context.Background()
	specsAt := sampleSpecs(vocab, 0)
	n := len(specsAt)
	seqs := make([]backend.Seq, n)
	for i := range seqs {
		seqs[i] = backend.Seq{Tokens: tokens(3+i, vocab, uint64(20+i)), BlockTable: []int32{int32(2 * i), int32(2*i + 1)}, Logits: true}
	}
	var scratch sampling.Scratch
	for step := range 5 {
		specs := sampleSpecs(vocab, uint32(step))
		rows, err := host.Forward(ctx, &backend.Batch{Seqs: seqs})
		if err != nil {
			t.Fatal(err)
		}
		called := false
		picks, _, err := dev.ForwardSample(ctx, &backend.Batch{Seqs: seqs}, specs, func() { called = true })
		if err != nil {
			t.Fatal(err)
		}
		if !called {
			t.Fatal("ForwardSample did not call masks")
		}
		if len(picks) != n {
			t.Fatalf("%d picks for %d sequences", len(picks), n)
		}
		for i := range seqs {
			var want backend.Pick
			backend.HostSample(rows[i], &specs[i], &scratch, &want)
			got := picks[i]
			greedy := specs[i].Temperature == 0
			if !greedy && !tg.SharesHostSampler {
				if got.Token < 0 || int(got.Token) >= vocab || specs[i].Mask != nil && specs[i].Mask[got.Token/64]&(1<<(got.Token%64)) == 0 {
					t.Fatalf("step %d spec %d: device picked %d, outside the allowed tokens", step, i, got.Token)
				}
			} else if got.Token != want.Token {
				t.Fatalf("step %d spec %d: device picked %d, host %d", step, i, got.Token, want.Token)
			}
			if specs[i].Logprob && got.Token == want.Token && math.Abs(float64(got.Logprob-want.Logprob)) > 1e-5 {
				t.Fatalf("step %d spec %d: logprob %v, host %v", step, i, got.Logprob, want.Logprob)
			}
			if !slices.Equal(got.TopIDs, want.TopIDs) {
				t.Fatalf("step %d spec %d: top ids %v, host %v", step, i, got.TopIDs, want.TopIDs)
			}
		}
		for i := range seqs {
			sq := &seqs[i]
			sq.Pos += len(sq.Tokens)
			sq.Tokens = []int32{picks[i].Token}
		}
	}
}

// testBatchInvariance: a sequence computed alone and the same sequence in batches of 1..64 others
// (prefills long and short, joining while it decodes, and decodes) get the same logits at every
// step, bit for bit.
func testBatchInvariance(t *testing.T, tg Target) {
	models := map[string]func(testing.TB) *model.Model{"pico": Pico}
	if tg.Computes && !testing.Short() {
		models["qwen3"] = func(t testing.TB) *model.Model { return LoadFixture(t, "qwen3", "config.json") }
	}
	for name, load := range models {
		t.Run(name, func(t *testing.T) {
			m := load(t)
			vocab := m.Config.VocabSize
			const bs, steps = 16, 6
			target := func() *SeqRun {
				s := NewSeqRun(tokens(20, vocab, 100), 0, steps, 0)
				s.KeepRows = true
				return s
			}
			b := open(t, tg, m, 1024, bs)
			alone := target()
			RunSeqs(t, b, NewBlockPool(b.NumBlocks(), 1), []*SeqRun{alone})
			sizes := []int{2, 3, 5, 8, 17, 33, 64}
			if testing.Short() {
				sizes = []int{2, 5, 17, 64}
				if tg.Slow {
					sizes = []int{3, 40}
				}
			}
			for _, size := range sizes {
				s := target()
				var seqs []*SeqRun
				for i := 1; i < size; i++ {
					var o *SeqRun
					switch i % 4 {
					case 0: // a long prefill (the matrix-product path) joining while the target decodes
						o = NewSeqRun(tokens(33+i%40, vocab, uint64(i)), 0, 2, 1+i%3)
					case 1: // a short prompt: mostly decodes
						o = NewSeqRun(tokens(1+i%5, vocab, uint64(i)), 0, steps+2, 0)
					case 2: // a chunked prefill beside the target's
						o = NewSeqRun(tokens(40, vocab, uint64(i)), 7, 2, i%2)
					default: // a medium prompt joining later
						o = NewSeqRun(tokens(9+i%13, vocab, uint64(i)), 0, 3, i%5)
					}
					seqs = append(seqs, o)
				}
				// The target sits anywhere in the batch.
				seqs = slices.Insert(seqs, size/2, s)
				RunSeqs(t, b, NewBlockPool(b.NumBlocks(), uint64(size)), seqs)
				if len(s.Rows) != len(alone.Rows) {
					t.Fatalf("batch of %d: %d rows, alone %d", size, len(s.Rows), len(alone.Rows))
				}
				for i := range alone.Rows {
					compare(t, fmt.Sprintf("batch of %d, step %d", size, i), s.Rows[i], alone.Rows[i], 0)
				}
			}
		})
	}
}

// invariantTol is the tolerance of the checks a backend that claims Invariant passes bit for bit.
func invariantTol(tg Target) float64 {
	if tg.Invariant || !tg.Computes {
		return 0
	}
	return tg.Consistency
}

// testGenerated: a Generated Seq of k tokens (a speculative step: the last sampled token and its
// drafts) gives at every token the row k successive one-token decodes give, and writes the same
// KV (the decode after it agrees too); for k on both sides of the CPU's streaming and attention
// thresholds, beside another sequence's prefill.
func testGenerated(t *testing.T, tg Target) {
	m := Pico(t)
	const bs = 4
	vocab := m.Config.VocabSize
	prompt := tokens(11, vocab, 7)
	ctx := context.Background()
	tol := invariantTol(tg)
	for _, k := range []int{2, 9, 40} {
		t.Run(fmt.Sprint("k", k), func(t *testing.T) {
			b := open(t, tg, m, 64, bs)
			gen := tokens(k+1, vocab, uint64(30+k))
			n := len(prompt) + k + 1
			tables := [2][]int32{}
			for i := range (n + bs - 1) / bs {
				tables[0] = append(tables[0], int32(i))
				tables[1] = append(tables[1], int32(32+i))
			}
			// Both copies prefill the prompt the same way.
			for _, table := range tables {
				if _, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt, BlockTable: table}}}); err != nil {
					t.Fatal(err)
				}
			}
			// One decodes gen[:k] a token at a time, then gen[k].
			var want [][]float32
			for i := range k + 1 {
				rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: gen[i : i+1], Pos: len(prompt) + i, BlockTable: tables[0], Logits: true, Generated: true}}})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, slices.Clone(rows[0]))
			}
			// The other runs gen[:k] as one Generated Seq beside a prefill, then gen[k] alone.
			other := tokens(37, vocab, 8)
			seq := backend.Seq{Tokens: gen[:k], Pos: len(prompt), BlockTable: tables[1], Logits: true, AllLogits: tg.AllLogits, Generated: true}
			rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{
				{Tokens: other, BlockTable: []int32{50, 51, 52, 53, 54, 55, 56, 57, 58, 59}, Logits: true}, seq}})
			if err != nil {
				t.Fatal(err)
			}
			got := rows[1]
			for i := range k {
				if !tg.AllLogits && i < k-1 {
					continue
				}
				row := got
				if tg.AllLogits {
					row = got[i*vocab : (i+1)*vocab]
				}
				compare(t, fmt.Sprintf("token %d of %d", i, k), row, want[i], tol)
			}
			rows, err = b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: gen[k:], Pos: len(prompt) + k, BlockTable: tables[1], Logits: true, Generated: true}}})
			if err != nil {
				t.Fatal(err)
			}
			compare(t, "the decode after them", rows[0], want[k], tol)
		})
	}
}
