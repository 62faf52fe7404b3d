package e2e

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestResponsesToolsNodeClient runs e2e/node/responses_tools.mjs (the official npm openai
// client) against pico, whose template has no tools (the engine's fallback syntax carries
// them): Responses function calls streamed and not, at temperature 0 (equal) and 1 (tool_choice
// required, named and auto), every call's arguments validated against the function's schema by
// an independent validator, a second turn with a function_call_output item; and chat n=3 tool
// calls at temperature 1, each choice its own call, streamed == non-streamed per index.
func TestResponsesToolsNodeClient(t *testing.T) {
	out := runNodeClient(t, "responses_tools.mjs")
	type call struct {
		ID        string `json:"id"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Status    string `json:"status"`
	}
	type respRun struct {
		Choice    json.RawMessage `json:"choice"`
		Status    string          `json:"status"`
		Calls     []call          `json:"calls"`
		Usage     map[string]any  `json:"usage"`
		Types     []string        `json:"types"`
		ArgDeltas string          `json:"argDeltas"`
		Text      string          `json:"text"`
	}
	type chatChoice struct {
		Index   int     `json:"index"`
		Finish  string  `json:"finish"`
		Content *string `json:"content"`
		Calls   []struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"calls"`
	}
	var res struct {
		Responses struct {
			Whole, Stream, Turn2 respRun
			Sampled              []respRun `json:"sampled"`
		} `json:"responses"`
		Chat struct {
			Whole       []chatChoice   `json:"whole"`
			Streamed    []chatChoice   `json:"streamed"`
			WholeUsage  map[string]any `json:"wholeUsage"`
			StreamUsage map[string]any `json:"streamUsage"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	s := compileSchema(t, weatherSchema)
	w, st := res.Responses.Whole, res.Responses.Stream
	if w.Status != "completed" || len(w.Calls) != 1 || !reflect.DeepEqual(w.Types, []string{"function_call"}) {
		t.Fatalf("responses: %s", out)
	}
	c := w.Calls[0]
	validateArgs(t, s, "responses", c.Arguments)
	if c.Name != "get_weather" || c.Status != "completed" || c.CallID == "" || c.ID == "" {
		t.Fatalf("responses call %+v", c)
	}
	// streamed: the same call (ids aside) and token counts (the cached share differs: the
	// second request finds the first's prompt), the deltas concatenating to its arguments
	if st.Status != "completed" || len(st.Calls) != 1 || st.Calls[0].Arguments != c.Arguments || st.Calls[0].Name != c.Name ||
		st.ArgDeltas != c.Arguments || st.Usage["input_tokens"] != w.Usage["input_tokens"] || st.Usage["output_tokens"] != w.Usage["output_tokens"] ||
		st.Calls[0].Status != "completed" {
		t.Fatalf("responses: streamed %+v, whole %+v", st, w)
	}
	for _, typ := range []string{"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done", "response.completed"} {
		found := false
		for _, got := range st.Types {
			found = found || got == typ
		}
		if !found {
			t.Fatalf("responses stream: no %s event in %q", typ, st.Types)
		}
	}
	for i, r := range res.Responses.Sampled {
		if string(r.Choice) != `"auto"` && (r.Status != "completed" || len(r.Calls) != 1) {
			t.Fatalf("responses sampled %d (tool_choice %s): %+v", i, r.Choice, r)
		}
		for _, c := range r.Calls {
			if c.Name != "get_weather" {
				t.Fatalf("responses sampled %d: call %+v", i, c)
			}
			if c.Status == "incomplete" {
				// "auto" at 60 tokens: a call cut by max_output_tokens is marked so, its
				// arguments a prefix; only an incomplete response may hold one
				if r.Status != "incomplete" {
					t.Fatalf("responses sampled %d: an incomplete call in a %q response: %+v", i, r.Status, r)
				}
				continue
			}
			validateArgs(t, s, "responses sampled", c.Arguments)
		}
	}
	if res.Responses.Turn2.Status == "" || res.Responses.Turn2.Usage == nil {
		t.Fatalf("responses: the second turn with the function_call_output failed: %s", out)
	}
	// chat, n=3: three choices, each a valid call; streamed equals whole choice by choice
	cw, cst := res.Chat.Whole, res.Chat.Streamed
	if len(cw) != 3 || !reflect.DeepEqual(cw, cst) || res.Chat.WholeUsage["completion_tokens"] != res.Chat.StreamUsage["completion_tokens"] ||
		res.Chat.WholeUsage["prompt_tokens"] != res.Chat.StreamUsage["prompt_tokens"] {
		t.Fatalf("chat n=3: streamed %+v (usage %v), whole %+v (usage %v)", cst, res.Chat.StreamUsage, cw, res.Chat.WholeUsage)
	}
	distinct := map[string]bool{}
	for i, ch := range cw {
		if ch.Index != i || ch.Finish != "tool_calls" || len(ch.Calls) != 1 || ch.Calls[0].Name != "get_weather" {
			t.Fatalf("chat n=3 choice %d: %+v", i, ch)
		}
		validateArgs(t, s, "chat n=3", ch.Calls[0].Arguments)
		distinct[ch.Calls[0].Arguments] = true
	}
	t.Logf("chat n=3 arguments: %d distinct of 3; responses sampled: %d runs", len(distinct), len(res.Responses.Sampled))
}

// TestResponsesToolsVercelAI runs e2e/node/responses_tools_clients.mjs: the Vercel AI SDK's
// OpenAI provider, on the Responses API, with tools: generateText (toolChoice required and auto,
// temperature 1), streamText = generateText (greedy), and a two-step run whose tool result goes
// back as a function_call_output; and LangChain's ChatOpenAI on the Responses API with bound
// tools (invoke = stream, a turn with a ToolMessage). Every call's input validates against the
// schema.
func TestResponsesToolsVercelAI(t *testing.T) {
	out := runNodeClient(t, "responses_tools_clients.mjs")
	type run struct {
		Finish string `json:"finish"`
		Calls  []struct {
			Name    string          `json:"name"`
			Input   json.RawMessage `json:"input"`
			Invalid bool            `json:"invalid"`
		} `json:"calls"`
		Usage map[string]any `json:"usage"`
	}
	var res struct {
		AI struct {
			Required, Auto, Stream, Generate0 run
			Steps                             struct {
				Steps       int               `json:"steps"`
				Executed    []json.RawMessage `json:"executed"`
				Finish      string            `json:"finish"`
				FirstInput  int               `json:"firstInput"`
				SecondInput int               `json:"secondInput"`
			} `json:"steps"`
		} `json:"ai"`
		LangChain struct {
			Invoke, Stream []struct {
				Name string          `json:"name"`
				Args json.RawMessage `json:"args"`
			}
			Invalid int `json:"invalid"`
			Turn2   struct {
				Usage map[string]any `json:"usage"`
				First map[string]any `json:"first"`
			} `json:"turn2"`
		} `json:"langchain"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	s := compileSchema(t, weatherSchema)
	lc := res.LangChain
	if len(lc.Invoke) != 1 || lc.Invalid != 0 || !reflect.DeepEqual(lc.Invoke, lc.Stream) || lc.Invoke[0].Name != "get_weather" {
		t.Fatalf("langchain: %s", out)
	}
	validateArgs(t, s, "langchain", string(lc.Invoke[0].Args))
	if in2, in1 := lc.Turn2.Usage["input_tokens"], lc.Turn2.First["input_tokens"]; in2 == nil || in1 == nil || in2.(float64) <= in1.(float64) {
		t.Fatalf("langchain: the turn with the ToolMessage: %s", out)
	}
	for name, r := range map[string]run{"required": res.AI.Required, "auto": res.AI.Auto, "stream": res.AI.Stream, "generate": res.AI.Generate0} {
		if name != "auto" && (r.Finish != "tool-calls" || len(r.Calls) != 1) {
			t.Fatalf("ai %s: %s", name, out)
		}
		for _, c := range r.Calls {
			if c.Name != "get_weather" || c.Invalid {
				t.Fatalf("ai %s: call %+v", name, c)
			}
			validateArgs(t, s, "ai "+name, string(c.Input))
		}
	}
	if string(res.AI.Stream.Calls[0].Input) != string(res.AI.Generate0.Calls[0].Input) ||
		res.AI.Stream.Usage["outputTokens"] != res.AI.Generate0.Usage["outputTokens"] {
		t.Fatalf("ai: streamText %+v, generateText %+v", res.AI.Stream, res.AI.Generate0)
	}
	st := res.AI.Steps
	if st.Steps != 2 || len(st.Executed) != 1 || st.SecondInput <= st.FirstInput {
		t.Fatalf("ai two steps: %s", out)
	}
	validateArgs(t, s, "ai executed", string(st.Executed[0]))
}
