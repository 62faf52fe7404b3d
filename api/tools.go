package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/tokenizer/chat"
)

// Tool-call syntaxes (--tool-call-parser). Each is how a family of chat templates writes a call,
// and so what the model was trained to emit; the grammar constrains calls to it and the parser
// reads them back.
const (
	// ToolSyntaxHermes is Qwen2.5/Qwen3/Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
	// calls separated by "\n".
	ToolSyntaxHermes = "hermes"
	// ToolSyntaxLlama3JSON is Llama 3.1/3.2/3.3 custom tools: {"name": ..., "parameters": {...}},
	// one call per turn (their templates refuse more).
	ToolSyntaxLlama3JSON = "llama3_json"
	// ToolSyntaxFallback is for templates that know no tools (pico's): the engine describes the
	// tools in a system message of its own and uses the Hermes syntax; assistant tool calls and
	// tool results are rendered as text messages. See README "Tool calling".
	ToolSyntaxFallback = "fallback"
	// ToolSyntaxMistral is Mistral's [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...].
	ToolSyntaxMistral = "mistral"
	// ToolSyntaxDeepSeekV3 is DeepSeek-V3/R1's <｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜> tokens.
	ToolSyntaxDeepSeekV3 = "deepseek_v3"
	// ToolSyntaxQwen3Coder is Qwen3-Coder's XML: <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>...
	// Read back only (tool_choice auto): the grammar cannot constrain bare parameter values.
	ToolSyntaxQwen3Coder = "qwen3_coder"
	// ToolSyntaxHarmony is gpt-oss's harmony channels (analysis: reasoning; commentary
	// to=functions.f: a call). Read back only (tool_choice auto).
	ToolSyntaxHarmony = "harmony"
)

// DetectToolSyntax picks the tool-call syntax a chat template uses: Hermes when it writes
// <tool_call>, Llama-3 JSON when it asks for {"name": ..., "parameters": ...}, the fallback when
// it never reads `tools`, and Hermes otherwise.
func DetectToolSyntax(template string) string {
	switch {
	case strings.Contains(template, "<function=") && strings.Contains(template, "<parameter="):
		return ToolSyntaxQwen3Coder
	case strings.Contains(template, "<tool_call>"):
		return ToolSyntaxHermes
	case strings.Contains(template, "[TOOL_CALLS]"):
		return ToolSyntaxMistral
	case strings.Contains(template, "<｜tool▁calls▁begin｜>"):
		return ToolSyntaxDeepSeekV3
	case strings.Contains(template, "<|channel|>") && strings.Contains(template, "to=functions."):
		return ToolSyntaxHarmony
	case strings.Contains(template, `"parameters": `) && strings.Contains(template, "<|eot_id|>"):
		return ToolSyntaxLlama3JSON
	case !readsTools.MatchString(template):
		return ToolSyntaxFallback
	}
	return ToolSyntaxHermes
}

// readsTools finds a template's use of the tools variable.
var readsTools = regexp.MustCompile(`\btools\b`)

// toolSyntax is what one syntax looks like around a call, for the grammar that constrains it
// (the toolparse parser of the same name reads it back).
type toolSyntax struct {
	region, regionEnd string // around all the calls of a turn ("" : none)
	open              string // opens each call ("" for llama3_json: a call is the whole output)
	head              string // after open, up to the function name
	mid               string // between the name and the arguments value
	close             string // text after the arguments value
	sep               string // between two calls
	single            bool   // at most one call per turn
}

// trigger is the text that starts the calls of an auto turn.
func (s toolSyntax) trigger() string {
	if s.region != "" {
		return s.region
	}
	return s.open
}

// syntaxOf is the grammar shape of a syntax; ok is false for syntaxes the grammar cannot
// constrain (qwen3_coder writes bare parameter values, harmony needs its special tokens):
// those are read back from unconstrained output only (tool_choice auto).
func syntaxOf(name string) (toolSyntax, bool) {
	const jsonHead, jsonMid = `{"name": "`, `", "arguments": `
	switch name {
	case ToolSyntaxLlama3JSON:
		return toolSyntax{head: jsonHead, mid: `", "parameters": `, close: "}", single: true}, true
	case ToolSyntaxMistral:
		return toolSyntax{region: "[TOOL_CALLS][", regionEnd: "]", head: jsonHead, mid: jsonMid, close: "}", sep: ", "}, true
	case ToolSyntaxDeepSeekV3:
		return toolSyntax{region: "<｜tool▁calls▁begin｜>", regionEnd: "<｜tool▁calls▁end｜>", open: "<｜tool▁call▁begin｜>",
			head: "function<｜tool▁sep｜>", mid: "\n```json\n", close: "\n```<｜tool▁call▁end｜>", sep: "\n"}, true
	case ToolSyntaxQwen3Coder, ToolSyntaxHarmony:
		return toolSyntax{}, false
	}
	return toolSyntax{open: "<tool_call>", head: "\n" + jsonHead, mid: jsonMid, close: "}\n</tool_call>", sep: "\n"}, true
}

