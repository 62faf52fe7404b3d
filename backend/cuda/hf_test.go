package cuda

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/model"
)

// TestHFRandom checks the backend on a GPU against transformers on a random Qwen3-0.6B-shaped
// checkpoint that scripts/gpu/hf_ref.py made on the same machine (LLMSERVE_HF_REF names its
// directory): the checkpoint is read by model.Load, so a misreading shared by the loader and
// the kernels (RoPE, q/k norm, GQA) shows against transformers' float32 logits (1e-2 of max
// |logit|), and greedy continuations agree where the top-2 gap is clear.
func TestHFRandom(t *testing.T) {
	dir := os.Getenv("LLMSERVE_HF_REF")
	if dir == "" {
		t.Skip("LLMSERVE_HF_REF is not set (scripts/gpu/check.sh sets it after hf_ref.py)")
	}
	probeGPU(t)
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Prompts []struct {
			InputIDs       []int32   `json:"input_ids"`
			LastLogits     []float32 `json:"last_logits"`
			LastLogitsBF16 []float32 `json:"last_logits_bf16"`
			GreedyNewIDs   []int32   `json:"greedy_new_ids"`
			MinTop2Gap     float64   `json:"min_top2_gap"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	b := openOn(t, device{name: "gpu", gpu: true}, m, backend.Options{NumBlocks: 256}, Tuning{MaxPositions: 4096})
	var seqs []*seqRun
	for i, p := range ref.Prompts {
		seqs = append(seqs, &seqRun{prompt: p.InputIDs, chunk: []int{0, 16, 100}[i%3], steps: len(p.GreedyNewIDs), tokens: slices.Clone(p.InputIDs)})
	}
	rows := drive(t, []backend.Backend{b}, seqs, 256)[0]
	for i, p := range ref.Prompts {
		d := backendtest.RelDiff(t, rows[i][0], p.LastLogits)
		t.Logf("prompt %d (%d tokens): %.3g of max |logit| from transformers float32, %.3g from its bf16", i, len(p.InputIDs), d, backendtest.RelDiff(t, rows[i][0], p.LastLogitsBF16))
		if d > 1e-2 {
			t.Errorf("prompt %d: logits differ from transformers float32 by %.3g of max |logit|", i, d)
		}
		if p.MinTop2Gap > 0.1 && !slices.Equal(seqs[i].generated, p.GreedyNewIDs) {
			t.Errorf("prompt %d: greedy %v, transformers %v (min top-2 gap %.3g)", i, seqs[i].generated, p.GreedyNewIDs, p.MinTop2Gap)
		}
	}
}
