package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestToolParserSyntaxes: with --tool-call-parser mistral and deepseek_v3 the grammar writes
// calls in that syntax and its toolparse parser reads them back, on pico (whose template knows
// no tools, so only the grammar decides the syntax): required and named calls validate against
// their schemas at temperature 1, streamed == non-streamed, usage exact. qwen3_coder's
// tool_choice required is a 400 naming auto (its bare values cannot be constrained).
//
// The tools take no arguments ({} only): arguments with members can repeat a key until
// max_tokens until the grammar branch's fix of tool-argument compilation lands (issue 25).
func TestToolParserSyntaxes(t *testing.T) {
	empty := `{"type":"object","properties":{},"additionalProperties":false}`
	schemas := map[string]*jsonschema.Schema{"get_time": compileSchema(t, empty), "noop": compileSchema(t, empty)}
	tools := []map[string]any{
		{"type": "function", "function": map[string]any{"name": "get_time", "parameters": json.RawMessage(empty)}},
		{"type": "function", "function": map[string]any{"name": "noop", "parameters": json.RawMessage(empty)}},
	}
	for _, syntax := range []string{"mistral", "deepseek_v3"} {
		t.Run(syntax, func(t *testing.T) {
			e := startEngine(t, engineOpts{skipDetok: true, tokArgs: []string{"--tool-call-parser", syntax}})
			calls := 0
			for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}} {
				for seed := 1; seed <= 2; seed++ {
					what := fmt.Sprintf("%s tool_choice %v seed %d", syntax, choice, seed)
					body := toolRequest(choice, seed)
					body["tools"] = tools
					whole := e.chatWhole(t, body)
					checkCalls(t, what, whole, choice, false, schemas)
					streamed := e.chatStream(t, body)
					if !whole.same(streamed) {
						t.Fatalf("%s: streamed\n%v\nnon-streamed\n%v", what, streamed, whole)
					}
					calls += len(whole.Names)
				}
			}
			if calls == 0 {
				t.Fatal("no calls")
			}
		})
	}
	t.Run("qwen3_coder", func(t *testing.T) {
		e := startEngine(t, engineOpts{skipDetok: true, tokArgs: []string{"--tool-call-parser", "qwen3_coder"}})
		code, body := e.post("/v1/chat/completions", toolRequest("required", 1))
		if code != 400 || !strings.Contains(string(body), "tool_choice auto") {
			t.Fatalf("qwen3_coder required: %d %s", code, body)
		}
	})
}