// tool is one function the request offers.
type tool struct {
	name   string
	params json.RawMessage // the parameters schema the grammar compiles (type object)
	// strict is set when the function asks for "strict": true, which closes the arguments'
	// objects even on a permissive server (--grammar-strict=false); "strict": false keeps the
	// server's setting, so a client's default cannot reopen arguments the server closes
	strict *bool
}

// toolRequest is a chat request's validated tool settings.
type toolRequest struct {
	tools    []tool
	choice   string // none, auto, required, or the name of the forced function
	parallel bool
	syntax   string
	// compileBy is the deadline of all the request's grammar compiles (requestCompileBudget
	// from when its tools were read): each tool's parameters, then the composed constraint
	compileBy time.Time
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// parseTools validates tools, tool_choice and parallel_tool_calls.
func (s *Server) parseTools(raw json.RawMessage, choiceRaw json.RawMessage, parallel *bool) (*toolRequest, error) {
	tr := &toolRequest{parallel: parallel == nil || *parallel, syntax: s.toolSyntax(), compileBy: time.Now().Add(requestCompileBudget)}
	if len(raw) > 0 && string(raw) != "null" {
		var list []struct {
			Type     string `json:"type"`
			Function *struct {
				Name        string          `json:"name"`
				Description *string         `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      *bool           `json:"strict"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badRequest("tools", "must be an array of {type: function, function: {name, description, parameters}}: "+err.Error())
		}
		seen := map[string]bool{}
		for i, t := range list {
			param := fmt.Sprintf("tools[%d]", i)
			if t.Type != "function" {
				return nil, badRequest(param+".type", fmt.Sprintf("unsupported tool type %q (only function)", t.Type))
			}
			if t.Function == nil {
				return nil, badRequest(param+".function", "is required")
			}
			name := t.Function.Name
			if !toolNameRE.MatchString(name) {
				return nil, badRequest(param+".function.name", fmt.Sprintf("%q: must be 1 to 64 of a-z, A-Z, 0-9, _, - and .", name))
			}
			if seen[name] {
				return nil, badRequest(param+".function.name", fmt.Sprintf("function %q is defined twice", name))
			}
			seen[name] = true
			params, err := objectSchema(t.Function.Parameters)
			if err != nil {
				return nil, badRequest(param+".function.parameters", fmt.Sprintf("function %q: %v", name, err))
			}
			tl := tool{name: name, params: params}
			if st := t.Function.Strict; st != nil && *st {
				tl.strict = st
			}
			kind, spec, err := tl.checkSpec(s.cfg.GrammarStrict)
			if err == nil {
				err = s.checkGrammarBy(tr.compileBy, kind, spec)
			}
			if errors.Is(err, ErrOverloaded) { // no compile slot in time: the engine's state, a 503
				return nil, err
			}
			if err != nil {
				return nil, refuseGrammar(param+".function.parameters", fmt.Sprintf("function %q: unsupported parameters schema: %v", name, err))
			}
			tr.tools = append(tr.tools, tl)
		}
	}
	tr.choice = "none"
	if len(tr.tools) > 0 {
		tr.choice = "auto"
	}
	if len(choiceRaw) > 0 && string(choiceRaw) != "null" {
		var mode string
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(choiceRaw, &mode) == nil:
			switch mode {
			case "none", "auto", "required":
			default:
				return nil, badRequest("tool_choice", fmt.Sprintf("unknown mode %q (none, auto, required, or {type: function, function: {name}})", mode))
			}
			tr.choice = mode
		case json.Unmarshal(choiceRaw, &named) == nil && named.Type == "function" && named.Function.Name != "":
			if !hasTool(tr.tools, named.Function.Name) {
				return nil, badRequest("tool_choice", fmt.Sprintf("function %q is not among the request's tools", named.Function.Name))
			}
			tr.choice = named.Function.Name
		default:
			return nil, badRequest("tool_choice", "must be none, auto, required, or {type: function, function: {name}}")
		}
		if tr.choice != "none" && len(tr.tools) == 0 {
			return nil, badRequest("tool_choice", fmt.Sprintf("%s needs tools", string(choiceRaw)))
		}
	}
	return tr, nil
}

func hasTool(tools []tool, name string) bool {
	for _, t := range tools {
		if t.name == name {
			return true
		}
	}
	return false
}

// objectSchema returns a function's parameters schema, which must describe an object: absent is
// an object with no parameters, and a schema that names no type gets "type": "object".
func objectSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("must be a JSON Schema object: %v", err)
	}
	if t, ok := m["type"]; ok {
		if string(t) != `"object"` {
			return nil, fmt.Errorf(`must describe an object ("type": "object"), got type %s`, t)
		}
		return raw, nil
	}
	m["type"] = json.RawMessage(`"object"`)
	return json.Marshal(m)
}

