package main

import (
	"context"
	"encoding/json"
	"github.com/llmserve/llmserve/backend"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
)

// generate reproduces transformers' logits and greedy ids for the fixture models.
func TestGenerateMatchesTransformers(t *testing.T) {
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		dir := "../../testdata/models/" + name
		raw, err := os.ReadFile(dir + "/expected.json")
		if err != nil {
			t.Fatal(err)
		}
		var fx struct {
			Prompts []struct {
				InputIDs     []int32   `json:"input_ids"`
				LastLogits   []float32 `json:"last_logits"`
				GreedyNewIDs []int32   `json:"greedy_new_ids"`
				MinTop2Gap   float64   `json:"min_top2_gap"`
			} `json:"prompts"`
		}
		if err := json.Unmarshal(raw, &fx); err != nil {
			t.Fatal(err)
		}
		for i, p := range fx.Prompts {
			greedy := sampling.DefaultParams()
			greedy.Temperature = 0
			res, err := generate(context.Background(), dir, "cpu", "", p.InputIDs, len(p.GreedyNewIDs), greedy, true, true, backend.Options{KVCacheDType: backend.KVAuto}, noSpec)
			if err != nil {
				t.Fatal(err)
			}
			var maxAbs, maxDiff float64
			for j, v := range p.LastLogits {
				maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
				maxDiff = math.Max(maxDiff, math.Abs(float64(v-res.LastLogits[j])))
			}
			if maxDiff > 1e-4*maxAbs {
				t.Errorf("%s prompt %d: last_logits differ by %g (max |logit| %g)", name, i, maxDiff, maxAbs)
			}
			if p.MinTop2Gap > 1e-3 {
				for j := range p.GreedyNewIDs {
					if res.OutputIDs[j] != p.GreedyNewIDs[j] {
						t.Fatalf("%s prompt %d: greedy %v, want %v", name, i, res.OutputIDs, p.GreedyNewIDs)
					}
				}
			}
		}
	}
}

func TestGeneratePico(t *testing.T) {
	greedy := sampling.DefaultParams()
	greedy.Temperature = 0
	res, err := generate(context.Background(), "../../models/pico", "cpu", "", []int32{328, 287, 576, 265, 1349, 2768, 618, 330}, 16, greedy, true, false, backend.Options{KVCacheDType: backend.KVAuto}, noSpec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OutputIDs) != 16 || res.LastLogits != nil {
		t.Fatalf("pico: %+v", res)
	}
}

// noSpec is --speculative off.
var noSpec = specFlags{Speculative: scheduler.SpeculativeOff, MaxDraft: scheduler.DefaultMaxDraft}

