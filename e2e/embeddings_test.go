package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/tokenizer"
)

// embeddingTolerance bounds the difference of a unit vector's entries between the engine (its
// prompt batched and chunked as the rank chooses) and the in-process reference forward.
const embeddingTolerance = 2e-3

// referenceEmbedding runs ids through pico's forward on the CPU backend in this process, takes
// the final normed hidden states and pools, truncates and normalizes them here.
func referenceEmbedding(t *testing.T, m *model.Model, ids []int32, pooling string, dims int) []float32 {
	t.Helper()
	b, err := cpu.New(m, backend.Options{NumBlocks: (len(ids) + 15) / 16, BlockSize: 16, Tuning: cpu.Tuning{Threads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	table := make([]int32, (len(ids)+15)/16)
	for i := range table {
		table[i] = int32(i)
	}
	if _, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: ids, BlockTable: table}}}); err != nil {
		t.Fatal(err)
	}
	rows, err := b.Hidden(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := b.HiddenSize()
	v := make([]float64, h)
	for r := range len(ids) {
		for j := range h {
			switch {
			case pooling == "mean":
				v[j] += float64(rows[r*h+j]) / float64(len(ids))
			case pooling == "last" && r == len(ids)-1:
				v[j] = float64(rows[r*h+j])
			}
		}
	}
	v = v[:dims]
	var n float64
	for _, x := range v {
		n += x * x
	}
	out := make([]float32, dims)
	for j, x := range v {
		out[j] = float32(x / math.Sqrt(n))
	}
	return out
}

func checkEmbedding(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d dimensions, want %d", what, len(got), len(want))
		return
	}
	var worst, norm float64
	for i := range got {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
		norm += float64(got[i]) * float64(got[i])
	}
	if worst > embeddingTolerance || math.Abs(norm-1) > 1e-4 {
		t.Errorf("%s: differs from the reference forward by up to %.3g (norm² %.6f)", what, worst, norm)
	}
}

