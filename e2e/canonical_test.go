package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/tokenizer"
)

// TestGrammarCanonicalLiterals serves one greedy JSON-schema request (a single long property
// name, so the grammar forces `{"name_of_the_registered_team":"`) on an engine with the default
// --grammar-canonical-literals and one with it off (real processes, pico). With it on, the output
// spells the forced name as the tokenizer encodes it, and the speculating engine (its drafts are
// that spelling) gives the same ids; with it off the model takes its own splits.
func TestGrammarCanonicalLiterals(t *testing.T) {
	on := startEngine(t, engineOpts{schedArgs: []string{"--speculative", "ngram"}})
	onPlain := startEngine(t, engineOpts{schedArgs: []string{"--speculative", "off"}})
	off := startEngine(t, engineOpts{schedArgs: []string{"--speculative", "off", "--grammar-canonical-literals=false"}})
	tok, err := tokenizer.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"model": "pico", "prompt": "Register the team as JSON:\n", "max_tokens": 24, "temperature": 0,
		"return_token_ids": true, "response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{
			"type": "object", "properties": map[string]any{"name_of_the_registered_team": map[string]any{"type": "string", "maxLength": 8}},
			"required": []string{"name_of_the_registered_team"}, "additionalProperties": false}}}}
	ids := func(e *engine) ([]int32, string) {
		t.Helper()
		code, b := e.post("/v1/completions", body)
		if code != 200 {
			t.Fatalf("/v1/completions: %d %s", code, b)
		}
		var r struct {
			Choices []struct {
				Text     string  `json:"text"`
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %v", b, err)
		}
		return r.Choices[0].TokenIDs, r.Choices[0].Text
	}
	const forced = `{"name_of_the_registered_team":"`
	// The last token of the name may run past it into the value: compare the ones before.
	want := tok.Encode(forced, false)
	want = want[:len(want)-1]
	got, text := ids(on)
	if !strings.HasPrefix(text, forced) || len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("canonical literals: %q %v, want the ids to start %v", text, got, want)
	}
	if plain, _ := ids(onPlain); !slices.Equal(plain, got) {
		t.Errorf("without speculation %v, with %v", plain, got)
	}
	free, text := ids(off)
	if !strings.HasPrefix(text, forced) || len(free) >= len(want) && slices.Equal(free[:len(want)], want) {
		t.Errorf("--grammar-canonical-literals=false: %q %v, spelled as the tokenizer does (%v)", text, free, want)
	}
}
