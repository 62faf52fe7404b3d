package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// msgBlock is a content block as a client assembles it.
type msgBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text,omitempty"`
	Thinking string          `json:"thinking,omitempty"`
	Name     string          `json:"name,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
}

type msgObject struct {
	Type         string     `json:"type"`
	Content      []msgBlock `json:"content"`
	StopReason   string     `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Usage        struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
	} `json:"usage"`
}

// readMessagesStream assembles a Messages stream as the SDK does, checking the event order:
// message_start first, each block's deltas between its start and stop, message_delta then
// message_stop last.
func readMessagesStream(t *testing.T, body string) msgObject {
	t.Helper()
	var m msgObject
	var partial []string
	open := -1
	var types []string
	for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
		lines := strings.SplitN(ev, "\n", 2)
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("malformed event %q", ev)
		}
		typ := strings.TrimPrefix(lines[0], "event: ")
		types = append(types, typ)
		var e struct {
			Type         string          `json:"type"`
			Index        int             `json:"index"`
			ContentBlock msgBlock        `json:"content_block"`
			Delta        json.RawMessage `json:"delta"`
			Message      msgObject       `json:"message"`
			Usage        json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &e); err != nil || e.Type != typ {
			t.Fatalf("event %q: %v", ev, err)
		}
		switch typ {
		case "message_start":
			m = e.Message
		case "content_block_start":
			if open != -1 || e.Index != len(m.Content) {
				t.Fatalf("block %d starts while %d is open", e.Index, open)
			}
			open = e.Index
			b := e.ContentBlock
			b.Input = nil
			m.Content = append(m.Content, b)
			partial = append(partial, "")
		case "content_block_delta":
			if e.Index != open {
				t.Fatalf("delta for block %d, open %d", e.Index, open)
			}
			var d struct{ Type, Text, Thinking, PartialJSON string }
			var raw map[string]string
			_ = json.Unmarshal(e.Delta, &raw)
			d.Type, d.Text, d.Thinking, d.PartialJSON = raw["type"], raw["text"], raw["thinking"], raw["partial_json"]
			b := &m.Content[open]
			switch d.Type {
			case "text_delta":
				b.Text += d.Text
			case "thinking_delta":
				b.Thinking += d.Thinking
			case "input_json_delta":
				partial[open] += d.PartialJSON
			default:
				t.Fatalf("delta type %q", d.Type)
			}
		case "content_block_stop":
			if e.Index != open {
				t.Fatalf("stop of block %d, open %d", e.Index, open)
			}
			if m.Content[open].Type == "tool_use" {
				m.Content[open].Input = json.RawMessage(partial[open])
			}
			open = -1
		case "message_delta":
			var d struct {
				StopReason   string  `json:"stop_reason"`
				StopSequence *string `json:"stop_sequence"`
			}
			_ = json.Unmarshal(e.Delta, &d)
			m.StopReason, m.StopSequence = d.StopReason, d.StopSequence
			_ = json.Unmarshal(e.Usage, &m.Usage)
		}
	}
	if types[0] != "message_start" || types[len(types)-1] != "message_stop" || types[len(types)-2] != "message_delta" || open != -1 {
		t.Fatalf("event order %v", types)
	}
	return m
}

const msgWeatherTool = `{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`