// embeddingModelDir is pico as a sentence-transformers embedder the way Qwen3-Embedding ships:
// modules.json with last-token pooling and a Normalize module, and Matryoshka dimensions in
// config.json. The weights and tokenizer are pico's own (linked).
func embeddingModelDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		if err := os.Symlink(filepath.Join(modelPath, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(modelPath, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["matryoshka_dimensions"] = []int{32, 64, 128, 256}
	data, _ = json.Marshal(cfg)
	files := map[string]string{
		"config.json": string(data),
		"modules.json": `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
			{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
			{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]`,
		"1_Pooling/config.json": `{"word_embedding_dimension": 256, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false,
			"pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
			"pooling_mode_lasttoken": true, "include_prompt": true}`,
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type embeddingsSummary struct {
	Vectors []struct {
		Index     int       `json:"index"`
		Object    string    `json:"object"`
		Embedding []float32 `json:"embedding"`
	} `json:"vectors"`
	Usage struct {
		Prompt int `json:"prompt_tokens"`
		Total  int `json:"total_tokens"`
	} `json:"usage"`
	Model  string `json:"model"`
	Object string `json:"object"`
}

// TestEmbeddingsOpenAINodeClient serves pico as a last-token, normalized, Matryoshka embedder
// (its sentence-transformers files) on real processes and calls it through the official OpenAI
// Node client's embeddings.create: a string (the SDK's default base64), a batch of strings as
// floats, token ids, a batch of token-id arrays, and a 64-dimension prefix. Every vector must
// equal the pooling of an in-process forward of the same tokens; usage counts the inputs'
// tokens; each bad request is a 400 naming its parameter.
func TestEmbeddingsOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := embeddingModelDir(t)
	m, err := model.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, engineOpts{workers: 1, model: dir})
	cmd := exec.Command(node, "embeddings.mjs", e.base+"/v1", filepath.Base(dir))
	cmd.Dir = "node"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node embeddings.mjs: %v\n%s%s", err, out, stderr.Bytes())
	}
	var res struct {
		Single, Batch, IDs, IDsBatch, Dims embeddingsSummary
		Errors                             map[string]struct {
			Status  int    `json:"status"`
			Param   string `json:"param"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	fox := tok.Encode("The quick brown fox", true)
	cases := []struct {
		name   string
		got    embeddingsSummary
		inputs [][]int32
		dims   int
	}{
		{"single", res.Single, [][]int32{fox}, 256},
		{"batch", res.Batch, [][]int32{tok.Encode("Hello there", true), fox, tok.Encode("a", true)}, 256},
		{"ids", res.IDs, [][]int32{{5, 6, 7, 8, 9}}, 256},
		{"idsBatch", res.IDsBatch, [][]int32{{5, 6, 7, 8, 9}, {100, 200}}, 256},
		{"dims", res.Dims, [][]int32{fox}, 64},
	}
	for _, c := range cases {
		if c.got.Object != "list" || c.got.Model != filepath.Base(dir) || len(c.got.Vectors) != len(c.inputs) {
			t.Errorf("%s: object %q model %q, %d vectors for %d inputs", c.name, c.got.Object, c.got.Model, len(c.got.Vectors), len(c.inputs))
			continue
		}
		tokens := 0
		for i, ids := range c.inputs {
			v := c.got.Vectors[i]
			if v.Index != i || v.Object != "embedding" {
				t.Errorf("%s[%d]: index %d object %q", c.name, i, v.Index, v.Object)
			}
			checkEmbedding(t, c.name, v.Embedding, referenceEmbedding(t, m, ids, "last", c.dims))
			tokens += len(ids)
		}
		if c.got.Usage.Prompt != tokens || c.got.Usage.Total != tokens {
			t.Errorf("%s: usage %+v, want %d prompt and total tokens", c.name, c.got.Usage, tokens)
		}
	}
	// The Matryoshka prefix is the full vector's head, renormalized, not another vector.
	if full, short := res.Single.Vectors[0].Embedding, res.Dims.Vectors[0].Embedding; len(full) == 256 && len(short) == 64 {
		var n float64
		for _, x := range full[:64] {
			n += float64(x) * float64(x)
		}
		for j := range short {
			if d := math.Abs(float64(full[j])/math.Sqrt(n) - float64(short[j])); d > 1e-5 {
				t.Fatalf("dimensions 64: entry %d is not the renormalized prefix (off by %.3g)", j, d)
			}
		}
	}
	wantErr := map[string]string{
		"emptyString": "input", "emptyArray": "input", "emptyInBatch": "input[1]", "emptyIDs": "input[1]",
		"tooLong": "input", "badID": "input", "dimsZero": "dimensions", "dimsTooBig": "dimensions",
		"dimsNotTrained": "dimensions", "wrongType": "input", "wrongItem": "input[1]", "mixedNested": "input[1]",
		"badFormat": "encoding_format", "noInput": "input",
	}
	for name, param := range wantErr {
		got, ok := res.Errors[name]
		if !ok || got.Status != 400 || got.Param != param {
			t.Errorf("%s: %+v, want a 400 naming %s", name, got, param)
		}
	}
	if msg := res.Errors["dimsNotTrained"].Message; !strings.Contains(msg, "[32 64 128 256]") {
		t.Errorf("dimensions the model was not trained for: %q does not name the allowed ones", msg)
	}
	if msg := res.Errors["tooLong"].Message; !strings.Contains(msg, "4096") {
		t.Errorf("too long: %q does not name the context length", msg)
	}
}

// TestEmbeddingsMeanPoolingFlag: on the plain pico directory (no sentence-transformers files)
// --pooling mean pools by the mean and normalizes, and dimensions other than the full size are a
// 400 naming it, since pico is not a Matryoshka model. It runs with --skip-detokenization and two
// workers (the Node client test runs through detokd).
func TestEmbeddingsMeanPoolingFlag(t *testing.T) {
	m, err := model.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, engineOpts{workers: 2, skipDetok: true, tokArgs: []string{"--pooling", "mean"}})
	ids := []int32{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30}
	status, body := e.post("/v1/embeddings", map[string]any{"input": [][]int32{ids, ids[:3]}, "dimensions": 256})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var res struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			Prompt int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Data) != 2 {
		t.Fatalf("%v: %s", err, body)
	}
	checkEmbedding(t, "mean", res.Data[0].Embedding, referenceEmbedding(t, m, ids, "mean", 256))
	checkEmbedding(t, "mean of 3", res.Data[1].Embedding, referenceEmbedding(t, m, ids[:3], "mean", 256))
	if res.Usage.Prompt != len(ids)+3 {
		t.Errorf("usage %+v, want %d prompt tokens", res.Usage, len(ids)+3)
	}
	status, body = e.post("/v1/embeddings", map[string]any{"input": "x", "dimensions": 64})
	if status != 400 || !strings.Contains(string(body), "not a Matryoshka model") || !strings.Contains(string(body), "256") {
		t.Errorf("dimensions on a model without Matryoshka training: %d %s", status, body)
	}
}

// TestEmbeddingsSkipTokenizerInit: with no tokenizer anywhere, token-id inputs are embedded
// (last-token pooling, the default without sentence-transformers files) and a text input is a
// 400 naming the flag.
func TestEmbeddingsSkipTokenizerInit(t *testing.T) {
	m, err := model.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, engineOpts{workers: 1, skipTokInit: true})
	ids := []int32{40, 41, 42, 43, 44, 45, 46}
	status, body := e.post("/v1/embeddings", map[string]any{"input": ids})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var res struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Data) != 1 {
		t.Fatalf("%v: %s", err, body)
	}
	checkEmbedding(t, "ids", res.Data[0].Embedding, referenceEmbedding(t, m, ids, "last", 256))
	status, body = e.post("/v1/embeddings", map[string]any{"input": "text"})
	if status != 400 || !strings.Contains(string(body), "--skip-tokenizer-init") {
		t.Errorf("a text input without a tokenizer: %d %s", status, body)
	}
}

// TestEmbeddingsWithoutHiddenStatesAre4xx: a rank whose backend returns no hidden states (the
// replay runner, a benchmark backend with no model math) serves no embeddings: /v1/embeddings
// is a 400 naming why, counted as one, and a plain generate still works. Before, the rank's
// refusal came back as a failed request and the API answered 500, as for an engine fault.
func TestEmbeddingsWithoutHiddenStatesAre4xx(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1, schedArgs: []string{"--load-format", "replay", "--replay-step-time", "1ms"}})
	for _, input := range []any{"some text", []int32{40, 41, 42}} {
		status, body := e.post("/v1/embeddings", map[string]any{"input": input})
		if status != 400 || !strings.Contains(string(body), "hidden states") {
			t.Errorf("embeddings of %v on the replay backend: %d %s, want a 400 naming the hidden states", input, status, body)
		}
	}
	if status, body := e.post("/generate", map[string]any{"text": "hello", "sampling_params": map[string]any{"max_new_tokens": 4}}); status != 200 {
		t.Errorf("generate on the replay backend: %d %s", status, body)
	}
}
