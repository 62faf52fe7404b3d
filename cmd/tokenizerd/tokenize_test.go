package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// The subcommand prints the HF ids of every fixture text, and renders chat messages first.
func TestTokenizeLinesMatchesHF(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/tokenizers/qwen3-expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range fx.Cases {
		_ = enc.Encode(map[string]string{"text": c.Text})
	}
	_ = enc.Encode(map[string]any{"messages": []map[string]string{{"role": "user", "content": "What is 2+2?"}}})
	var out bytes.Buffer
	if err := tokenizeLines("../../testdata/tokenizer-files/qwen3", false, &in, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(fx.Cases)+1 {
		t.Fatalf("%d output lines for %d inputs", len(lines), len(fx.Cases)+1)
	}
	for i, c := range fx.Cases {
		var got struct{ IDs []int32 }
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil || !slices.Equal(got.IDs, c.IDs) {
			t.Fatalf("case %d: %s, want %v (%v)", i, lines[i], c.IDs, err)
		}
	}
	var chat struct{ IDs []int32 }
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &chat)
	// <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n: starts with <|im_start|> (151644).
	if len(chat.IDs) < 8 || chat.IDs[0] != 151644 {
		t.Fatalf("chat ids %v", chat.IDs)
	}
}

func TestTokenizeLinesRejectsBadInput(t *testing.T) {
	for _, in := range []string{`{"nope": 1}`, `not json`} {
		var out bytes.Buffer
		if err := tokenizeLines("../../testdata/tokenizer-files/qwen3", false, strings.NewReader(in+"\n"), &out); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
