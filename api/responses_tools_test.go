package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/tokenizer"
)

// pieceFeed pushes text cut into pieces of the given sizes (cycled), one token each, then
// finishes as reason says.
func pieceFeed(all string, sizes []int, reason FinishReason) func(st *Stream, req *Request) {
	return func(st *Stream, req *Request) {
		n, text := 0, all
		for k := 0; len(text) > 0; k++ {
			m := min(sizes[k%len(sizes)], len(text))
			n++
			st.Push(&Delta{IDs: []int32{int32(n)}, Text: text[:m], PromptTokens: len(req.InputIDs), CompletionTokens: n})
			text = text[m:]
		}
		st.Push(&Delta{Finished: true, FinishReason: reason, PromptTokens: len(req.InputIDs), CompletionTokens: n})
	}
}

// respItem is an output item as a client reads it.
type respItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
	Content   []struct {
		Text string `json:"text"`
	} `json:"content"`
}

type respObject struct {
	Status            string          `json:"status"`
	Output            []respItem      `json:"output"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	Tools             json.RawMessage `json:"tools"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
	Usage             struct {
		Output int `json:"output_tokens"`
	} `json:"usage"`
}

// readResponseStream assembles a Responses stream as the SDKs do (items from
// output_item.added, text and arguments from their deltas) and checks the event sequence: each
// item's deltas come between its added and done events, whose item equals the assembled one,
// and the final response's output equals the assembled items.
func readResponseStream(t *testing.T, body string) (items []respItem, final respObject) {
	t.Helper()
	open := -1
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type        string          `json:"type"`
			OutputIndex int             `json:"output_index"`
			ItemID      string          `json:"item_id"`
			Delta       string          `json:"delta"`
			Arguments   string          `json:"arguments"`
			Name        string          `json:"name"`
			Text        string          `json:"text"`
			Item        respItem        `json:"item"`
			Response    json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		inItem := func() *respItem {
			if ev.ItemID == "" && ev.Type == "response.output_item.done" {
				ev.ItemID = ev.Item.ID // done carries the item itself
			}
			if open < 0 || ev.OutputIndex != open || ev.ItemID != items[open].ID {
				t.Fatalf("%s for item %d (%s) while item %d is open", ev.Type, ev.OutputIndex, ev.ItemID, open)
			}
			return &items[open]
		}
		switch ev.Type {
		case "response.output_item.added":
			if open >= 0 || ev.OutputIndex != len(items) || ev.Item.Status != "in_progress" {
				t.Fatalf("item %d added while %d is open: %s", ev.OutputIndex, open, data)
			}
			items = append(items, ev.Item)
			if ev.Item.Type == "message" || ev.Item.Type == "reasoning" {
				items[len(items)-1].Content = append(items[len(items)-1].Content, struct {
					Text string `json:"text"`
				}{})
			}
			open = ev.OutputIndex
		case "response.output_text.delta", "response.reasoning_text.delta":
			inItem().Content[0].Text += ev.Delta
		case "response.function_call_arguments.delta":
			inItem().Arguments += ev.Delta
		case "response.function_call_arguments.done":
			if it := inItem(); it.Arguments != ev.Arguments || it.Name != ev.Name {
				t.Fatalf("arguments done %q %q, deltas %q %q", ev.Name, ev.Arguments, it.Name, it.Arguments)
			}
		case "response.output_text.done", "response.reasoning_text.done":
			if it := inItem(); it.Content[0].Text != ev.Text {
				t.Fatalf("text done %q, deltas %q", ev.Text, it.Content[0].Text)
			}
		case "response.output_item.done":
			it := inItem()
			it.Status = ev.Item.Status
			got, _ := json.Marshal(ev.Item)
			want, _ := json.Marshal(it)
			if string(got) != string(want) {
				t.Fatalf("item done %s, assembled %s", got, want)
			}
			open = -1
		case "response.completed", "response.incomplete", "response.failed":
			if err := json.Unmarshal(ev.Response, &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	if open >= 0 {
		t.Fatalf("item %d never done", open)
	}
	got, _ := json.Marshal(final.Output)
	want, _ := json.Marshal(items)
	if string(got) != string(want) {
		t.Fatalf("final output %s, streamed %s", got, want)
	}
	return items, final
}

const respWeatherTool = `{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}`

// TestResponsesFunctionCalls: function_call items, whole and streamed (every way of cutting the
// text), with the same items either way; auto writes its text as a message first.
// sameOutputStreamed posts req (a /v1/responses body less its closing brace) streamed and fails
// unless its output items equal whole, ids aside (they are per request; whole's are cleared).
func sameOutputStreamed(t *testing.T, ts *httptest.Server, req string, whole []respItem, sizes []int) {
	t.Helper()
	_, body := post(t, ts, "/v1/responses", req+`,"stream":true}`)
	items, _ := readResponseStream(t, body)
	for i := range whole {
		whole[i].ID, whole[i].CallID, items[i].ID, items[i].CallID = "", "", "", ""
	}
	a, _ := json.Marshal(items)
	b, _ := json.Marshal(whole)
	if string(a) != string(b) {
		t.Fatalf("%v: streamed %s, whole %s", sizes, a, b)
	}
}

func TestResponsesFunctionCalls(t *testing.T) {
	call := func(city string) string {
		return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" + city + "\"}}\n</tool_call>"
	}
	for _, c := range []struct {
		name, choice, text string
		parallel           string
		msg                string // the message item's text ("" when none)
		args               []string
	}{
		{"required", `"required"`, call("Paris"), "", "", []string{`{"city": "Paris"}`}},
		{"named", `{"type":"function","name":"get_weather"}`, call("Oslo"), `,"parallel_tool_calls":false`, "", []string{`{"city": "Oslo"}`}},
		{"parallel", `"required"`, call("Paris") + "\n" + call("Rome"), "", "", []string{`{"city": "Paris"}`, `{"city": "Rome"}`}},
		{"auto", `"auto"`, "Let me look.\n" + call("Lima"), "", "Let me look.\n", []string{`{"city": "Lima"}`}},
		{"auto text", `"auto"`, "No tool <tool_ needed.", "", "No tool <tool_ needed.", nil},
	} {
		for _, sizes := range [][]int{{1000}, {1}, {3, 7}, {11, 2, 5}} {
			e := &tokEngine{feedEngine: feedEngine{feed: pieceFeed(c.text, sizes, FinishStop)}}
			ts := newTokServer(t, e, true)
			req := `{"input":"Weather?","tools":[` + respWeatherTool + `],"tool_choice":` + c.choice + c.parallel
			resp, body := post(t, ts, "/v1/responses", req+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
			}
			if c.choice != `"auto"` && e.lastRequest().GrammarKind != GrammarCompose {
				t.Fatalf("%s: the output is not constrained: %+v", c.name, e.lastRequest())
			}
			var whole respObject
			if err := json.Unmarshal([]byte(body), &whole); err != nil {
				t.Fatal(err)
			}
			var args []string
			msg := ""
			for i, it := range whole.Output {
				switch it.Type {
				case "message":
					if i != 0 {
						t.Fatalf("%s: message after a call: %s", c.name, body)
					}
					msg = it.Content[0].Text
				case "function_call":
					if it.Name != "get_weather" || !strings.HasPrefix(it.CallID, "call_") || it.ID != "fc_"+strings.TrimPrefix(it.CallID, "call_") || it.Status != "completed" {
						t.Fatalf("%s: call item %+v", c.name, it)
					}
					args = append(args, it.Arguments)
				}
			}
			if whole.Status != "completed" || msg != c.msg || !slices.Equal(args, c.args) || (msg == "" && len(args) == 0) {
				t.Fatalf("%s: %s", c.name, body)
			}
			if !json.Valid(whole.Tools) || !strings.Contains(string(whole.Tools), `"name":"get_weather"`) || string(whole.ToolChoice) != strings.ReplaceAll(c.choice, " ", "") ||
				whole.ParallelToolCalls != (c.parallel == "") {
				t.Fatalf("%s: the response does not echo the tool settings: %s", c.name, body)
			}
			resp, body = post(t, ts, "/v1/responses", req+`,"stream":true}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream: %d %s", c.name, resp.StatusCode, body)
			}
			items, final := readResponseStream(t, body)
			if len(items) != len(whole.Output) || final.Usage.Output != whole.Usage.Output {
				t.Fatalf("%s %v: streamed %+v, whole %+v", c.name, sizes, items, whole.Output)
			}
			for i, it := range items {
				w := whole.Output[i]
				if it.Type != w.Type || it.Name != w.Name || it.Arguments != w.Arguments || it.Status != w.Status ||
					(it.Type == "message" && it.Content[0].Text != w.Content[0].Text) {
					t.Fatalf("%s %v: streamed item %d %+v, whole %+v", c.name, sizes, i, it, w)
				}
			}
		}
	}
}

// TestResponsesCallCutByLength: a call cut by max_output_tokens is an incomplete item of an
// incomplete response, streamed and not.
func TestResponsesCallCutByLength(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: pieceFeed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", []int{4}, FinishLength)}}
	ts := newTokServer(t, e, true)
	req := `{"input":"Weather?","max_output_tokens":12,"tools":[` + respWeatherTool + `],"tool_choice":"required"`
	_, body := post(t, ts, "/v1/responses", req+`}`)
	var whole respObject
	_ = json.Unmarshal([]byte(body), &whole)
	if whole.Status != "incomplete" || len(whole.Output) != 1 || whole.Output[0].Status != "incomplete" || whole.Output[0].Arguments != `{"ci` {
		t.Fatalf("%s", body)
	}
	_, body = post(t, ts, "/v1/responses", req+`,"stream":true}`)
	items, final := readResponseStream(t, body)
	if final.Status != "incomplete" || len(items) != 1 || items[0].Status != "incomplete" || items[0].Arguments != `{"ci` {
		t.Fatalf("%s", body)
	}
}

// TestResponsesToolTurnPrompt: a second turn (the call as a function_call item, its result as a
// function_call_output item) renders the same prompt as the chat request with the assistant's
// tool_calls and a tool message, tools and all.
func TestResponsesToolTurnPrompt(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: textFeed(FinishStop)}}
	ts := newTokServer(t, e, true)
	chatTool := `{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}`
	resp, body := post(t, ts, "/v1/chat/completions", `{"tools":[`+chatTool+`],"messages":[{"role":"system","content":"Be brief."},
		{"role":"user","content":"Weather?"},
		{"role":"assistant","content":"Looking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"},{"role":"tool","tool_call_id":"call_2","content":"rain"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	chatIDs := e.lastRequest().InputIDs
	resp, body = post(t, ts, "/v1/responses", `{"instructions":"Be brief.","tools":[`+respWeatherTool+`],"input":[
		{"role":"user","content":"Weather?"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking."}]},
		{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\": \"Paris\"}","status":"completed"},
		{"type":"function_call","id":"fc_2","call_id":"call_2","name":"get_weather","arguments":"{\"city\": \"Rome\"}","status":"completed"},
		{"type":"function_call_output","call_id":"call_1","output":"sunny"},
		{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"rain"}]}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := e.lastRequest().InputIDs; !slices.Equal(got, chatIDs) {
		tok, _ := picoTokenizer()
		t.Fatalf("responses prompt\n%q\nchat prompt\n%q", tok.Decode(got, false), tok.Decode(chatIDs, false))
	}
	if !strings.Contains(e.tok.Decode(chatIDs, false), "<tool_response>\nrain\n</tool_response>") {
		t.Fatalf("the tool result is not in the prompt: %q", e.tok.Decode(chatIDs, false))
	}
}

// TestResponsesReasoningItems: with a reasoning parser the thinking block is a reasoning item
// before the message and the calls, whole and streamed alike; a reasoning item passed back in
// the input goes to the next assistant message, and one this server cannot read is a 400.
func TestResponsesReasoningItems(t *testing.T) {
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text := "<think>Paris, then.</think>\n\nChecking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	for _, sizes := range [][]int{{1000}, {1}, {4, 9}} {
		e := &tokEngine{feedEngine: feedEngine{feed: pieceFeed(text, sizes, FinishStop)}, tok: tok}
		srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1, ReasoningParser: ReasoningQwen3,
			DefaultSampling: sampling.DefaultParams(), GrammarStrict: true}, e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv.Handler())
		req := `{"input":"Weather?","tools":[` + respWeatherTool + `]`
		_, body := post(t, ts, "/v1/responses", req+`}`)
		var whole respObject
		if err := json.Unmarshal([]byte(body), &whole); err != nil {
			t.Fatal(err)
		}
		o := whole.Output
		if len(o) != 3 || o[0].Type != "reasoning" || o[0].Content[0].Text != "Paris, then." || !strings.HasPrefix(o[0].ID, "rs_") ||
			o[1].Type != "message" || o[1].Content[0].Text != "Checking." || o[2].Type != "function_call" || o[2].Arguments != `{"city": "Paris"}` {
			t.Fatalf("%v: %s", sizes, body)
		}
		sameOutputStreamed(t, ts, req, whole.Output, sizes)
		ts.Close()
	}
	msgs, err := responsesMessages(&responsesRequest{Input: json.RawMessage(`[{"role":"user","content":"Weather?"},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Paris."}]},
		{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}"},
		{"type":"function_call_output","call_id":"call_1","output":"sun"}]`)})
	if err != nil || len(msgs) != 3 || msgs[1]["reasoning_content"] != "Paris." || msgs[1]["role"] != "assistant" || msgs[2]["role"] != "tool" {
		t.Fatalf("%v %v", msgs, err)
	}
	for _, c := range []struct{ item, param string }{
		{`{"type":"reasoning","encrypted_content":"x"}`, "input[0].encrypted_content"},
		{`{"type":"reasoning","content":[{"type":"output_text","text":"x"}]}`, "input[0].content[0].type"},
	} {
		_, err := responsesMessages(&responsesRequest{Input: json.RawMessage(`[` + c.item + `]`)})
		var bre *BadRequestError
		if !errors.As(err, &bre) || bre.Param != c.param {
			t.Fatalf("%s: %v, want a 400 naming %s", c.item, err, c.param)
		}
	}
}

// qwen3Tokenizer is Qwen3's tokenizer and chat template (Hermes tool calls, thinking blocks).
var qwen3Tokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	return tokenizer.Load("../testdata/tokenizer-files/qwen3")
})

