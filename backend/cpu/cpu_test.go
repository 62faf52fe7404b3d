package cpu

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// Tolerances against the transformers reference. bf16 checkpoints were run by the reference in
// bf16 arithmetic while this backend accumulates in float32 (from activations rounded to bf16,
// as the reference's are), so they get a looser bound.
const (
	fp32Tol = 1e-4
	bf16Tol = 4e-2
	// clearGap is the top-2 logit gap above which greedy decoding must pick the same token.
	clearGap = 1e-3
	// kv16Tol bounds how far two runs of the same prompt (chunked or batched differently) may
	// differ with a 16-bit KV cache: a summation-order difference of one float32 ulp can flip
	// the rounding of a cached element by one 16-bit ulp (2^-8 relative for bf16), so runs agree
	// only to about that, not to float32 precision.
	kv16Tol = 2e-3
	// bf16ActTol is the same bound for BF16 weights with Options.BF16Activations, which package
	// linear then multiplies by activations rounded to BF16: a summation-order difference upstream flips the rounding of
	// an activation by one BF16 ulp (2^-8 relative) as it does a cached element's, and every
	// projection's inputs are rounded, so runs agree only to about one BF16 ulp (2^-8 ≈ 3.9e-3)
	// of the logits' scale.
	bf16ActTol = 4e-3
)

// consistencyTol is the tolerance between two runs of the same prompt on backend b.
func consistencyTol(b *Backend) float64 {
	if b.mul.BF16Activations && b.m.Layers[0].QKV.Type == quant.BF16 {
		return bf16ActTol
	}
	if b.KVCacheDType() == backend.KVF32 {
		return fp32Tol
	}
	return kv16Tol
}

func tolerance(ref reference) float64 {
	if ref.DType == "bfloat16" {
		return bf16Tol
	}
	return fp32Tol
}

// checkAgainstReference compares one sequence's prefill logits and greedy ids with prompt p of
// ref.
func checkAgainstReference(t *testing.T, ref reference, p int, s *seqRun) {
	t.Helper()
	want := ref.Prompts[p]
	d := relDiff(t, s.Prefill, want.LastLogits)
	if d > tolerance(ref) {
		t.Errorf("prompt %d (len %d): last logits differ by %.3g of max |logit|", p, len(want.InputIDs), d)
	}
	if testing.Verbose() {
		t.Logf("prompt %d (len %d, chunk %d): last logits within %.2g; greedy %d/%d ids equal", p, len(want.InputIDs),
			s.Chunk, d, countEqual(s.Generated, want.GreedyNewIDs), len(want.GreedyNewIDs))
	}
	if ref.DType == "bfloat16" || want.MinTop2Gap <= clearGap {
		// The reference's path has a near-tie (or bf16 rounding), so any order of summation may
		// legitimately pick the other token; only the logits are comparable.
		return
	}
	if !slices.Equal(s.Generated, want.GreedyNewIDs) {
		t.Errorf("prompt %d (len %d): greedy ids\n got %v\nwant %v", p, len(want.InputIDs), s.Generated, want.GreedyNewIDs)
	}
}

// TestMatchesReference runs every fixture prompt through the paged backend, alone, with the
// prompt prefilled whole and in chunks of 1, 5 and 16 tokens, under both config formats, both
// attention paths (matrix products, tiled or not, and direct dot products) and several block
// sizes.
func TestMatchesReference(t *testing.T) {
	for _, name := range fixtureModels {
		ref := loadReference(t, name)
		for _, configFile := range []string{"config.json", "config.v5.json"} {
			m := loadFixture(t, name, configFile)
			for _, v := range []struct {
				blockSize, attnGEMMMin, attnTile int
				simd                             bool
			}{
				{16, gemmAttentionMinTokens, attnTileTokens, haveSIMD},
				{16, 1 << 30, attnTileTokens, false},
				{1, 1 << 30, 1, haveSIMD},
				{7, 1, 5, haveSIMD},
			} {
				t.Run(fmt.Sprintf("%s/%s/block%d/gemmattn%d/tile%d/simd%v", name, configFile, v.blockSize, min(v.attnGEMMMin, 99), v.attnTile, v.simd), func(t *testing.T) {
					b := newTestBackend(t, m, backend.Options{NumBlocks: 600, BlockSize: v.blockSize, Tuning: Tuning{Threads: 2}})
					b.attnGEMMMin, b.attnTile, b.simd = v.attnGEMMMin, v.attnTile, v.simd
					pool := newBlockPool(b.NumBlocks(), 7)
					for p, prompt := range ref.Prompts {
						first := newSeqRun(prompt.InputIDs[:1], 0, 0, 0)
						runSeqs(t, b, pool, []*seqRun{first})
						if d := relDiff(t, first.Prefill, prompt.FirstLogits); d > tolerance(ref) {
							t.Errorf("prompt %d: first logits differ by %.3g of max |logit|", p, d)
						}
						for _, chunk := range []int{0, 1, 5, 16} {
							s := newSeqRun(prompt.InputIDs, chunk, len(prompt.GreedyNewIDs), 0)
							runSeqs(t, b, pool, []*seqRun{s})
							checkAgainstReference(t, ref, p, s)
						}
					}
				})
			}
		}
	}
}

