package api

// /v1/messages, Anthropic's Messages API, and /v1/messages/count_tokens. The body becomes a chat
// request (system, content blocks, tool_use / tool_result, tools, tool_choice, thinking) and
// runs through the chat path: the template, the composed grammar that makes every call valid,
// and the chat output reader, whose reasoning, content and calls become thinking, text and
// tool_use blocks. Errors keep Anthropic's shape ({"type":"error","error":{type, message}}).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmserve/llmserve/toolparse"
)

// messagesRequest is a /v1/messages (or count_tokens) body.
type messagesRequest struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	System        json.RawMessage   `json:"system"`
	MaxTokens     *int              `json:"max_tokens"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Tools         json.RawMessage   `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	Thinking      json.RawMessage   `json:"thinking"`
	// Extensions, as on chat: a seed, the stream interval, template variables, a bound on the
	// thinking block in characters (enforced by grammar, unlike budget_tokens).
	MaxReasoningChars  *int           `json:"max_reasoning_chars"`
	Seed               *int64         `json:"seed"`
	StreamInterval     *int           `json:"stream_interval"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	// Accepted and ignored (named in the response): they change nothing generated.
	Metadata     json.RawMessage `json:"metadata"`
	ServiceTier  json.RawMessage `json:"service_tier"`
	Container    json.RawMessage `json:"container"`
	MCPServers   json.RawMessage `json:"mcp_servers"`
	budgetTokens bool            // thinking.budget_tokens was given (not enforced)
}

func (b *messagesRequest) ignoredNames() []string {
	var out []string
	if len(b.Metadata) > 0 && string(b.Metadata) != "null" {
		out = append(out, "metadata")
	}
	if len(b.ServiceTier) > 0 && string(b.ServiceTier) != "null" {
		out = append(out, "service_tier")
	}
	if b.budgetTokens {
		out = append(out, "thinking.budget_tokens") // the block ends when the model ends it
	}
	return out
}

// anthropicBlock is one content block of a message (the union of the kinds read).
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	Thinking  *string         `json:"thinking"`
	Signature *string         `json:"signature"`
	Data      *string         `json:"data"`
	Citations json.RawMessage `json:"citations"`
	Cache     json.RawMessage `json:"cache_control"`
}

// anthropicText reads a string or an array of text blocks (system, tool_result content).
func anthropicText(raw json.RawMessage, param string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", badRequest(param, "must be a string or an array of text blocks")
	}
	var b strings.Builder
	for i, bl := range blocks {
		if bl.Type != "text" || bl.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, i), fmt.Sprintf("blocks of type %q are not supported here (text only)", bl.Type))
		}
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(*bl.Text)
	}
	return b.String(), nil
}

// messagesChat turns system and messages into chat messages: text blocks are the content,
// tool_use blocks an assistant message's tool_calls, tool_result blocks tool messages, thinking
// blocks the assistant message's reasoning_content.
func messagesChat(body *messagesRequest) ([]map[string]any, error) {
	var msgs []map[string]any
	sys, err := anthropicText(body.System, "system")
	if err != nil {
		return nil, err
	}
	if sys != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": sys})
	}
	if len(body.Messages) == 0 {
		return nil, badRequest("messages", "at least one message is required")
	}
	for i, raw := range body.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, badRequest(param, "must be {role, content}")
		}
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(param+".role", fmt.Sprintf("%q: want user or assistant (the system prompt is the top-level system field)", m.Role))
		}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			msgs = append(msgs, map[string]any{"role": m.Role, "content": text})
			continue
		}
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, badRequest(param+".content", "must be a string or an array of content blocks")
		}
		var b strings.Builder
		var calls []any
		reasoning := ""
		for j, bl := range blocks {
			bp := fmt.Sprintf("%s.content[%d]", param, j)
			switch {
			case bl.Type == "text" && bl.Text != nil:
				b.WriteString(*bl.Text)
			case bl.Type == "thinking" && m.Role == "assistant" && bl.Thinking != nil:
				reasoning += *bl.Thinking
			case bl.Type == "redacted_thinking" && m.Role == "assistant":
				// encrypted by another server: nothing this model can read
			case bl.Type == "tool_use" && m.Role == "assistant":
				if bl.ID == "" || bl.Name == "" {
					return nil, badRequest(bp, "tool_use needs id and name")
				}
				input := bytes.TrimSpace(bl.Input)
				if len(input) == 0 || input[0] != '{' {
					return nil, badRequest(bp+".input", "must be an object")
				}
				calls = append(calls, map[string]any{"id": bl.ID, "type": "function",
					"function": map[string]any{"name": bl.Name, "arguments": string(input)}})
			case bl.Type == "tool_result" && m.Role == "user":
				if bl.ToolUseID == "" {
					return nil, badRequest(bp+".tool_use_id", "is required")
				}
				out, err := anthropicText(bl.Content, bp+".content")
				if err != nil {
					return nil, err
				}
				if bl.IsError != nil && *bl.IsError {
					out = "Error: " + out
				}
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": bl.ToolUseID, "content": out})
			default:
				return nil, badRequest(bp+".type", fmt.Sprintf("%s blocks of type %q are not supported (text, tool_use, tool_result, thinking)", m.Role, bl.Type))
			}
		}
		if b.Len() == 0 && len(calls) == 0 && reasoning == "" {
			continue // only tool results
		}
		msg := map[string]any{"role": m.Role, "content": b.String()}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		if reasoning != "" {
			msg["reasoning_content"] = reasoning
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// messagesTools turns Anthropic tools ({name, description, input_schema}) into chat tools.
func messagesTools(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Cache       json.RawMessage `json:"cache_control"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("tools", "must be an array of {name, description, input_schema}")
	}
	out := make([]map[string]any, len(list))
	for i, t := range list {
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("server tools (%q) are not supported: only custom tools", t.Type))
		}
		if len(t.InputSchema) == 0 {
			return nil, badRequest(fmt.Sprintf("tools[%d].input_schema", i), "is required")
		}
		fn := map[string]any{"name": t.Name, "parameters": t.InputSchema}
		if t.Description != nil {
			fn["description"] = *t.Description
		}
		out[i] = map[string]any{"type": "function", "function": fn}
	}
	return json.Marshal(out)
}

