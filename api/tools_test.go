package api

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/tokenizer/chat"
	"github.com/llmserve/llmserve/toolparse"
)

// parsed is a chat output as a client sees it.
type parsed struct {
	reasoning, content string
	names, args        []string
}

func (p parsed) String() string {
	return fmt.Sprintf("reasoning %q content %q names %q args %q", p.reasoning, p.content, p.names, p.args)
}

// readWhole parses text as a non-streamed response does.
func readWhole(reasoning string, tr *toolRequest, text string) parsed {
	o := newChatOutput(reasoning, tr)
	o.feed(text)
	o.finish()
	all := o.all()
	p := parsed{reasoning: string(all.Reasoning), content: string(all.Content)}
	for _, c := range o.calls() {
		p.names = append(p.names, c.Name)
		p.args = append(p.args, string(c.Args))
	}
	return p
}

// readStream parses text cut into the given pieces, as a streaming client assembles the
// deltas: names from each call's first delta, arguments concatenated by index.
func readStream(t *testing.T, reasoning string, tr *toolRequest, pieces []string) parsed {
	o := newChatOutput(reasoning, tr)
	var p parsed
	ids := map[int]string{}
	collect := func(ev toolparse.Events) {
		p.reasoning += string(ev.Reasoning)
		p.content += string(ev.Content)
		for _, c := range ev.Calls {
			if c.ID != "" {
				if c.Index != len(p.names) {
					t.Fatalf("call %d opened out of order", c.Index)
				}
				ids[c.Index] = c.ID
				p.names = append(p.names, c.Name)
				p.args = append(p.args, "")
			}
			if c.Index >= len(p.args) {
				t.Fatalf("arguments for call %d before its header", c.Index)
			}
			p.args[c.Index] += c.Args
		}
	}
	for _, s := range pieces {
		o.feed(s)
		collect(o.take())
	}
	o.finish()
	collect(o.take())
	for i, c := range o.calls() {
		if ids[i] != c.ID || !strings.HasPrefix(c.ID, "call_") {
			t.Fatalf("call %d: streamed id %q, message id %q", i, ids[i], c.ID)
		}
	}
	return p
}

func TestChatOutputSplits(t *testing.T) {
	hermes := &toolRequest{tools: []tool{{name: "get_weather"}, {name: "noop"}}, choice: "auto", syntax: ToolSyntaxHermes}
	llama := &toolRequest{tools: []tool{{name: "get_weather"}}, choice: "auto", syntax: ToolSyntaxLlama3JSON}
	none := &toolRequest{choice: "none"}
	call := func(name, args string) string {
		return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"
	}
	for _, c := range []struct {
		name      string
		reasoning string
		tr        *toolRequest
		text      string
		want      parsed
	}{
		{"plain", "", none, "hello <tool_call> world", parsed{content: "hello <tool_call> world"}},
		{"one call", "", hermes, call("get_weather", `{"city":"P\"}aris","days":[1,{"x":"}"}]}`),
			parsed{names: []string{"get_weather"}, args: []string{`{"city":"P\"}aris","days":[1,{"x":"}"}]}`}}},
		{"text then calls", "", hermes, "Let me look. <tool_" + "x " + call("noop", "{}") + "\n" + call("get_weather", `{"city":"Oslo"}`),
			parsed{content: "Let me look. <tool_x ", names: []string{"noop", "get_weather"}, args: []string{"{}", `{"city":"Oslo"}`}}},
		{"text ending in a partial opener", "", hermes, "see <tool_ca", parsed{content: "see <tool_ca"}},
		{"cut inside a call's head", "", hermes, "see <tool_call>\n{\"na", parsed{content: "see <tool_call>\n{\"na"}},
		{"cut inside arguments", "", hermes, call("noop", "{}") + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci",
			parsed{names: []string{"noop", "get_weather"}, args: []string{"{}", `{"ci`}}},
		{"llama call", "", llama, `{"name": "get_weather", "parameters": {"city":"Rome"}}`,
			parsed{names: []string{"get_weather"}, args: []string{`{"city":"Rome"}`}}},
		{"llama text", "", llama, `Sure {"name": "x"}`, parsed{content: `Sure {"name": "x"}`}},
		{"qwen3 thinking", ReasoningQwen3, none, "<think>\nhmm </thin k\n</think>\n\nThe answer.", parsed{reasoning: "\nhmm </thin k\n", content: "The answer."}},
		{"qwen3 no thinking", ReasoningQwen3, none, "The answer.", parsed{content: "The answer."}},
		{"qwen3 thinking then a call", ReasoningQwen3, hermes, "<think>\nuse a tool\n</think>\n\n" + call("noop", "{}"),
			parsed{reasoning: "\nuse a tool\n", names: []string{"noop"}, args: []string{"{}"}}},
		{"qwen3 unfinished thinking", ReasoningQwen3, none, "<think>\nstill going </thi", parsed{reasoning: "\nstill going </thi"}},
		{"r1", ReasoningDeepSeekR1, none, "first</think>\n\nthen", parsed{reasoning: "first", content: "then"}},
		{"r1 no end", ReasoningDeepSeekR1, none, "all reasoning", parsed{reasoning: "all reasoning"}},
	} {
		whole := readWhole(c.reasoning, c.tr, c.text)
		if whole.String() != c.want.String() {
			t.Errorf("%s: whole %v\nwant %v", c.name, whole, c.want)
			continue
		}
		// every split into two, and random splits into many
		for i := 0; i <= len(c.text); i++ {
			if got := readStream(t, c.reasoning, c.tr, []string{c.text[:i], c.text[i:]}); got.String() != whole.String() {
				t.Fatalf("%s split at %d: %v\nwant %v", c.name, i, got, whole)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(len(c.text)), 9))
		for r := 0; r < 50; r++ {
			var pieces []string
			for s := c.text; s != ""; {
				n := min(len(s), 1+rng.IntN(4))
				pieces, s = append(pieces, s[:n]), s[n:]
			}
			if got := readStream(t, c.reasoning, c.tr, pieces); got.String() != whole.String() {
				t.Fatalf("%s pieces %q: %v\nwant %v", c.name, pieces, got, whole)
			}
		}
	}
}

