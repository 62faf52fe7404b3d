package api

import (
	"encoding/json"
	"testing"
)

// FuzzResponsesItems feeds untrusted input items, tools and tool_choice to the Responses
// decoders: they never panic, and what they accept is well formed (chat tools as JSON objects
// of type function, every tool message answering a call made before it).
func FuzzResponsesItems(f *testing.F) {
	f.Add(`[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]`,
		`[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}]`, `{"type":"function","name":"f"}`)
	f.Add(`[{"type":"reasoning","content":[{"type":"reasoning_text","text":"r"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}]`,
		`[{"type":"web_search"}]`, `"required"`)
	f.Add(`"text"`, `[{"name":"f","type":"function","function":{}}]`, `{"type":"allowed_tools"}`)
	f.Fuzz(func(t *testing.T, input, tools, choice string) {
		msgs, err := responsesMessages(&responsesRequest{Input: json.RawMessage(input)})
		if err == nil {
			calls := map[string]bool{}
			for _, m := range msgs {
				if list, ok := m["tool_calls"].([]any); ok {
					for _, c := range list {
						calls[c.(map[string]any)["id"].(string)] = true
					}
				}
				if m["role"] == "tool" && !calls[m["tool_call_id"].(string)] {
					t.Fatalf("tool message %v answers no call in %v", m, msgs)
				}
			}
		}
		if out, err := responsesTools(json.RawMessage(tools)); err == nil && out != nil {
			var list []struct {
				Type     string         `json:"type"`
				Function map[string]any `json:"function"`
			}
			if err := json.Unmarshal(out, &list); err != nil {
				t.Fatalf("tools %s became %s: %v", tools, out, err)
			}
			for _, tl := range list {
				if tl.Type != "function" || tl.Function == nil {
					t.Fatalf("tools %s became %s", tools, out)
				}
			}
		}
		if out, err := responsesToolChoice(json.RawMessage(choice)); err == nil && out != nil && !json.Valid(out) {
			t.Fatalf("tool_choice %s became %s", choice, out)
		}
	})
}
