package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// weatherSchema is get_weather's parameters in e2e/node/tools_clients.mjs and the openai-go test.
const weatherSchema = `{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`

func validateArgs(t *testing.T, s *jsonschema.Schema, what, args string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		t.Fatalf("%s: arguments %q do not parse: %v", what, args, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%s: arguments %s: %v", what, args, err)
	}
}

// TestToolCallsNodeClients runs the official npm openai client (tool calls streamed and not, and
// a second turn with the tool's result) and the Vercel AI SDK's generateText with tools
// (toolChoice required and auto) and streamText (required) against pico, whose template has no tools: the engine's
// fallback syntax carries them.
func TestToolCallsNodeClients(t *testing.T) {
	out := runNodeClient(t, "tools_clients.mjs")
	type call struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type usage struct {
		CompletionTokens int `json:"completion_tokens"`
	}
	var res struct {
		OpenAI struct {
			Whole, Stream struct {
				Finish string `json:"finish"`
				Calls  []call `json:"calls"`
				Usage  usage  `json:"usage"`
			}
			Turn2 struct {
				Finish string `json:"finish"`
			} `json:"turn2"`
		} `json:"openai"`
		AI map[string]struct {
			Finish string `json:"finish"`
			Calls  []struct {
				Name    string          `json:"name"`
				Input   json.RawMessage `json:"input"`
				Invalid bool            `json:"invalid"`
			} `json:"calls"`
		} `json:"ai"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	s := compileSchema(t, weatherSchema)
	w, st := res.OpenAI.Whole, res.OpenAI.Stream
	if w.Finish != "tool_calls" || len(w.Calls) != 1 || st.Finish != "tool_calls" || len(st.Calls) != 1 {
		t.Fatalf("openai client: %s", out)
	}
	validateArgs(t, s, "openai", w.Calls[0].Function.Arguments)
	if st.Calls[0].Function != w.Calls[0].Function || st.Usage != w.Usage || st.Calls[0].ID == "" {
		t.Fatalf("openai client: streamed %+v, non-streamed %+v", st, w)
	}
	if res.OpenAI.Turn2.Finish == "" {
		t.Fatalf("openai client: the second turn with the tool result failed: %s", out)
	}
	for _, choice := range []string{"required", "auto", "stream"} {
		r, ok := res.AI[choice]
		if !ok {
			t.Fatalf("ai %s: missing in %s", choice, out)
		}
		if choice != "auto" && (r.Finish != "tool-calls" || len(r.Calls) == 0) {
			t.Fatalf("ai required: %s", out)
		}
		for _, c := range r.Calls {
			if c.Name != "get_weather" || c.Invalid {
				t.Fatalf("ai %s: call %+v", choice, c)
			}
			validateArgs(t, s, "ai "+choice, string(c.Input))
		}
	}
}
