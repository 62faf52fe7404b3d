package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReasoningTokensAndThinkingBlocks, on the Qwen3 tokenizer and template (the qwen3
// reasoning parser): usage.completion_tokens_details.reasoning_tokens is the number of output
// ids from <think> through </think> (found by detokenizing the returned token_ids), streamed as whole, and 0
// with thinking off; /v1/messages with thinking enabled answers a thinking block (the reasoning
// parser's) first, streamed as whole.
func TestReasoningTokensAndThinkingBlocks(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	// blockEnd is how many of ids it takes for their text to hold "</think>" (0: never), the
	// text read back through /detokenize
	blockEnd := func(ids []int32) int {
		for k := 1; k <= len(ids); k++ {
			var r struct{ Text string }
			if code, body := e.post("/detokenize", map[string]any{"tokens": ids[:k], "skip_special_tokens": false}); code != 200 || json.Unmarshal(body, &r) != nil {
				t.Fatalf("detokenize: %d %s", code, body)
			} else if strings.Contains(r.Text, "</think>") {
				return k
			}
		}
		return 0
	}
	user := []map[string]any{{"role": "user", "content": "How far?"}}
	for seed := 1; seed <= 2; seed++ {
		body := map[string]any{"messages": user, "temperature": 1, "seed": seed, "return_token_ids": true,
			"max_reasoning_chars": 20 + 10*seed, "max_tokens": 60}
		whole := e.chatWhole(t, body)
		streamed := e.chatStream(t, body)
		end := blockEnd(whole.Tokens)
		if end == 0 || end >= len(whole.Tokens) {
			t.Fatalf("seed %d: the output does not hold a closed thinking block and more: %v", seed, whole)
		}
		if got := whole.Usage.Details.ReasoningTokens; got != end || streamed.Usage.Details.ReasoningTokens != got {
			t.Fatalf("seed %d: reasoning_tokens whole %d, streamed %d, want %d", seed, got, streamed.Usage.Details.ReasoningTokens, end)
		}
		body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
		delete(body, "max_reasoning_chars")
		if off := e.chatWhole(t, body); off.Usage.Details.ReasoningTokens != 0 {
			t.Fatalf("seed %d: thinking off counts %d reasoning tokens", seed, off.Usage.Details.ReasoningTokens)
		}
	}

	// Anthropic thinking blocks (max_reasoning_chars makes the random model open and close one)
	msg := map[string]any{"max_tokens": 40, "temperature": 1, "seed": 3, "messages": user, "max_reasoning_chars": 24,
		"thinking": map[string]any{"type": "enabled", "budget_tokens": 8}}
	code, raw := e.post("/v1/messages", msg)
	var m struct {
		Content []struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	if code != 200 || json.Unmarshal(raw, &m) != nil || len(m.Content) < 2 || m.Content[0].Type != "thinking" || m.Content[0].Thinking == "" || m.Content[1].Type != "text" {
		t.Fatalf("thinking enabled: %d %s", code, raw)
	}
	msg["stream"] = true
	thinking := ""
	err := e.streamEvents(t.Context(), "/v1/messages", msg, func(data []byte) error {
		var ev struct {
			Type  string `json:"type"`
			Delta struct {
				Type     string `json:"type"`
				Thinking string `json:"thinking"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("%s: %w", data, err)
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "thinking_delta" {
			thinking += ev.Delta.Thinking
		}
		return nil
	})
	if err != nil || thinking != m.Content[0].Thinking {
		t.Fatalf("streamed thinking %q (%v), whole %q", thinking, err, m.Content[0].Thinking)
	}
}