func TestToolGrammarShape(t *testing.T) {
	tools := []tool{{name: "a", params: json.RawMessage(`{"type":"object"}`)}, {name: "b", params: json.RawMessage(`{"type":"object"}`)}}
	for _, c := range []struct {
		tr   toolRequest
		want string
	}{
		{toolRequest{tools: tools, choice: "required", parallel: true, syntax: ToolSyntaxHermes}, `"min":1,"max":-1`},
		{toolRequest{tools: tools, choice: "required", parallel: false, syntax: ToolSyntaxHermes}, `"min":1,"max":1`},
		{toolRequest{tools: tools, choice: "b", parallel: true, syntax: ToolSyntaxHermes}, `"min":1,"max":1`},
		{toolRequest{tools: tools, choice: "auto", parallel: true, syntax: ToolSyntaxHermes}, `{"text":{"without":"\u003ctool_call\u003e"}}`},
		{toolRequest{tools: tools, choice: "auto", parallel: true, syntax: ToolSyntaxLlama3JSON}, `{"text":{"not_first":"{"}}`},
	} {
		b, _ := json.Marshal(c.tr.grammar())
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%+v: %s lacks %s", c.tr, b, c.want)
		}
		if c.tr.choice == "b" && strings.Contains(string(b), `\"a\"`) {
			t.Errorf("named b allows a: %s", b)
		}
	}
}

func TestDetectSyntaxAndReasoning(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{{ '<tool_call>' }}{% for t in tools %}{% endfor %}":                ToolSyntaxHermes,
		`{{- '{"name": "' + n + '", "parameters": ' }}{{ tools }}<|eot_id|>`: ToolSyntaxLlama3JSON,
		"{% for m in messages %}{{ m.content }}{% endfor %}":                 ToolSyntaxFallback,
		"{% if tools %}[TOOLS]{% endif %}":                                   ToolSyntaxHermes,
	} {
		if got := DetectToolSyntax(tmpl); got != want {
			t.Errorf("%s: %s, want %s", tmpl, got, want)
		}
	}
	for tmpl, want := range map[string]string{
		"<|im_start|>{{ '<think>\\n\\n</think>' }}":          ReasoningQwen3,
		"<｜Assistant｜><think>\\n{{ x }}</think>":             ReasoningDeepSeekR1,
		"<|im_start|>assistant":                              "",
		"{{ '<|im_start|>assistant\\n<think>\\n' }}</think>": ReasoningDeepSeekR1,
	} {
		if got := DetectReasoning(tmpl); got != want {
			t.Errorf("%s: %q, want %q", tmpl, got, want)
		}
	}
}