// TestBatchedMatchesAlone runs all prompts of a fixture in shared Forward calls, joining at
// different steps with different chunk sizes (so prefill chunks and decodes of other sequences
// share a batch), and checks each against the reference and against its own solo run; BF16
// fixtures also with their activations rounded to BF16 (Options.BF16Activations).
func TestBatchedMatchesAlone(t *testing.T) {
	for _, name := range fixtureModels {
		for _, bf16Acts := range []bool{false, true} {
			m := loadFixture(t, name, "config.json")
			if bf16Acts && m.Layers[0].QKV.Type != quant.BF16 {
				continue
			}
			t.Run(fmt.Sprintf("%s/bf16acts=%v", name, bf16Acts), func(t *testing.T) {
				batchedMatchesAlone(t, name, m, bf16Acts)
			})
		}
	}
}

// batchedMatchesAlone is one case of TestBatchedMatchesAlone.
func batchedMatchesAlone(t *testing.T, name string, m *model.Model, bf16Acts bool) {
	ref := loadReference(t, name)
	b := newTestBackend(t, m, backend.Options{NumBlocks: 200, Tuning: Tuning{Threads: 2, BF16Activations: bf16Acts}})
	pool := newBlockPool(b.NumBlocks(), 11)
	chunks := []int{16, 5, 0, 1}
	starts := []int{3, 0, 5, 1}
	var batched, solo []*seqRun
	for p, prompt := range ref.Prompts {
		batched = append(batched, newSeqRun(prompt.InputIDs, chunks[p], len(prompt.GreedyNewIDs), starts[p]))
		// A duplicate of the prompt in the same batch must not disturb its twin.
		batched = append(batched, newSeqRun(prompt.InputIDs, 3, len(prompt.GreedyNewIDs), starts[p]+2))
		alone := newSeqRun(prompt.InputIDs, 0, len(prompt.GreedyNewIDs), 0)
		runSeqs(t, b, pool, []*seqRun{alone})
		solo = append(solo, alone, alone)
	}
	runSeqs(t, b, pool, batched)
	for i, s := range batched {
		p := i / 2
		checkAgainstReference(t, ref, p, s)
		if d := relDiff(t, s.Prefill, solo[i].Prefill); d > consistencyTol(b) {
			t.Errorf("seq %d: batched prefill logits differ from solo by %.3g", i, d)
		}
		if ref.Prompts[p].MinTop2Gap > clearGap && !slices.Equal(s.Generated, solo[i].Generated) {
			t.Errorf("seq %d: batched greedy ids %v, solo %v", i, s.Generated, solo[i].Generated)
		}
	}
	if pool.Free() != b.NumBlocks() {
		t.Errorf("%d blocks leaked", b.NumBlocks()-pool.Free())
	}
}

// TestPico generates from the bundled pico checkpoint (Qwen3 family, bf16 weights) and checks
// the result is deterministic, independent of batching and chunking, and not degenerate.
func TestPico(t *testing.T) {
	m, err := model.Load("../../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	// "def fibonacci(n):\n" under models/pico/tokenizer.json: def, Ġf, ib, on, ac, ci, (n, ):Ċ.
	prompt := []int32{328, 287, 576, 265, 1349, 2768, 618, 330}
	b := newTestBackend(t, m, backend.Options{NumBlocks: 64, Tuning: Tuning{Threads: 2}})
	pool := newBlockPool(b.NumBlocks(), 3)
	const steps = 32
	first := newSeqRun(prompt, 0, steps, 0)
	runSeqs(t, b, pool, []*seqRun{first})
	again := newSeqRun(prompt, 3, steps, 0)
	other := newSeqRun([]int32{1, 872, 198}, 0, steps, 1)
	runSeqs(t, b, pool, []*seqRun{again, other})
	if !slices.Equal(first.Generated, again.Generated) {
		t.Errorf("generation changed between runs:\n%v\n%v", first.Generated, again.Generated)
	}
	if d := relDiff(t, again.Prefill, first.Prefill); d > consistencyTol(b) {
		t.Errorf("chunked, batched prefill logits differ from whole prefill by %.3g", d)
	}
	distinct := map[int32]bool{}
	for _, id := range first.Generated {
		distinct[id] = true
	}
	if len(distinct) < 4 {
		t.Errorf("degenerate generation, only %d distinct tokens: %v", len(distinct), first.Generated)
	}
	t.Logf("pico greedy ids: %v", first.Generated)
}

func countEqual(a, b []int32) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

// TestPrefixReuse shares the full leading blocks of one sequence with a second one that starts
// after them (as prefix caching does): the second sequence computes only its suffix, continues
// with greedy decoding, and must match the reference, reading the shared keys and values.
func TestPrefixReuse(t *testing.T) {
	for _, name := range []string{"llama32", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			ref := loadReference(t, name)
			m := loadFixture(t, name, "config.json")
			b := newTestBackend(t, m, backend.Options{NumBlocks: 64, BlockSize: 8})
			pool := newBlockPool(b.NumBlocks(), 5)
			const p = 3 // the 200-token prompt
			prompt := ref.Prompts[p].InputIDs
			ownerTable := make([]int32, (len(prompt)+7)/8)
			for i := range ownerTable {
				ownerTable[i] = pool.Take(t)
			}
			if _, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{
				{Tokens: prompt, BlockTable: ownerTable},
			}}); err != nil {
				t.Fatal(err)
			}
			const sharedBlocks = 13 // positions [0, 104)
			sharer := newSeqRun(prompt, 16, len(ref.Prompts[p].GreedyNewIDs), 0)
			sharer.Fed = sharedBlocks * 8
			sharer.Table = slices.Clone(ownerTable[:sharedBlocks])
			runSeqs(t, b, pool, []*seqRun{sharer})
			checkAgainstReference(t, ref, p, sharer)
		})
	}
}