// --speculative ngram gives generate's output (greedy and seeded) with fewer forward passes
// where the output repeats; bad values of the flags are refused naming them.
func TestGenerateSpeculative(t *testing.T) {
	greedy := sampling.DefaultParams()
	greedy.Temperature = 0
	seed := uint64(3)
	sampled := sampling.DefaultParams()
	sampled.Temperature, sampled.Seed = 0.7, &seed
	prompt := []int32{328, 287, 576, 265, 1349, 2768, 618, 330, 328, 287, 576, 265}
	for _, p := range []sampling.Params{greedy, sampled} {
		want, err := generate(context.Background(), "../../models/pico", "cpu", "", prompt, 48, p, true, false, backend.Options{KVCacheDType: backend.KVAuto}, noSpec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := generate(context.Background(), "../../models/pico", "cpu", "", prompt, 48, p, true, false, backend.Options{KVCacheDType: backend.KVAuto},
			specFlags{Speculative: scheduler.SpeculativeNgram, MaxDraft: 8})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.OutputIDs, want.OutputIDs) {
			t.Errorf("temperature %v: with speculation %v, without %v", p.Temperature, got.OutputIDs, want.OutputIDs)
		}
		if got.DraftTokens == 0 {
			t.Errorf("temperature %v: no drafts: %+v", p.Temperature, got)
		}
		t.Logf("temperature %v: %d steps for %d tokens, %d drafted, %d accepted", p.Temperature, got.Steps, len(got.OutputIDs), got.DraftTokens, got.AcceptedTokens)
	}
	for _, bad := range [][]string{{"--speculative", "eagle"}, {"--speculative-max-draft", "0"}, {"--speculative-max-draft", "65"}} {
		cmd := generateCommand()
		err := cmd.Run(context.Background(), append([]string{"generate", "--model-path", "../../testdata/models/qwen3", "--input-ids", "1,2,3"}, bad...))
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestParseIDs(t *testing.T) {
	if ids, err := parseIDs("5, 7,9"); err != nil || len(ids) != 3 || ids[2] != 9 {
		t.Fatalf("%v %v", ids, err)
	}
	for _, bad := range []string{"", "a", "-1", "5,,x"} {
		if _, err := parseIDs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// --kv-cache-dtype reaches the backend: an f16 cache on the float32 qwen3 fixture stays within
// f16 rounding of the reference, and an unknown type is refused before the model loads.
func TestGenerateKVCacheDType(t *testing.T) {
	cmd := generateCommand()
	err := cmd.Run(context.Background(), []string{"generate", "--model-path", "../../testdata/models/qwen3", "--input-ids", "1,2,3", "--kv-cache-dtype", "int4"})
	if err == nil || !strings.Contains(err.Error(), "kv-cache-dtype") || !strings.Contains(err.Error(), "int4") {
		t.Errorf("bad --kv-cache-dtype: %v", err)
	}
	greedy := sampling.DefaultParams()
	greedy.Temperature = 0
	ids := []int32{5, 7, 9, 11}
	f32, err := generate(context.Background(), "../../testdata/models/qwen3", "cpu", "", ids, 1, greedy, true, true, backend.Options{KVCacheDType: backend.KVF32}, noSpec)
	if err != nil {
		t.Fatal(err)
	}
	f16, err := generate(context.Background(), "../../testdata/models/qwen3", "cpu", "", ids, 1, greedy, true, true, backend.Options{KVCacheDType: backend.KVF16}, noSpec)
	if err != nil {
		t.Fatal(err)
	}
	var maxAbs, maxDiff float64
	for j, v := range f32.LastLogits {
		maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
		maxDiff = math.Max(maxDiff, math.Abs(float64(v-f16.LastLogits[j])))
	}
	if maxDiff == 0 || maxDiff > 2e-3*maxAbs {
		t.Errorf("f16 KV cache changed the logits by %g (max |logit| %g): want a small nonzero rounding effect", maxDiff, maxAbs)
	}
}

// TestGenerateGGUF: the pico model written as GGUF generates what its directory does, and
// --quantization re-stores the weights at load (bf16 -> f32 is exact here) or names a bad type.
func TestGenerateGGUF(t *testing.T) {
	m, err := model.Load("../../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.GGUFWriter()
	if err != nil {
		t.Fatal(err)
	}
	if err := tokenizer.SetGGUFMetadata(w, "../../models/pico", m.Config.VocabSize); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pico.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	greedy := sampling.DefaultParams()
	greedy.Temperature = 0
	prompt := []int32{328, 287, 576, 265, 1349, 2768, 618, 330}
	want, err := generate(context.Background(), "../../models/pico", "cpu", "", prompt, 8, greedy, true, true, backend.Options{KVCacheDType: backend.KVAuto}, noSpec)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"", "f32"} {
		got, err := generate(context.Background(), path, "cpu", q, prompt, 8, greedy, true, true, backend.Options{KVCacheDType: backend.KVAuto}, noSpec)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.OutputIDs, want.OutputIDs) {
			t.Errorf("GGUF (quantization %q): ids %v, want %v", q, got.OutputIDs, want.OutputIDs)
		}
		// The same bf16 weights run the same kernels, bit for bit; widened to f32 they run the f32
		// kernels with an f32 KV cache (auto), which differ from bf16's only in rounding.
		var maxAbs, maxDiff float64
		for j, v := range want.LastLogits {
			maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
			maxDiff = math.Max(maxDiff, math.Abs(float64(v-got.LastLogits[j])))
		}
		if (q == "" && maxDiff != 0) || maxDiff > 1e-2*maxAbs {
			t.Errorf("GGUF (quantization %q): last logits differ by up to %g (max |logit| %g)", q, maxDiff, maxAbs)
		}
	}
	if _, err := generate(context.Background(), path, "cpu", "q3_k", prompt, 1, greedy, true, false, backend.Options{KVCacheDType: backend.KVAuto}, noSpec); err == nil ||
		!strings.Contains(err.Error(), "q3_k") {
		t.Errorf("--quantization q3_k: %v", err)
	}
}