func TestCheckToolMessages(t *testing.T) {
	call := map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "f", "arguments": `{"b":1,"a":2}`}}
	ok := []map[string]any{{"role": "user", "content": "x"}, {"role": "assistant", "content": nil, "tool_calls": []any{call}},
		{"role": "tool", "tool_call_id": "c1", "content": "42"}}
	out, err := checkToolMessages(ok)
	if err != nil {
		t.Fatal(err)
	}
	fn := out[1]["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
	if raw, _ := fn["arguments"].(json.RawMessage); string(raw) != `{"b":1,"a":2}` {
		t.Errorf("arguments %v, want the decoded object in its order", fn["arguments"])
	}
	if call["function"].(map[string]any)["arguments"] != `{"b":1,"a":2}` {
		t.Error("the request's message was changed in place")
	}
	for name, msgs := range map[string][]map[string]any{
		"unknown id":   {{"role": "assistant", "tool_calls": []any{call}}, {"role": "tool", "tool_call_id": "c2", "content": "x"}},
		"no call":      {{"role": "tool", "tool_call_id": "c1", "content": "x"}},
		"no id":        {{"role": "assistant", "tool_calls": []any{call}}, {"role": "tool", "content": "x"}},
		"bad args":     {{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c", "function": map[string]any{"name": "f", "arguments": "{oops"}}}}},
		"no function":  {{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c"}}}},
		"calls object": {{"role": "assistant", "tool_calls": map[string]any{}}},
	} {
		if _, err := checkToolMessages(msgs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestQwen3ToolRendering renders conversations with tools, calls and results through Qwen3's
// own template and compares with Jinja2's rendering (testdata/chat/gen_tools.py).
func TestQwen3ToolRendering(t *testing.T) {
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	raw, err := os.ReadFile("../testdata/tokenizer-files/qwen3/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Compile(cfg.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	raw, err = os.ReadFile("../testdata/chat/qwen3-tools-expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name           string           `json:"name"`
		Messages       []map[string]any `json:"messages"`
		Tools          json.RawMessage  `json:"tools"`
		EnableThinking *bool            `json:"enable_thinking"`
		Prompt         string           `json:"prompt"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		msgs, err := checkToolMessages(c.Messages)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		opts := chat.Options{AddGenerationPrompt: true, ToolsJSON: c.Tools}
		if c.EnableThinking != nil {
			opts.Extra = map[string]any{"enable_thinking": *c.EnableThinking}
		}
		got, err := tmpl.Apply(msgs, opts)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if got != c.Prompt {
			t.Errorf("%s: rendered\n%s\nwant\n%s", c.Name, got, c.Prompt)
		}
	}
}

// FuzzChatOutput: any model output, cut anywhere, streams to what the non-streamed reader
// makes of it, for every syntax and reasoning parser, and never panics.
func FuzzChatOutput(f *testing.F) {
	f.Add("<think>\nx</think>\n\nhi <tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\":\"}\\\"\"}}\n</tool_call>", uint8(3), uint16(7))
	f.Add(`{"name": "a", "parameters": {"x":[1,{"y":"]"}]}}`, uint8(1), uint16(5))
	f.Add("</think><tool_call><tool_call>{\"name\":", uint8(4), uint16(2))
	f.Fuzz(func(t *testing.T, text string, mode uint8, cut uint16) {
		if len(text) > 1<<14 {
			return // streaming a byte at a time is quadratic in the test's own assembly
		}
		tr := &toolRequest{tools: []tool{{name: "a"}}, choice: "auto", syntax: ToolSyntaxHermes}
		if mode&1 == 1 {
			tr.syntax = ToolSyntaxLlama3JSON
		}
		reasoning := []string{"", ReasoningQwen3, ReasoningDeepSeekR1}[int(mode>>1)%3]
		whole := readWhole(reasoning, tr, text)
		step := 1 + int(cut)%7
		var pieces []string
		for s := text; s != ""; {
			n := min(len(s), step)
			pieces, s = append(pieces, s[:n]), s[n:]
		}
		if got := readStream(t, reasoning, tr, pieces); got.String() != whole.String() {
			t.Fatalf("pieces %q: %v\nwant %v", pieces, got, whole)
		}
	})
}

// TestFallbackMessages: for a template without tools, the tools are described in the system
// message (merged with the request's), calls become Hermes text and results user messages.
func TestFallbackMessages(t *testing.T) {
	tools := json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)
	tr := &toolRequest{tools: []tool{{name: "f"}}, choice: "auto", syntax: ToolSyntaxFallback}
	msgs, err := checkToolMessages([]map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "go"},
		{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c", "type": "function", "function": map[string]any{"name": "f", "arguments": `{"x":1}`}}}},
		{"role": "tool", "tool_call_id": "c", "content": []any{map[string]any{"type": "text", "text": "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := fallbackMessages(msgs, tools, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || out[0]["role"] != "system" || !strings.HasPrefix(out[0]["content"].(string), "Be brief.\n\n# Tools") ||
		!strings.Contains(out[0]["content"].(string), "<tools>\n"+`{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}`+"\n</tools>") {
		t.Fatalf("system message: %v", out[0])
	}
	if out[2]["content"] != "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\":1}}\n</tool_call>" {
		t.Errorf("assistant call rendered as %q", out[2]["content"])
	}
	if out[3]["role"] != "user" || out[3]["content"] != "<tool_response>\nok\n</tool_response>" {
		t.Errorf("tool result rendered as %v", out[3])
	}
}
