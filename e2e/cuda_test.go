package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestCUDAEmulatedEngine serves pico with schedulerd --device cuda on the emulated device
// (LLMSERVE_CUDA_EMULATE=1): the CUDA backend's whole host side (weights, KV pool, planning,
// graphs, device sampling with grammar masks) behind real processes and sockets. Greedy output
// equals the CPU's, streams equal whole responses with exact usage, seeded draws repeat, and
// a JSON-schema constrained request yields JSON of that schema.
func TestCUDAEmulatedEngine(t *testing.T) {
	want := directGenerate(t, promptIDs, 16)
	t.Setenv("LLMSERVE_CUDA_EMULATE", "1") // inherited by the engine's processes
	e := startEngine(t, engineOpts{schedArgs: []string{"--device", "cuda:0"}})
	greedy := map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"temperature": 0, "max_new_tokens": 16}}
	whole := generate(t, e, greedy)
	if !slices.Equal(whole.OutputIDs, want) {
		t.Fatalf("greedy on the emulated CUDA backend %v, CPU %v", whole.OutputIDs, want)
	}
	streamed, _ := streamGenerate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"temperature": 0, "max_new_tokens": 16}})
	if !slices.Equal(streamed.OutputIDs, whole.OutputIDs) || streamed.Text != whole.Text || streamed.MetaInfo.CompletionTokens != len(streamed.OutputIDs) {
		t.Fatalf("stream %v %q (usage %+v) != whole %v %q", streamed.OutputIDs, streamed.Text, streamed.MetaInfo, whole.OutputIDs, whole.Text)
	}
	seeded := func() []int32 {
		return generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"temperature": 0.9, "seed": 7, "max_new_tokens": 12}}).OutputIDs
	}
	if a, b := seeded(), seeded(); !slices.Equal(a, b) || len(a) == 0 {
		t.Fatalf("seeded draws %v and %v differ", a, b)
	}
	schema := `{"type":"object","properties":{"a":{"enum":["x","y"]}},"required":["a"],"additionalProperties":false}`
	r := generate(t, e, map[string]any{"text": "Answer in JSON: ", "sampling_params": map[string]any{"temperature": 1, "seed": 3, "max_new_tokens": 60, "json_schema": schema}})
	var v struct {
		A string `json:"a"`
	}
	dec := json.NewDecoder(strings.NewReader(r.Text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || (v.A != "x" && v.A != "y") {
		t.Fatalf("constrained output %q is not an object of the schema: %v", r.Text, err)
	}
}
