package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// choiceOut is one chat choice as a client assembles it.
type choiceOut struct {
	Reasoning, Content, Finish string
	Names, Args                []string
}

// TestToolsReasoningQwen3 runs Qwen3's own template (Hermes tool calls, the qwen3 reasoning
// parser) on a tiny random-weight model: chat n=3 with tool_choice required and thinking on, at
// temperature 1, every choice its own reasoning and a call that validates, streamed == whole per
// index; and /v1/responses with tools on the same template: a reasoning item then a function_call
// that validates, streamed == whole, and a second turn passing that output back with a
// function_call_output renders the prompt the chat request with reasoning_content, tool_calls and
// a tool message renders (the same prompt token count).
func TestToolsReasoningQwen3(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	schemas := toolSchemas(t)
	user := []map[string]any{{"role": "user", "content": "Weather in Paris?"}}
	body := map[string]any{"messages": user, "n": 3, "temperature": 1, "seed": 3, "max_reasoning_chars": 60, "max_tokens": 300,
		"tools": toolDefs, "tool_choice": "required", "parallel_tool_calls": false}
	status, raw := e.post("/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("%d %s", status, raw)
	}
	var whole struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content   *string    `json:"content"`
				Reasoning string     `json:"reasoning_content"`
				ToolCalls []wireCall `json:"tool_calls"`
			} `json:"message"`
			Finish string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	want := make([]choiceOut, len(whole.Choices))
	for i, c := range whole.Choices {
		w := &want[c.Index]
		w.Reasoning, w.Finish = c.Message.Reasoning, c.Finish
		if c.Message.Content != nil {
			w.Content = *c.Message.Content
		}
		for _, tc := range c.Message.ToolCalls {
			w.Names, w.Args = append(w.Names, tc.Function.Name), append(w.Args, tc.Function.Arguments)
		}
		if c.Index != i {
			t.Fatalf("choice %d has index %d", i, c.Index)
		}
	}
	got := make([]choiceOut, 3)
	stream := map[string]any{"stream": true}
	for k, v := range body {
		stream[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := e.streamEvents(ctx, "/v1/chat/completions", stream, func(data []byte) error {
		if string(data) == "[DONE]" {
			return nil
		}
		var ch struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content   string     `json:"content"`
					Reasoning string     `json:"reasoning_content"`
					ToolCalls []wireCall `json:"tool_calls"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &ch); err != nil {
			return fmt.Errorf("chunk %s: %w", data, err)
		}
		for _, c := range ch.Choices {
			g := &got[c.Index]
			g.Reasoning += c.Delta.Reasoning
			g.Content += c.Delta.Content
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					g.Names, g.Args = append(g.Names, tc.Function.Name), append(g.Args, "")
				}
				g.Args[tc.Index] += tc.Function.Arguments
			}
			if c.Finish != nil {
				g.Finish = *c.Finish
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 3 || !reflect.DeepEqual(got, want) {
		t.Fatalf("chat n=3: streamed %+v, whole %+v", got, want)
	}
	for i, w := range want {
		if w.Reasoning == "" || len([]rune(w.Reasoning)) > 60 || w.Finish != "tool_calls" || len(w.Names) != 1 || w.Content != "" {
			t.Fatalf("chat n=3 choice %d: %+v", i, w)
		}
		validateCall(t, fmt.Sprintf("chat n=3 choice %d", i), schemas, w.Names[0], w.Args[0])
	}

	// Responses: the flat tools, greedy (Responses has no seed), whole and streamed
	var flat []map[string]any
	for _, d := range toolDefs {
		m := map[string]any{"type": "function"}
		for k, v := range d["function"].(map[string]any) {
			m[k] = v
		}
		flat = append(flat, m)
	}
	rbody := map[string]any{"input": user, "tools": flat, "tool_choice": "required", "parallel_tool_calls": false,
		"temperature": 0, "max_reasoning_chars": 60, "max_output_tokens": 300}
	status, raw = e.post("/v1/responses", rbody)
	if status != 200 {
		t.Fatalf("responses: %d %s", status, raw)
	}
	var resp struct {
		Status string            `json:"status"`
		Output []json.RawMessage `json:"output"`
		Usage  struct {
			Input  int `json:"input_tokens"`
			Output int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatal(err)
	}
	type item struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		CallID    string `json:"call_id"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	items := make([]item, len(resp.Output))
	for i, o := range resp.Output {
		_ = json.Unmarshal(o, &items[i])
	}
	if resp.Status != "completed" || len(items) != 2 || items[0].Type != "reasoning" || len(items[0].Content) != 1 ||
		items[0].Content[0].Text == "" || items[1].Type != "function_call" {
		t.Fatalf("responses: %s", raw)
	}
	reasoning, call := items[0].Content[0].Text, items[1]
	validateCall(t, "responses", schemas, call.Name, call.Arguments)
	rstream := map[string]any{"stream": true}
	for k, v := range rbody {
		rstream[k] = v
	}
	var sReasoning, sArgs, sName string
	var final json.RawMessage
	err = e.streamEvents(ctx, "/v1/responses", rstream, func(data []byte) error {
		var ev struct {
			Type     string          `json:"type"`
			Delta    string          `json:"delta"`
			Item     item            `json:"item"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("event %s: %w", data, err)
		}
		switch ev.Type {
		case "response.reasoning_text.delta":
			sReasoning += ev.Delta
		case "response.function_call_arguments.delta":
			sArgs += ev.Delta
		case "response.output_item.added":
			if ev.Item.Type == "function_call" {
				sName = ev.Item.Name
			}
		case "response.completed":
			final = ev.Response
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sReasoning != reasoning || sArgs != call.Arguments || sName != call.Name || !strings.Contains(string(final), `"status":"completed"`) {
		t.Fatalf("responses: streamed reasoning %q call %s(%s), whole %q %s(%s)", sReasoning, sName, sArgs, reasoning, call.Name, call.Arguments)
	}

	// the second turn: the output passed back, and the function's result
	input := []any{user[0]}
	for _, o := range resp.Output {
		input = append(input, o)
	}
	input = append(input, map[string]any{"type": "function_call_output", "call_id": call.CallID, "output": "sunny"})
	status, raw = e.post("/v1/responses", map[string]any{"input": input, "tools": flat, "max_output_tokens": 4, "temperature": 0})
	var turn2 struct {
		Usage struct {
			Input int `json:"input_tokens"`
		} `json:"usage"`
	}
	if status != 200 || json.Unmarshal(raw, &turn2) != nil {
		t.Fatalf("responses turn 2: %d %s", status, raw)
	}
	// the chat tools in the order the server writes the flat ones ({"type", "function"}: the
	// template prints them as given)
	var chatTools []json.RawMessage
	for _, d := range toolDefs {
		fn, _ := json.Marshal(d["function"])
		chatTools = append(chatTools, json.RawMessage(`{"type":"function","function":`+string(fn)+`}`))
	}
	status, raw = e.post("/v1/chat/completions", map[string]any{"tools": chatTools, "max_tokens": 4, "temperature": 0, "messages": []any{user[0],
		map[string]any{"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": []any{map[string]any{"id": call.CallID, "type": "function",
			"function": map[string]any{"name": call.Name, "arguments": call.Arguments}}}},
		map[string]any{"role": "tool", "tool_call_id": call.CallID, "content": "sunny"}}})
	var chat2 struct {
		Usage struct {
			Prompt int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if status != 200 || json.Unmarshal(raw, &chat2) != nil {
		t.Fatalf("chat turn 2: %d %s", status, raw)
	}
	if turn2.Usage.Input != chat2.Usage.Prompt || turn2.Usage.Input <= resp.Usage.Input {
		t.Fatalf("turn 2: responses prompt %d tokens, chat %d (turn 1 %d)", turn2.Usage.Input, chat2.Usage.Prompt, resp.Usage.Input)
	}
}

// validateCall checks one call's arguments against its function's schema (jsonschema/v6).
func validateCall(t *testing.T, what string, schemas map[string]*jsonschema.Schema, name, args string) {
	t.Helper()
	s, ok := schemas[name]
	if !ok {
		t.Fatalf("%s: unknown function %q", what, name)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		t.Fatalf("%s: arguments %q do not parse: %v", what, args, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%s: arguments %s: %v", what, args, err)
	}
}