// messagesToolChoice turns tool_choice ({type: auto|any|tool|none, name,
// disable_parallel_tool_use}) into the chat tool_choice and parallel_tool_calls.
func messagesToolChoice(raw json.RawMessage) (json.RawMessage, *bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var c struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, badRequest("tool_choice", "must be {type: auto|any|tool|none}")
	}
	var parallel *bool
	if c.DisableParallelToolUse != nil {
		p := !*c.DisableParallelToolUse
		parallel = &p
	}
	switch c.Type {
	case "auto", "none":
		return json.RawMessage(strconv.Quote(c.Type)), parallel, nil
	case "any":
		return json.RawMessage(`"required"`), parallel, nil
	case "tool":
		if c.Name == "" {
			return nil, nil, badRequest("tool_choice.name", "is required with type tool")
		}
		named, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{"name": c.Name}})
		return named, parallel, nil
	}
	return nil, nil, badRequest("tool_choice.type", fmt.Sprintf("%q: want auto, any, tool or none", c.Type))
}

// messagesChatRequest builds the chat request a messages body stands for.
func (s *Server) messagesChatRequest(body *messagesRequest, countOnly bool) (*chatRequest, error) {
	if !countOnly && body.MaxTokens == nil {
		return nil, badRequest("max_tokens", "is required")
	}
	if body.MaxTokens != nil && *body.MaxTokens < 1 {
		return nil, badRequest("max_tokens", fmt.Sprintf("must be at least 1, got %d", *body.MaxTokens))
	}
	if len(body.Container) > 0 && string(body.Container) != "null" {
		return nil, badRequest("container", "code execution containers are not supported")
	}
	if len(body.MCPServers) > 0 && string(body.MCPServers) != "null" {
		return nil, badRequest("mcp_servers", "MCP servers are not supported")
	}
	msgs, err := messagesChat(body)
	if err != nil {
		return nil, err
	}
	tools, err := messagesTools(body.Tools)
	if err != nil {
		return nil, err
	}
	choice, parallel, err := messagesToolChoice(body.ToolChoice)
	if err != nil {
		return nil, err
	}
	kwargs := map[string]any{}
	for k, v := range body.ChatTemplateKwargs {
		kwargs[k] = v
	}
	thinking := false
	if len(body.Thinking) > 0 && string(body.Thinking) != "null" {
		var th struct {
			Type         string `json:"type"`
			BudgetTokens *int   `json:"budget_tokens"`
		}
		if err := json.Unmarshal(body.Thinking, &th); err != nil {
			return nil, badRequest("thinking", "must be {type: enabled, budget_tokens} or {type: disabled}")
		}
		switch th.Type {
		case "enabled":
			if s.reasoningParser() == "" {
				return nil, badRequest("thinking", "the server reads no reasoning block (--reasoning-parser)")
			}
			if th.BudgetTokens != nil {
				if *th.BudgetTokens < 1 || (body.MaxTokens != nil && *th.BudgetTokens >= *body.MaxTokens) {
					return nil, badRequest("thinking.budget_tokens", fmt.Sprintf("must be at least 1 and less than max_tokens, got %d", *th.BudgetTokens))
				}
				body.budgetTokens = true
			}
			thinking = true
		case "disabled":
		default:
			return nil, badRequest("thinking.type", fmt.Sprintf("%q: want enabled or disabled", th.Type))
		}
	}
	if _, set := kwargs["enable_thinking"]; !set && s.reasoningParser() != "" {
		kwargs["enable_thinking"] = thinking // Anthropic's default: no thinking unless enabled
	}
	cb := &chatRequest{Model: body.Model, Messages: msgs, MaxTokens: body.MaxTokens, Stream: body.Stream,
		Tools: tools, ToolChoice: choice, ParallelToolCalls: parallel, ChatTemplateKwargs: kwargs, MaxReasoningChars: body.MaxReasoningChars}
	if countOnly {
		one := 1
		cb.MaxTokens, cb.Stream = &one, false
	}
	cb.Temperature, cb.TopP, cb.TopK, cb.Seed, cb.StreamInterval = body.Temperature, body.TopP, body.TopK, body.Seed, body.StreamInterval
	if len(body.StopSequences) > 0 {
		cb.Stop, _ = json.Marshal(body.StopSequences)
	}
	return cb, nil
}

