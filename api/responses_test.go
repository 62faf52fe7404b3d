package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// textFeed sends "Hel", "lo" and finishes as reason says.
func textFeed(reason FinishReason) func(st *Stream, req *Request) {
	return func(st *Stream, req *Request) {
		st.Push(&Delta{IDs: []int32{1}, Text: "Hel", PromptTokens: len(req.InputIDs), CompletionTokens: 1})
		st.Push(&Delta{IDs: []int32{2}, Text: "lo", PromptTokens: len(req.InputIDs), CompletionTokens: 2})
		st.Push(&Delta{Finished: true, FinishReason: reason, PromptTokens: len(req.InputIDs), CachedTokens: 1, CompletionTokens: 2})
	}
}

type responseOut struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Output []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Incomplete *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
		Total  int `json:"total_tokens"`
	} `json:"usage"`
}

func TestResponsesWhole(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: textFeed(FinishStop)}}
	ts := newTokServer(t, e, true)
	// The same conversation through chat completions: the prompt must be identical.
	post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},
		{"role":"assistant","content":"Yo"},{"role":"user","content":"Again"}],"max_tokens":5}`)
	chatIDs := e.lastRequest().InputIDs
	resp, body := post(t, ts, "/v1/responses", `{"model":"m","instructions":"Be brief.","max_output_tokens":5,"store":false,
		"input":[{"role":"user","content":"Hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Yo"}]},
		{"role":"user","content":[{"type":"input_text","text":"Ag"},{"type":"input_text","text":"ain"}]}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !slices.Equal(e.lastRequest().InputIDs, chatIDs) || e.lastRequest().MaxNewTokens != 5 {
		t.Fatalf("prompt differs from the chat one, or max tokens %d", e.lastRequest().MaxNewTokens)
	}
	if resp.Header.Get(IgnoredFieldsHeader) != "store" {
		t.Fatalf("ignored %q", resp.Header.Get(IgnoredFieldsHeader))
	}
	var r responseOut
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	n := len(chatIDs)
	if r.Object != "response" || r.Status != "completed" || !strings.HasPrefix(r.ID, "resp_") || len(r.Output) != 1 ||
		r.Output[0].Role != "assistant" || r.Output[0].Content[0].Type != "output_text" || r.Output[0].Content[0].Text != "Hello" ||
		r.Usage == nil || r.Usage.Input != n || r.Usage.Output != 2 || r.Usage.Total != n+2 || r.Incomplete != nil {
		t.Fatalf("%s", body)
	}
	e.feed = textFeed(FinishLength)
	_, body = post(t, ts, "/v1/responses", `{"input":"Hi","max_output_tokens":2}`)
	_ = json.Unmarshal([]byte(body), &r)
	if r.Status != "incomplete" || r.Incomplete == nil || r.Incomplete.Reason != "max_output_tokens" {
		t.Fatalf("length finish: %s", body)
	}
}

func TestResponsesStream(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: textFeed(FinishStop)}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/v1/responses", `{"input":"Hi","stream":true}`)
	if resp.StatusCode != 200 || strings.Contains(body, "[DONE]") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var types []string
	var deltas, doneText string
	var final responseOut
	lines := strings.Split(body, "\n")
	for i, line := range lines {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type     string          `json:"type"`
			Seq      int             `json:"sequence_number"`
			Delta    string          `json:"delta"`
			Text     string          `json:"text"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		if ev.Seq != len(types) || i == 0 || lines[i-1] != "event: "+ev.Type {
			t.Fatalf("event %d: %s after %q", len(types), data, lines[max(i-1, 0)])
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.output_text.done":
			doneText = ev.Text
		case "response.completed":
			_ = json.Unmarshal(ev.Response, &final)
		}
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}
	// However the deltas were chunked, they come between the part's start and its done.
	if !slices.Equal(slices.Compact(slices.Clone(types)), want) {
		t.Fatalf("events %q", types)
	}
	if deltas != "Hello" || doneText != "Hello" || final.Usage == nil || final.Usage.Output != 2 || final.Output[0].Content[0].Text != "Hello" {
		t.Fatalf("deltas %q done %q final %+v", deltas, doneText, final)
	}
}

func TestResponsesFormatAndRefusals(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: textFeed(FinishStop)}}
	ts := newTokServer(t, e, true)
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`
	resp, body := post(t, ts, "/v1/responses", `{"input":"x","text":{"format":{"type":"json_schema","name":"s","schema":`+schema+`,"strict":true}}}`)
	if resp.StatusCode != 200 || e.lastRequest().GrammarKind != GrammarJSONSchema || e.lastRequest().GrammarSpec != schema {
		t.Fatalf("%d %s / %+v", resp.StatusCode, body, e.lastRequest())
	}
	for _, c := range []struct{ body, param string }{
		{`"previous_response_id":"resp_1"`, "previous_response_id"},
		{`"conversation":"c"`, "conversation"},
		{`"tools":[{"type":"web_search"}]`, "tools[0].type"},
		{`"tools":[{"type":"function","function":{"name":"f"}}]`, "tools[0].function"},
		{`"tools":[{"type":"function","name":"f","parameters":{"type":"string"}}]`, "tools[0].parameters"},
		{`"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}`, "tool_choice"},
		{`"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"file_search"}`, "tool_choice"},
		{`"tool_choice":"required"`, "tool_choice"},
		{`"tools":[{"type":"function","name":"f"}],"tool_choice":"required","text":{"format":{"type":"json_object"}}`, "tool_choice"},
		{`"background":true`, "background"},
		{`"include":["reasoning.encrypted_content"]`, "include"},
		{`"max_output_tokens":0`, "max_output_tokens"},
		{`"text":{"format":{"type":"xml"}}`, "text.format"},
	} {
		resp, body := post(t, ts, "/v1/responses", `{"input":"x",`+c.body+`}`)
		var v struct {
			Error apiError `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		if resp.StatusCode != 400 || v.Error.Param != c.param {
			t.Fatalf("%s: %d %s, want a 400 naming %s", c.body, resp.StatusCode, body, c.param)
		}
	}
	if _, body := post(t, ts, "/v1/responses", `{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required","text":{"format":{"type":"json_object"}}}`); !strings.Contains(body, "text.format") {
		t.Fatalf("tools with a text format: %s, want the reason naming text.format", body)
	}
	for _, c := range []struct{ input, param string }{
		{`{"type":"function_call_output","call_id":"c","output":"x"}`, "input[0].call_id"},
		{`{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}`, "input[0].arguments"},
		{`{"type":"function_call","call_id":"c","arguments":"{}"}`, "input[0].name"},
		{`{"type":"item_reference","id":"x"}`, "input[0].type"},
	} {
		resp, body := post(t, ts, "/v1/responses", `{"input":[`+c.input+`]}`)
		var v struct {
			Error apiError `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		if resp.StatusCode != 400 || v.Error.Param != c.param {
			t.Fatalf("%s: %d %s, want a 400 naming %s", c.input, resp.StatusCode, body, c.param)
		}
	}
}