// active reports whether the model's output is read for tool calls.
func (tr *toolRequest) active() bool { return tr != nil && tr.choice != "none" && len(tr.tools) > 0 }

// grammar is the composition that constrains the output: the calls alone for required or a named
// function, free text then optional calls for auto.
func (tr *toolRequest) grammar() grammar.Part {
	syn, _ := syntaxOf(tr.syntax)
	call := func(t tool) grammar.Part {
		parts := []grammar.Part{}
		if syn.open != "" {
			parts = append(parts, grammar.Literal(syn.open))
		}
		parts = append(parts, grammar.Literal(syn.head+t.name+syn.mid), grammar.Part{Schema: t.params, Strict: t.strict}, grammar.Literal(syn.close))
		return grammar.Sequence(parts...)
	}
	var one grammar.Part
	switch tr.choice {
	case "auto", "required":
		alts := make([]grammar.Part, len(tr.tools))
		for i, t := range tr.tools {
			alts[i] = call(t)
		}
		one = grammar.Alternatives(alts...)
	default:
		for _, t := range tr.tools {
			if t.name == tr.choice {
				one = call(t)
			}
		}
	}
	most := -1
	if !tr.parallel || syn.single || (tr.choice != "auto" && tr.choice != "required") {
		most = 1
	}
	var sep *grammar.Part
	if syn.sep != "" {
		p := grammar.Literal(syn.sep)
		sep = &p
	}
	calls := grammar.Part{Repeat: &grammar.Repeat{Part: one, Sep: sep, Min: 1, Max: most}}
	if syn.region != "" {
		calls = grammar.Sequence(grammar.Literal(syn.region), calls, grammar.Literal(syn.regionEnd))
	}
	if tr.choice != "auto" {
		return calls
	}
	if syn.trigger() == "" {
		// llama3_json: either a call or text that does not start like one
		return grammar.Alternatives(calls, grammar.Part{Text: &grammar.FreeText{NotFirst: "{"}})
	}
	return grammar.Sequence(grammar.TextUntil(syn.trigger()), grammar.Part{Repeat: &grammar.Repeat{Part: calls, Min: 0, Max: 1}})
}

// checkToolMessages checks the conversation's tool calls and results: every tool message answers
// a call an earlier assistant message made (by tool_call_id), and every call names a function
// and carries its arguments as a JSON object (or a string holding one). It returns the messages
// ready for the template: arguments given as strings are decoded (key order kept) so templates
// that write them with tojson print JSON, and the null content of a message with calls is "",
// as vLLM and SGLang pass them.
func checkToolMessages(msgs []map[string]any) ([]map[string]any, error) {
	calls := map[string]bool{}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = m
		role, _ := m["role"].(string)
		switch role {
		case "assistant":
			raw, ok := m["tool_calls"]
			if !ok || raw == nil {
				continue
			}
			list, ok := raw.([]any)
			if !ok {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "must be an array")
			}
			fixed := make([]any, len(list))
			for k, c := range list {
				param := fmt.Sprintf("messages[%d].tool_calls[%d]", i, k)
				call, ok := c.(map[string]any)
				if !ok {
					return nil, badRequest(param, "must be an object")
				}
				fn, ok := call["function"].(map[string]any)
				if !ok {
					return nil, badRequest(param+".function", "is required")
				}
				if name, _ := fn["name"].(string); name == "" {
					return nil, badRequest(param+".function.name", "is required")
				}
				if id, ok := call["id"].(string); ok && id != "" {
					calls[id] = true
				}
				nc := make(map[string]any, len(call))
				for k, v := range call {
					nc[k] = v
				}
				nf := make(map[string]any, len(fn))
				for k, v := range fn {
					nf[k] = v
				}
				switch a := fn["arguments"].(type) {
				case string:
					if !json.Valid([]byte(a)) || !strings.HasPrefix(strings.TrimSpace(a), "{") {
						return nil, badRequest(param+".function.arguments", "must be a JSON object (as a string)")
					}
					nf["arguments"] = json.RawMessage(a)
				case map[string]any:
				case nil:
					nf["arguments"] = json.RawMessage(`{}`)
				default:
					return nil, badRequest(param+".function.arguments", "must be a JSON object or a string holding one")
				}
				nc["function"] = nf
				fixed[k] = nc
			}
			nm := make(map[string]any, len(m))
			for k, v := range m {
				nm[k] = v
			}
			nm["tool_calls"] = fixed
			if nm["content"] == nil {
				// as vLLM passes it: templates test `'</think>' in message.content`
				nm["content"] = ""
			}
			out[i] = nm
		case "tool":
			id, _ := m["tool_call_id"].(string)
			if id == "" {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "is required for a tool message")
			}
			if !calls[id] {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), fmt.Sprintf("%q answers no tool call of an earlier assistant message", id))
			}
		}
	}
	return out, nil
}