// TestMessagesToolUse: tool_use blocks whole and streamed (every way of cutting the text) are
// the same, with stop_reason tool_use and exact usage; auto writes its text block first.
func TestMessagesToolUse(t *testing.T) {
	call := func(city string) string {
		return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" + city + "\"}}\n</tool_call>"
	}
	for _, c := range []struct {
		name, choice, text string
		want               string // the content blocks, JSON
		reason             string
	}{
		{"any", `{"type":"any"}`, call("Paris"), `[{"type":"tool_use","name":"get_weather","input":{"city": "Paris"}}]`, "tool_use"},
		{"tool", `{"type":"tool","name":"get_weather"}`, call("Oslo"), `[{"type":"tool_use","name":"get_weather","input":{"city": "Oslo"}}]`, "tool_use"},
		{"auto", `{"type":"auto"}`, "Let me look.\n" + call("Lima") + "\n" + call("Rome"),
			`[{"type":"text","text":"Let me look.\n"},{"type":"tool_use","name":"get_weather","input":{"city": "Lima"}},{"type":"tool_use","name":"get_weather","input":{"city": "Rome"}}]`, "tool_use"},
		{"none", `{"type":"none"}`, "No tools.", `[{"type":"text","text":"No tools."}]`, "end_turn"},
	} {
		for _, sizes := range [][]int{{1000}, {1}, {3, 7}} {
			e := &tokEngine{feedEngine: feedEngine{feed: pieceFeed(c.text, sizes, FinishStop)}}
			ts := newTokServer(t, e, true)
			req := `{"model":"m","max_tokens":100,"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Weather?"}],"tools":[` + msgWeatherTool + `],"tool_choice":` + c.choice
			resp, body := post(t, ts, "/v1/messages", req+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
			}
			if (c.name == "any" || c.name == "tool") && e.lastRequest().GrammarKind != GrammarCompose {
				t.Fatalf("%s: the output is not constrained", c.name)
			}
			var whole msgObject
			if err := json.Unmarshal([]byte(body), &whole); err != nil || whole.Type != "message" {
				t.Fatalf("%s: %v %s", c.name, err, body)
			}
			got, _ := json.Marshal(whole.Content)
			var want []msgBlock
			_ = json.Unmarshal([]byte(c.want), &want)
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) || whole.StopReason != c.reason || whole.Usage.Output != countPieces(c.text, sizes) {
				t.Fatalf("%s %v: %s", c.name, sizes, body)
			}
			_, sbody := post(t, ts, "/v1/messages", req+`,"stream":true}`)
			streamed := readMessagesStream(t, sbody)
			a, _ := json.Marshal(streamed)
			b, _ := json.Marshal(whole)
			if string(a) != string(b) {
				t.Fatalf("%s %v: streamed %s\nwhole %s", c.name, sizes, a, b)
			}
		}
	}
}

// countPieces is how many tokens pieceFeed pushes for text.
func countPieces(text string, sizes []int) int {
	n := 0
	for k := 0; len(text) > 0; k++ {
		text = text[min(sizes[k%len(sizes)], len(text)):]
		n++
	}
	return n
}

// TestMessagesErrors: bad input is a 400 in Anthropic's error shape, naming the field.
func TestMessagesErrors(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
	ts := newTokServer(t, e, true)
	for _, c := range []struct{ body, want string }{
		{`{"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{`{"max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{`{"max_tokens":5,"messages":[]}`, "messages"},
		{`{"max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, "messages[0].role"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "messages[0].content[0].type"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"some"}}`, "tool_choice.type"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "tools[0].type"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"tool","name":"nope"},"tools":[` + msgWeatherTool + `]}`, "nope"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"1"}]}]}`, "toolu_x"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"enabled","budget_tokens":2000}}`, "thinking"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}],"Max_tokens":3}`, "Max_tokens"},
	} {
		resp, body := post(t, ts, "/v1/messages", c.body)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if resp.StatusCode != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
}

// TestMessagesTurns: a tool_use / tool_result conversation renders as the chat path's tool
// messages, count_tokens counts the prompt /v1/messages runs, and a stop sequence is named.
func TestMessagesTurns(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: func(st *Stream, req *Request) {
		st.Push(&Delta{IDs: []int32{1}, Text: "Sunny", PromptTokens: len(req.InputIDs), CompletionTokens: 1, Finished: true, FinishReason: FinishStop, MatchedStop: "\n\n"})
	}}}
	ts := newTokServer(t, e, true)
	conv := `"tools":[` + msgWeatherTool + `],"messages":[{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18C"}]}]}]`
	resp, body := post(t, ts, "/v1/messages", `{"max_tokens":5,"stop_sequences":["\n\n"],`+conv+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var m msgObject
	_ = json.Unmarshal([]byte(body), &m)
	if m.StopReason != "stop_sequence" || m.StopSequence == nil || *m.StopSequence != "\n\n" || m.Content[0].Text != "Sunny" {
		t.Fatalf("%s", body)
	}
	prompt := e.lastRequest().InputIDs
	if !strings.Contains(e.tok.Decode(prompt, false), "18C") || !strings.Contains(e.tok.Decode(prompt, false), "Paris") {
		t.Fatalf("prompt %q lacks the tool turn", e.tok.Decode(prompt, false))
	}
	resp, body = post(t, ts, "/v1/messages/count_tokens", `{"model":"m",`+conv+`}`)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &ct) != nil || ct.InputTokens != len(prompt) || m.Usage.Input != len(prompt) {
		t.Fatalf("count_tokens %d %s, the request had %d prompt tokens (usage %d)", resp.StatusCode, body, len(prompt), m.Usage.Input)
	}
}