// buildMessages validates a /v1/messages body into its request and response format.
func (s *Server) buildMessages(body *messagesRequest, start time.Time) (*Request, outputFormat, error) {
	cb, err := s.messagesChatRequest(body, false)
	if err != nil {
		return nil, nil, err
	}
	req, cf, err := s.buildChat(cb, start)
	if err != nil {
		return nil, nil, messagesParam(err)
	}
	f := &messagesFormat{s: s, id: "msg_" + req.RID, promptTokens: len(req.InputIDs)}
	if of, ok := cf.(*openAIFormat); ok && of.out != nil {
		f.out = of.out
	}
	return req, f, nil
}

// messagesParam renames the chat fields an error names to this API's.
func messagesParam(err error) error {
	var bre *BadRequestError
	if errors.As(err, &bre) {
		switch bre.Param {
		case "stop":
			bre.Param = "stop_sequences"
		case "parallel_tool_calls":
			bre.Param = "tool_choice.disable_parallel_tool_use"
		}
		if strings.HasPrefix(bre.Param, "tools[") {
			bre.Param = strings.Replace(strings.Replace(bre.Param, ".function.parameters", ".input_schema", 1), ".function.", ".", 1)
		}
	}
	return err
}

// handleCountTokens answers /v1/messages/count_tokens: the prompt's length as /v1/messages
// would render and tokenize it.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	var body messagesRequest
	if err := s.decodeBody(w, r, &body); err != nil {
		s.fail(w, err)
		return
	}
	cb, err := s.messagesChatRequest(&body, true)
	if err != nil {
		s.fail(w, err)
		return
	}
	req, _, err := s.buildChat(cb, time.Now())
	if err != nil {
		s.fail(w, messagesParam(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"input_tokens":%d}`, len(req.InputIDs))
}

// messagesFormat writes message objects and the typed stream events.
type messagesFormat struct {
	s            *Server
	id           string
	promptTokens int
	// out splits the text into reasoning, content and tool calls; nil with neither tools nor a
	// reasoning parser
	out *chatOutput
	// streaming: the index of the next block, and the kind of the open one ("" none)
	next int
	open string
}

func (f *messagesFormat) usage(dst []byte, d *Delta) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.PromptTokens-d.CachedTokens), 10)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.CachedTokens), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.CompletionTokens), 10)
	return append(dst, '}')
}

// stopReason is the message's stop_reason and stop_sequence.
func (f *messagesFormat) stopReason(d *Delta) (string, string) {
	switch {
	case d.FinishReason == FinishLength:
		return "max_tokens", "null"
	case f.out != nil && f.out.hasCalls():
		return "tool_use", "null"
	}
	if m, ok := d.MatchedStop.(string); ok {
		return "stop_sequence", string(appendJSONString(nil, m))
	}
	return "end_turn", "null"
}

// toolUseID is a call's id in Anthropic's style.
func toolUseID(id string) string { return "toolu_" + strings.TrimPrefix(id, "call_") }

// callInput is a call's arguments as the input object (a call cut by max_tokens has none).
func callInput(args []byte) []byte {
	if len(bytes.TrimSpace(args)) == 0 || !json.Valid(args) {
		return []byte("{}")
	}
	return args
}

func (f *messagesFormat) head(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, f.id)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	return appendJSONString(dst, f.s.cfg.ServedModelName)
}

// whole appends the message object for the merged output d.
func (f *messagesFormat) whole(dst []byte, d *Delta) []byte {
	dst = append(f.head(dst), `,"content":[`...)
	n := 0
	block := func() {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
	}
	text := func(t []byte) {
		if len(t) == 0 {
			return
		}
		block()
		dst = append(dst, `{"type":"text","text":`...)
		dst = appendJSONString(dst, string(t))
		dst = append(dst, '}')
	}
	if f.out == nil {
		text([]byte(d.Text))
	} else {
		f.out.feed(d.Text)
		f.out.finish()
		all := f.out.all()
		if len(all.Reasoning) > 0 {
			block()
			dst = append(dst, `{"type":"thinking","thinking":`...)
			dst = appendJSONString(dst, string(all.Reasoning))
			dst = append(dst, `,"signature":""}`...)
		}
		text(all.Content[:len(all.Content)-all.After])
		for _, c := range f.out.calls() {
			block()
			dst = append(dst, `{"type":"tool_use","id":`...)
			dst = appendJSONString(dst, toolUseID(c.ID))
			dst = append(dst, `,"name":`...)
			dst = appendJSONString(dst, c.Name)
			dst = append(dst, `,"input":`...)
			dst = append(dst, callInput(c.Args)...)
			dst = append(dst, '}')
		}
		text(all.Content[len(all.Content)-all.After:])
	}
	reason, seq := f.stopReason(d)
	dst = append(dst, `],"stop_reason":"`...)
	dst = append(dst, reason...)
	dst = append(dst, `","stop_sequence":`...)
	dst = append(dst, seq...)
	dst = append(dst, `,"usage":`...)
	return append(f.usage(dst, d), '}')
}

// event appends one typed SSE event; body writes the fields after "type".
func (f *messagesFormat) event(dst []byte, typ string, body func(dst []byte) []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, '"')
	if body != nil {
		dst = append(dst, ',')
		dst = body(dst)
	}
	return append(dst, "}\n\n"...)
}

// closeBlock ends the open block.
func (f *messagesFormat) closeBlock(dst []byte) []byte {
	if f.open == "" {
		return dst
	}
	f.open = ""
	idx := f.next - 1
	return f.event(dst, "content_block_stop", func(dst []byte) []byte {
		return strconv.AppendInt(append(dst, `"index":`...), int64(idx), 10)
	})
}

// openBlock starts a block; start is its content_block object.
func (f *messagesFormat) openBlock(dst []byte, kind string, start []byte) []byte {
	dst = f.closeBlock(dst)
	f.open = kind
	idx := f.next
	f.next++
	return f.event(dst, "content_block_start", func(dst []byte) []byte {
		dst = strconv.AppendInt(append(dst, `"index":`...), int64(idx), 10)
		return append(append(dst, `,"content_block":`...), start...)
	})
}

// delta appends a content_block_delta of the open block.
func (f *messagesFormat) delta(dst []byte, typ, field, text string) []byte {
	idx := f.next - 1
	return f.event(dst, "content_block_delta", func(dst []byte) []byte {
		dst = strconv.AppendInt(append(dst, `"index":`...), int64(idx), 10)
		dst = append(dst, `,"delta":{"type":"`...)
		dst = append(dst, typ...)
		dst = append(dst, `","`...)
		dst = append(dst, field...)
		dst = append(dst, `":`...)
		dst = appendJSONString(dst, text)
		return append(dst, '}')
	})
}

// text appends text to a block of kind (thinking or text), opening one when another is open.
func (f *messagesFormat) text(dst []byte, kind string, t []byte) []byte {
	if len(t) == 0 {
		return dst
	}
	if f.open != kind {
		if kind == "thinking" {
			dst = f.openBlock(dst, kind, []byte(`{"type":"thinking","thinking":"","signature":""}`))
		} else {
			dst = f.openBlock(dst, kind, []byte(`{"type":"text","text":""}`))
		}
	}
	if kind == "thinking" {
		return f.delta(dst, "thinking_delta", "thinking", string(t))
	}
	return f.delta(dst, "text_delta", "text", string(t))
}

func (f *messagesFormat) chunk(dst []byte, d *Delta, first bool) []byte {
	if first {
		dst = f.event(dst, "message_start", func(dst []byte) []byte {
			dst = append(f.head(append(dst, `"message":`...)), `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
			dst = strconv.AppendInt(dst, int64(f.promptTokens), 10)
			return append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`...)
		})
	}
	var ev toolparse.Events
	if f.out == nil {
		ev.Content = []byte(d.Text)
	} else {
		f.out.feed(d.Text)
		if d.Finished && d.Err == nil {
			f.out.finish()
		}
		ev = f.out.take()
	}
	dst = f.text(dst, "thinking", ev.Reasoning)
	before := len(ev.Content) - ev.After
	dst = f.text(dst, "text", ev.Content[:before])
	for _, c := range ev.Calls {
		if c.ID != "" {
			start := appendJSONString(append([]byte(nil), `{"type":"tool_use","id":`...), toolUseID(c.ID))
			start = appendJSONString(append(start, `,"name":`...), c.Name)
			dst = f.openBlock(dst, "tool_use", append(start, `,"input":{}}`...))
		}
		if c.Args != "" {
			dst = f.delta(dst, "input_json_delta", "partial_json", c.Args)
		}
	}
	dst = f.text(dst, "text", ev.Content[before:])
	if !d.Finished {
		return dst
	}
	if d.Err != nil || d.FinishReason == FinishError || d.FinishReason == FinishAbort {
		msg, typ := "generation ended early", "api_error"
		if d.Err != nil {
			msg = d.Err.Error()
			if outputStatus(d.Err) == http.StatusBadRequest { // a rank refused the request
				typ = "invalid_request_error"
			}
		}
		return f.event(dst, "error", func(dst []byte) []byte {
			dst = append(dst, `"error":{"type":"`+typ+`","message":`...)
			return append(appendJSONString(dst, clipMessage(msg)), '}')
		})
	}
	dst = f.closeBlock(dst)
	reason, seq := f.stopReason(d)
	dst = f.event(dst, "message_delta", func(dst []byte) []byte {
		dst = append(dst, `"delta":{"stop_reason":"`...)
		dst = append(dst, reason...)
		dst = append(dst, `","stop_sequence":`...)
		dst = append(dst, seq...)
		return f.usage(append(dst, `},"usage":`...), d)
	})
	return f.event(dst, "message_stop", nil)
}

// streamsDone: Anthropic streams end with message_stop, no [DONE].
func (f *messagesFormat) streamsDone() bool { return false }

// anthropicErrors rewrites the error responses of h into Anthropic's shape:
// {"type":"error","error":{"type":..., "message":...}}.
func anthropicErrors(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h(&anthropicErrorWriter{ResponseWriter: w}, r)
	}
}

// anthropicErrorWriter holds back a JSON error body (status >= 400) to rewrite it; other
// responses pass through.
type anthropicErrorWriter struct {
	http.ResponseWriter
	status int // the error status held back (0: passing through)
}

func (a *anthropicErrorWriter) WriteHeader(code int) {
	if code >= 400 && strings.HasPrefix(a.Header().Get("Content-Type"), "application/json") {
		a.status = code
		return
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *anthropicErrorWriter) Write(p []byte) (int, error) {
	if a.status == 0 {
		return a.ResponseWriter.Write(p)
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(p, &e)
	typ := "api_error"
	switch a.status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable:
		typ = "overloaded_error"
	}
	out, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": e.Error.Message}})
	a.ResponseWriter.WriteHeader(a.status)
	a.status = 0
	_, err := a.ResponseWriter.Write(append(out, '\n'))
	return len(p), err
}

// Unwrap lets http.ResponseController reach the connection (deadlines, flushes).
func (a *anthropicErrorWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