// TestResponsesTurnPromptQwen3: on Qwen3's own template, a Responses second turn (a reasoning
// item, two function_call items and their outputs, flat tools) renders the very prompt of the
// chat request with reasoning_content, tool_calls, tool messages and the same tools.
func TestResponsesTurnPromptQwen3(t *testing.T) {
	tok, err := qwen3Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &tokEngine{feedEngine: feedEngine{feed: textFeed(FinishStop)}, tok: tok}
	ts := serveEngine(t, e, true)
	chatTool := `{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}`
	resp, body := post(t, ts, "/v1/chat/completions", `{"tools":[`+chatTool+`],"messages":[{"role":"system","content":"Be brief."},
		{"role":"user","content":"Weather?"},
		{"role":"assistant","content":null,"reasoning_content":"Two cities.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"},{"role":"tool","tool_call_id":"call_2","content":"rain"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	chatIDs := e.lastRequest().InputIDs
	resp, body = post(t, ts, "/v1/responses", `{"instructions":"Be brief.","tools":[`+respWeatherTool+`],"input":[
		{"role":"user","content":"Weather?"},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Two cities."}],"status":"completed"},
		{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\": \"Paris\"}","status":"completed"},
		{"type":"function_call","id":"fc_2","call_id":"call_2","name":"get_weather","arguments":"{\"city\": \"Rome\"}","status":"completed"},
		{"type":"function_call_output","call_id":"call_1","output":"sunny"},
		{"type":"function_call_output","call_id":"call_2","output":"rain"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	got := e.lastRequest().InputIDs
	prompt := tok.Decode(chatIDs, false)
	if !slices.Equal(got, chatIDs) {
		t.Fatalf("responses prompt\n%q\nchat prompt\n%q", tok.Decode(got, false), prompt)
	}
	for _, want := range []string{"<think>\nTwo cities.\n</think>", `"arguments": {"city": "Rome"}`, "<tool_response>\nrain\n</tool_response>", `{"type": "function", "function": {"name": "get_weather"`} {
		if !strings.Contains(prompt, want) {
			t.Fatalf("%q is not in the prompt %q", want, prompt)
		}
	}
}

// TestResponsesTextAfterCalls: a second call cut short in its head (max_output_tokens) is no
// call; its text is a message after the first call's item, whole and streamed alike, however the
// text is cut.
func TestResponsesTextAfterCalls(t *testing.T) {
	text := "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\""
	for _, sizes := range [][]int{{1000}, {1}, {5, 3}, {70, 100}} {
		e := &tokEngine{feedEngine: feedEngine{feed: pieceFeed(text, sizes, FinishLength)}}
		ts := newTokServer(t, e, true)
		req := `{"input":"Weather?","tools":[` + respWeatherTool + `]`
		_, body := post(t, ts, "/v1/responses", req+`}`)
		var whole respObject
		if err := json.Unmarshal([]byte(body), &whole); err != nil {
			t.Fatal(err)
		}
		o := whole.Output
		if whole.Status != "incomplete" || len(o) != 3 || o[0].Type != "message" || o[0].Content[0].Text != "Sure." ||
			o[1].Type != "function_call" || o[1].Status != "completed" || o[2].Type != "message" ||
			o[2].Content[0].Text != "<tool_call>\n{\"" || o[2].Status != "incomplete" || o[2].ID != o[0].ID+"_1" {
			t.Fatalf("%v: %s", sizes, body)
		}
		sameOutputStreamed(t, ts, req, whole.Output, sizes)
	}
}