// fallbackMessages rewrites a conversation with tools for a template that knows none: a system
// message describing the tools and the call syntax (merged into the first system message), the
// assistant's calls as text in that syntax, and tool results as user messages.
func fallbackMessages(msgs []map[string]any, toolsJSON json.RawMessage, tr *toolRequest) ([]map[string]any, error) {
	var sb strings.Builder
	if tr != nil && len(tr.tools) > 0 {
		sb.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n")
		sb.WriteString("You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
		var list []json.RawMessage
		_ = json.Unmarshal(toolsJSON, &list)
		for _, t := range list {
			var c bytes.Buffer
			_ = json.Compact(&c, t)
			sb.WriteString("\n")
			sb.Write(c.Bytes())
		}
		sb.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n")
		sb.WriteString("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	}
	out := make([]map[string]any, 0, len(msgs)+1)
	if sb.Len() > 0 {
		sys := map[string]any{"role": "system", "content": sb.String()}
		if len(msgs) > 0 && msgs[0]["role"] == "system" {
			if c, ok := msgs[0]["content"].(string); ok {
				sys["content"] = c + "\n\n" + sb.String()
				msgs = msgs[1:]
			}
		}
		out = append(out, sys)
	}
	for _, m := range msgs {
		switch m["role"] {
		case "assistant":
			list, _ := m["tool_calls"].([]any)
			if len(list) == 0 {
				out = append(out, m)
				continue
			}
			text := textOf(m["content"])
			for _, c := range list {
				fn, _ := c.(map[string]any)["function"].(map[string]any)
				args, err := json.Marshal(fn["arguments"])
				if err != nil {
					return nil, fmt.Errorf("tool call arguments: %w", err)
				}
				if text != "" {
					text += "\n"
				}
				text += "<tool_call>\n{\"name\": \"" + fmt.Sprint(fn["name"]) + "\", \"arguments\": " + string(args) + "}\n</tool_call>"
			}
			out = append(out, map[string]any{"role": "assistant", "content": text})
		case "tool":
			out = append(out, map[string]any{"role": "user", "content": "<tool_response>\n" + textOf(m["content"]) + "\n</tool_response>"})
		default:
			out = append(out, m)
		}
	}
	return out, nil
}

// textOf is a message's content as text: a string, or its text parts joined with "\n".
func textOf(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			if m, ok := p.(map[string]any); ok && m["type"] == "text" {
				if s, ok := m["text"].(string); ok {
					parts = append(parts, s)
				}
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// renderChat renders a chat request's prompt through the model's template: tools passed as the
// request wrote them (key order kept), or described by the fallback when the template has none.
func (s *Server) renderChat(msgs []map[string]any, toolsJSON json.RawMessage, tr *toolRequest, kwargs map[string]any) (string, error) {
	msgs, err := checkToolMessages(msgs)
	if err != nil {
		return "", err
	}
	opts := chat.Options{AddGenerationPrompt: true, Extra: kwargs, Special: s.engine.Tokenizer().SpecialTokenStrings()}
	hasTools := len(toolsJSON) > 0 && string(toolsJSON) != "null"
	if tr != nil && tr.syntax == ToolSyntaxFallback {
		if msgs, err = fallbackMessages(msgs, toolsJSON, tr); err != nil {
			return "", badRequest("messages", err.Error())
		}
	} else if hasTools {
		opts.ToolsJSON = toolsJSON
	}
	prompt, err := s.tmpl.Apply(msgs, opts)
	if err != nil {
		return "", badRequest("messages", "chat template: "+err.Error())
	}
	return prompt, nil
}

// renderMessages renders messages (and tools) as a chat request with them would be: what
// /tokenize shows for messages.
func (s *Server) renderMessages(msgs []map[string]any, toolsJSON json.RawMessage, kwargs map[string]any) (string, error) {
	tr, err := s.parseTools(toolsJSON, nil, nil)
	if err != nil {
		return "", err
	}
	return s.renderChat(msgs, toolsJSON, tr, kwargs)
}

// toolSyntax is the server's tool-call syntax: the flag's, or the template's own.
func (s *Server) toolSyntax() string {
	if p := s.cfg.ToolCallParser; p != "" && p != "auto" {
		return p
	}
	if tok := s.engine.Tokenizer(); tok != nil {
		return DetectToolSyntax(tok.ChatTemplate())
	}
	return ToolSyntaxFallback
}
