package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestReasoning: Qwen3's template implies the qwen3 reasoning parser. With thinking on, the
// block goes to reasoning_content (streamed as delta.reasoning_content) and a response_format or
// a tool choice applies after it: the content validates. max_reasoning_chars bounds the block by
// grammar (a random model would never close it by itself). With thinking off
// (chat_template_kwargs enable_thinking false) there is no reasoning_content.
func TestReasoning(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	schemaText := `{"type":"object","properties":{"answer":{"type":"integer","minimum":0,"maximum":99},"unit":{"enum":["m","s"]}},"required":["answer","unit"],"additionalProperties":false}`
	sch := compileSchema(t, schemaText)
	user := []map[string]any{{"role": "user", "content": "How far, in meters?"}}
	schemas := toolSchemas(t)
	for seed := 1; seed <= 3; seed++ {
		base := map[string]any{"messages": user, "temperature": 1, "seed": seed, "return_token_ids": true, "max_reasoning_chars": 40 + 20*seed}

		// response_format after the block
		body := clone(base)
		body["max_tokens"] = 200
		body["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "schema": rawJSON(schemaText)}}
		whole := e.chatWhole(t, body)
		streamed := e.chatStream(t, body)
		what := fmt.Sprintf("seed %d response_format", seed)
		if !whole.same(streamed) {
			t.Fatalf("%s: streamed\n%v\nnon-streamed\n%v", what, streamed, whole)
		}
		if whole.Reasoning == "" || len([]rune(whole.Reasoning)) > 40+20*seed || whole.Finish != "stop" {
			t.Fatalf("%s: reasoning %q (budget %d), finish %s", what, whole.Reasoning, 40+20*seed, whole.Finish)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(whole.Content))
		if err != nil {
			t.Fatalf("%s: content %q is not JSON: %v", what, whole.Content, err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Fatalf("%s: content %s: %v", what, whole.Content, err)
		}
		if len(whole.Tokens) != whole.Usage.CompletionTokens {
			t.Fatalf("%s: %d ids, usage %d", what, len(whole.Tokens), whole.Usage.CompletionTokens)
		}

		// a required tool call after the block
		body = clone(base)
		body["max_tokens"] = 300
		body["tools"], body["tool_choice"], body["parallel_tool_calls"] = toolDefs, "required", false
		whole = e.chatWhole(t, body)
		streamed = e.chatStream(t, body)
		what = fmt.Sprintf("seed %d tools", seed)
		if !whole.same(streamed) {
			t.Fatalf("%s: streamed\n%v\nnon-streamed\n%v", what, streamed, whole)
		}
		if whole.Reasoning == "" {
			t.Fatalf("%s: no reasoning: %v", what, whole)
		}
		checkCalls(t, what, whole, "required", false, schemas)

		// free text after the block: split, streamed as non-streamed
		body = clone(base)
		body["max_tokens"] = 60
		whole = e.chatWhole(t, body)
		streamed = e.chatStream(t, body)
		if !whole.same(streamed) || whole.Reasoning == "" {
			t.Fatalf("seed %d free: streamed\n%v\nnon-streamed\n%v", seed, streamed, whole)
		}

		// thinking off: no reasoning_content
		body = clone(base)
		delete(body, "max_reasoning_chars")
		body["max_tokens"] = 20
		body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
		whole = e.chatWhole(t, body)
		if whole.Reasoning != "" || whole.Content == "" {
			t.Fatalf("seed %d thinking off: %v", seed, whole)
		}
	}
	for _, bad := range []map[string]any{
		{"messages": user, "max_reasoning_chars": 0},
		{"messages": user, "max_reasoning_chars": 1 << 20},
		{"messages": user, "reasoning_effort": "extreme"},
	} {
		if status, body := e.post("/v1/chat/completions", bad); status != 400 {
			t.Errorf("%v: %d %s", bad, status, body)
		}
	}
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }
