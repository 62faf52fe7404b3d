package e2e

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSpeculativeEndToEnd serves the same requests on an engine with --speculative off and one
// with --speculative ngram (real processes, sockets, pico): a code-like prompt whose
// continuation repeats (so drafts are accepted), greedy and seeded, streamed with a stream
// interval and usage, with logprobs, cut by a stop string in the middle of the output, and
// under a JSON schema. Every text, id, logprob, finish reason and usage must be the same, and
// streamed must equal whole on the speculating engine.
func TestSpeculativeEndToEnd(t *testing.T) {
	off := startEngine(t, engineOpts{schedArgs: []string{"--speculative", "off"}})
	on := startEngine(t, engineOpts{schedArgs: []string{"--speculative", "ngram", "--speculative-max-draft", "6"}})
	prompt := "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef add(a, b):\n"
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"model": "pico", "prompt": prompt, "max_tokens": 64, "temperature": 0, "return_token_ids": true}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	whole := func(e *engine, body map[string]any) map[string]any {
		t.Helper()
		code, b := e.post("/v1/completions", body)
		if code != 200 {
			t.Fatalf("/v1/completions: %d %s", code, b)
		}
		var r map[string]any
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		delete(r, "id")
		delete(r, "created")
		// The prefix cache's hits depend on what each engine served before.
		delete(r["usage"].(map[string]any), "prompt_tokens_details")
		return r
	}
	greedy := whole(off, base(nil))
	text := greedy["choices"].([]any)[0].(map[string]any)["text"].(string)
	if len(text) < 40 {
		t.Fatalf("greedy text too short to cut: %q", text)
	}
	stop := text[len(text)/2 : len(text)/2+3] // a stop string in the middle of the output
	cases := map[string]map[string]any{
		"greedy":   nil,
		"logprobs": {"logprobs": 3},
		"seeded":   {"temperature": 0.8, "seed": 5, "top_p": 0.95},
		"stop":     {"stop": []string{stop}},
		"schema": {"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{
			"type": "object", "properties": map[string]any{"name_of_the_function": map[string]any{"type": "string", "maxLength": 10}},
			"required": []string{"name_of_the_function"}, "additionalProperties": false}}}},
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		extra := cases[name]
		want, got := whole(off, base(extra)), whole(on, base(extra))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: with speculation\n%v\nwithout\n%v", name, got, want)
		}
		if name == "stop" {
			c := got["choices"].([]any)[0].(map[string]any)
			if c["finish_reason"] != "stop" || strings.Contains(c["text"].(string), stop) {
				t.Errorf("stop %q: %v", stop, c)
			}
		}
		// Streamed in chunks of stream_interval tokens, with the usage: the same text and ids.
		sb := base(extra)
		sb["stream"], sb["stream_interval"], sb["stream_options"] = true, 3, map[string]any{"include_usage": true}
		sText, sIDs, usage, finish := completionStream(t, on, "/v1/completions", sb)
		c := got["choices"].([]any)[0].(map[string]any)
		var ids []int32
		for _, v := range c["token_ids"].([]any) {
			ids = append(ids, int32(v.(float64)))
		}
		u := got["usage"].(map[string]any)
		if sText != c["text"] || !slices.Equal(sIDs, ids) || finish != c["finish_reason"] ||
			usage["completion_tokens"] != int(u["completion_tokens"].(float64)) || usage["completion_tokens"] != len(ids) {
			t.Errorf("%s: streamed %q %v %v %s, whole %q %v %v %v", name, sText, sIDs, usage, finish, c["text"], ids, u, c["finish_reason"])
		}
	}
}
