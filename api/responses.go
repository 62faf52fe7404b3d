package api

// /v1/responses, OpenAI's Responses API, stateless: nothing is stored, so previous_response_id
// and conversation are refused. The input (a string or a list of items: messages, reasoning,
// function calls and their outputs) and instructions become a chat conversation and run through the chat path (template, sampling, structured
// output, tool calling: responses_tools.go); the output is an assistant message with one
// output_text part, with tools function_call items, and with a reasoning parser a reasoning item
// (the thinking block), streamed as the typed events response.created ... response.completed.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// responsesRequest is a /v1/responses body.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             bool            `json:"stream"`
	Text               *responsesText  `json:"text"`
	PreviousResponseID json.RawMessage `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Background         *bool           `json:"background"`
	Truncation         *string         `json:"truncation"`
	Include            []string        `json:"include"`
	StreamOptions      *streamOptions  `json:"stream_options"`
	// MaxReasoningChars bounds the thinking block, as on chat (an extension).
	MaxReasoningChars *int `json:"max_reasoning_chars"`
	ignoredFields
}

// responsesText is the text option: its output format.
type responsesText struct {
	Format *struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"format"`
	Verbosity json.RawMessage `json:"verbosity"`
}

func (b *responsesRequest) ignoredNames() []string {
	out := b.ignoredFields.names()
	if b.ParallelToolCalls != nil && !b.hasTools() {
		out = append(out, "parallel_tool_calls") // no tools: nothing to run in parallel
	}
	if b.Truncation != nil {
		out = append(out, "truncation") // "disabled" (checked): what happens anyway
	}
	if b.Include != nil {
		out = append(out, "include") // empty (checked): nothing extra to include
	}
	if o := b.StreamOptions; o != nil {
		// Usage always comes with response.completed; chunks carry none.
		if o.IncludeUsage {
			out = append(out, "stream_options.include_usage")
		}
		if o.ContinuousUsageStats {
			out = append(out, "stream_options.continuous_usage_stats")
		}
	}
	return append(out, b.StreamOptions.ignoredNames()...)
}

// responsesMessages turns input and instructions into chat messages.
func responsesMessages(body *responsesRequest) ([]map[string]any, error) {
	var msgs []map[string]any
	if body.Instructions != nil && *body.Instructions != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": *body.Instructions})
	}
	if len(body.Input) == 0 || string(body.Input) == "null" {
		return nil, badRequest("input", "is required")
	}
	var text string
	if err := json.Unmarshal(body.Input, &text); err == nil {
		return append(msgs, map[string]any{"role": "user", "content": text}), nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(body.Input, &items); err != nil {
		return nil, badRequest("input", "must be a string or an array of input items")
	}
	calls := map[string]bool{} // call_ids of the function_call items so far
	// reasoning is the reasoning items' text, for the assistant message that follows them (before
	// another message, it is dropped, as templates drop the thinking of earlier turns)
	reasoning := ""
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		var typ, role string
		_ = json.Unmarshal(it["type"], &typ)
		_ = json.Unmarshal(it["role"], &role)
		switch typ {
		case "", "message":
		case "function_call":
			var err error
			if msgs, err = functionCallMessage(msgs, it, param, calls, reasoning); err != nil {
				return nil, err
			}
			reasoning = ""
			continue
		case "reasoning":
			r, err := reasoningInput(it, param)
			if err != nil {
				return nil, err
			}
			reasoning += r
			continue
		case "function_call_output":
			m, err := functionOutputMessage(it, param, calls)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
			continue
		default:
			return nil, badRequest(param+".type", fmt.Sprintf("input items of type %q are not supported (message, reasoning, function_call, function_call_output)", typ))
		}
		for k := range it {
			switch k {
			case "type", "role", "content", "id", "status":
			default:
				return nil, badRequest(param, fmt.Sprintf("unknown field %q", k))
			}
		}
		content, err := responsesContent(it["content"], param+".content")
		if err != nil {
			return nil, err
		}
		m := map[string]any{"role": role, "content": content}
		if role == "assistant" && reasoning != "" {
			m["reasoning_content"] = reasoning // as a chat client passes it back
		}
		reasoning = ""
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// responsesContent reads a message's content: a string, or parts of type input_text /
// output_text (an earlier assistant turn), concatenated.
func responsesContent(raw json.RawMessage, param string) (string, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "must be a string or an array of content parts")
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			b.WriteString(p.Text)
		default:
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, j), fmt.Sprintf("content parts of type %q are not supported (text only)", p.Type))
		}
	}
	return b.String(), nil
}

// buildResponses validates a /v1/responses body into its request and response format.
func (s *Server) buildResponses(body *responsesRequest, start time.Time) (*Request, outputFormat, error) {
	switch {
	case len(body.PreviousResponseID) > 0 && string(body.PreviousResponseID) != "null":
		return nil, nil, badRequest("previous_response_id", "this server is stateless (store: false): send the whole conversation as input")
	case len(body.Conversation) > 0 && string(body.Conversation) != "null":
		return nil, nil, badRequest("conversation", "this server is stateless (store: false): send the whole conversation as input")
	case len(body.Reasoning) > 0 && string(body.Reasoning) != "null":
		return nil, nil, badRequest("reasoning", "reasoning options are not supported")
	case body.Background != nil && *body.Background:
		return nil, nil, badRequest("background", "background responses need storage; this server is stateless")
	case body.Truncation != nil && *body.Truncation != "disabled":
		return nil, nil, badRequest("truncation", `only "disabled" is supported: an input over the context length is a 400`)
	case len(body.Include) > 0:
		return nil, nil, badRequest("include", "no extra output can be included")
	case body.Text != nil && len(body.Text.Verbosity) > 0 && string(body.Text.Verbosity) != "null":
		return nil, nil, badRequest("text.verbosity", "verbosity is not supported")
	}
	msgs, err := responsesMessages(body)
	if err != nil {
		return nil, nil, err
	}
	tools, err := responsesTools(body.Tools)
	if err != nil {
		return nil, nil, err
	}
	choice, err := responsesToolChoice(body.ToolChoice)
	if err != nil {
		return nil, nil, err
	}
	cb := chatRequest{Model: body.Model, Messages: msgs, MaxCompletionTokens: body.MaxOutputTokens, Stream: body.Stream,
		Tools: tools, ToolChoice: choice, ParallelToolCalls: body.ParallelToolCalls, MaxReasoningChars: body.MaxReasoningChars}
	cb.Temperature, cb.TopP = body.Temperature, body.TopP
	if body.Text != nil && body.Text.Format != nil && body.Text.Format.Type != "" && body.Text.Format.Type != "text" {
		f := body.Text.Format
		rf := &responseFormat{Type: f.Type}
		if f.Type == "json_schema" {
			rf.JSONSchema = &struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Schema      json.RawMessage `json:"schema"`
				Strict      *bool           `json:"strict"`
			}{f.Name, f.Description, f.Schema, f.Strict}
		}
		cb.ResponseFormat = rf
	}
	req, cf, err := s.buildChat(&cb, start)
	if err != nil {
		var bre *BadRequestError
		if errors.As(err, &bre) {
			switch bre.Param {
			case "max_completion_tokens":
				bre.Param = "max_output_tokens"
			case "response_format", "response_format.type", "response_format.json_schema.schema":
				bre.Param = "text.format"
			}
			if bre.Param == "tool_choice" { // name this endpoint's fields
				bre.Msg = strings.Replace(bre.Msg, "response_format / json_schema / regex", "text.format", 1)
			}
			if strings.HasPrefix(bre.Param, "tools[") {
				bre.Param = strings.Replace(bre.Param, ".function.", ".", 1) // the Responses shape is flat
			}
		}
		return nil, nil, err
	}
	f := &responsesFormat{s: s, body: body, id: "resp_" + req.RID, msgID: "msg_" + req.RID, created: start.Unix()}
	if of, ok := cf.(*openAIFormat); ok && of.out != nil {
		f.out = of.out // the chat path's reader of reasoning and tool calls
	}
	return req, f, nil
}

// responsesFormat writes response objects and the typed stream events.
type responsesFormat struct {
	s       *Server
	body    *responsesRequest
	id      string // the response's id
	msgID   string // its first output message's id
	created int64
	// out splits the text into reasoning, content and tool calls (the chat path's reader); nil
	// with neither tools nor a reasoning parser
	out   *chatOutput
	seq   int            // the next event's sequence_number
	items []responseItem // the output items so far, the last one open while streaming when open is set
	open  bool           // the last item is still being streamed
}

// Output item types.
const (
	itemMessage   = "message"
	itemCall      = "function_call"
	itemReasoning = "reasoning"
)

// responseItem is one output item: an assistant message, a function call or a reasoning block.
type responseItem struct {
	kind         string // itemMessage, itemCall or itemReasoning
	id           string
	callID, name string // a function call's
	text         []byte // the message's or the reasoning's text, or the call's arguments
	status       string // completed or incomplete, once done
}

// outputItems are the output of a whole response: the reasoning (when there is some), the
// message (when it has text, or nothing else was written), the function calls, and a message
// with text that came after them (a call cut short), as the stream writes them.
func (f *responsesFormat) outputItems(d *Delta) []responseItem {
	if f.out == nil {
		return []responseItem{{kind: itemMessage, id: f.msgID, text: []byte(d.Text), status: itemStatus(d)}}
	}
	f.out.feed(d.Text)
	f.out.finish()
	all := &f.out.all
	var items []responseItem
	if len(all.reasoning) > 0 {
		items = append(items, responseItem{kind: itemReasoning, id: f.reasoningID(), text: all.reasoning, status: "completed"})
	}
	before, after := all.content[:len(all.content)-all.after], all.content[len(all.content)-all.after:]
	msgID := f.msgID
	if len(before) > 0 {
		items = append(items, responseItem{kind: itemMessage, id: msgID, text: before, status: "completed"})
		msgID += "_1"
	}
	for _, c := range f.out.calls {
		items = append(items, responseItem{kind: itemCall, id: callItemID(c.id), callID: c.id, name: c.name, text: c.args, status: "completed"})
	}
	if len(after) > 0 || len(items) == 0 {
		items = append(items, responseItem{kind: itemMessage, id: msgID, text: after, status: "completed"})
	}
	items[len(items)-1].status = itemStatus(d)
	return items
}

// itemStatus is the status of the item a finish closes: incomplete when max_output_tokens cut it.
func itemStatus(d *Delta) string {
	if d.FinishReason == FinishLength {
		return "incomplete"
	}
	return "completed"
}

// reasoningID is the reasoning item's id.
func (f *responsesFormat) reasoningID() string { return "rs_" + strings.TrimPrefix(f.id, "resp_") }

// callItemID is a function_call item's id, made from its call id.
func callItemID(callID string) string { return "fc_" + strings.TrimPrefix(callID, "call_") }

// response appends the response object: status, output (the items, when finished) and usage
// (on a finished delta).
func (f *responsesFormat) response(dst []byte, d *Delta, finished bool) []byte {
	status := "in_progress"
	if finished {
		status = "completed"
		if d.FinishReason == FinishLength {
			status = "incomplete"
		}
		if d.Err != nil || d.FinishReason == FinishError || d.FinishReason == FinishAbort {
			status = "failed"
		}
	}
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, f.id)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, f.created, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","model":`...)
	dst = appendJSONString(dst, f.s.cfg.ServedModelName)
	dst = append(dst, `,"output":[`...)
	if finished {
		for i := range f.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = f.item(dst, &f.items[i], false)
		}
	}
	dst = append(dst, `],"incomplete_details":`...)
	if finished && status == "incomplete" {
		dst = append(dst, `{"reason":"max_output_tokens"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"error":`...)
	if finished && d.Err != nil {
		dst = append(dst, `{"code":"server_error","message":`...)
		dst = appendJSONString(dst, d.Err.Error())
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"instructions":`...)
	if f.body.Instructions != nil {
		dst = appendJSONString(dst, *f.body.Instructions)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"max_output_tokens":`...)
	if f.body.MaxOutputTokens != nil {
		dst = strconv.AppendInt(dst, int64(*f.body.MaxOutputTokens), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"previous_response_id":null,"store":false,"parallel_tool_calls":`...)
	dst = strconv.AppendBool(dst, f.body.ParallelToolCalls == nil || *f.body.ParallelToolCalls)
	dst = append(dst, `,"tool_choice":`...)
	dst = appendCompact(dst, f.body.ToolChoice, `"auto"`)
	dst = append(dst, `,"tools":`...)
	dst = appendCompact(dst, f.body.Tools, `[]`)
	dst = append(dst, `,"metadata":{}`...)
	dst = append(dst, `,"text":{"format":`...)
	if t := f.body.Text; t != nil && t.Format != nil && t.Format.Type != "" {
		b, _ := json.Marshal(t.Format)
		dst = append(dst, b...)
	} else {
		dst = append(dst, `{"type":"text"}`...)
	}
	dst = append(dst, '}')
	dst = append(dst, `,"usage":`...)
	if finished {
		dst = append(dst, `{"input_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.PromptTokens), 10)
		dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.CachedTokens), 10)
		dst = append(dst, `},"output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.CompletionTokens), 10)
		dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.PromptTokens+d.CompletionTokens), 10)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

// appendCompact appends a request's JSON value compacted, or def when it is absent.
func appendCompact(dst []byte, raw json.RawMessage, def string) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return append(dst, def...)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return append(dst, def...)
	}
	return append(dst, b.Bytes()...)
}

// item appends an output item: as first announced (added: in progress, no text yet) or as it
// stands.
func (f *responsesFormat) item(dst []byte, it *responseItem, added bool) []byte {
	status, text := it.status, it.text
	if added || status == "" {
		status = "in_progress"
	}
	if added {
		text = nil
	}
	switch it.kind {
	case itemReasoning:
		dst = append(dst, `{"type":"reasoning","id":`...)
		dst = appendJSONString(dst, it.id)
		dst = append(dst, `,"summary":[],"content":[`...)
		if !added {
			dst = f.part(dst, itemReasoning, string(text))
		}
		dst = append(dst, `],"status":"`...)
		dst = append(dst, status...)
		return append(dst, `"}`...)
	case itemCall:
		dst = append(dst, `{"type":"function_call","id":`...)
		dst = appendJSONString(dst, it.id)
		dst = append(dst, `,"call_id":`...)
		dst = appendJSONString(dst, it.callID)
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, it.name)
		dst = append(dst, `,"arguments":`...)
		dst = appendJSONString(dst, string(text))
		dst = append(dst, `,"status":"`...)
		dst = append(dst, status...)
		return append(dst, `"}`...)
	}
	dst = append(dst, `{"type":"message","id":`...)
	dst = appendJSONString(dst, it.id)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if !added {
		dst = f.part(dst, itemMessage, string(text))
	}
	return append(dst, "]}"...)
}

// part appends an item's one content part: a message's output_text or a reasoning_text.
func (f *responsesFormat) part(dst []byte, kind, text string) []byte {
	if kind == itemReasoning {
		dst = append(dst, `{"type":"reasoning_text","text":`...)
		dst = appendJSONString(dst, text)
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = appendJSONString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

// event appends one typed SSE event: the event line, and data holding type, sequence_number and
// the event's fields (body, a JSON object's members without braces).
func (f *responsesFormat) event(dst []byte, typ string, body func(dst []byte) []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(f.seq), 10)
	f.seq++
	dst = append(dst, ',')
	dst = body(dst)
	return append(dst, "}\n\n"...)
}

// itemFields are the fields that place an event in the open item (and its one text part).
func (f *responsesFormat) itemFields(dst []byte, part bool) []byte {
	dst = append(dst, `"item_id":`...)
	dst = appendJSONString(dst, f.items[len(f.items)-1].id)
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(len(f.items)-1), 10)
	if part {
		dst = append(dst, `,"content_index":0`...)
	}
	return dst
}

// openItem closes the open item and announces it (and its one content part, for a message or
// a reasoning block).
func (f *responsesFormat) openItem(dst []byte, it responseItem) []byte {
	dst = f.closeItem(dst, "completed")
	f.items = append(f.items, it)
	f.open = true
	dst = f.event(dst, "response.output_item.added", func(dst []byte) []byte {
		dst = append(dst, `"output_index":`...)
		dst = strconv.AppendInt(dst, int64(len(f.items)-1), 10)
		return f.item(append(dst, `,"item":`...), &f.items[len(f.items)-1], true)
	})
	if it.kind != itemCall {
		dst = f.event(dst, "response.content_part.added", func(dst []byte) []byte {
			return f.part(append(f.itemFields(dst, true), `,"part":`...), it.kind, "")
		})
	}
	return dst
}

// closeItem ends the open item, if any, with its done events and the status given.
func (f *responsesFormat) closeItem(dst []byte, status string) []byte {
	if !f.open {
		return dst
	}
	f.open = false
	it := &f.items[len(f.items)-1]
	it.status = status
	switch it.kind {
	case itemCall:
		dst = f.event(dst, "response.function_call_arguments.done", func(dst []byte) []byte {
			dst = append(f.itemFields(dst, false), `,"name":`...)
			dst = appendJSONString(dst, it.name)
			dst = append(dst, `,"arguments":`...)
			return appendJSONString(dst, string(it.text))
		})
	case itemReasoning:
		dst = f.event(dst, "response.reasoning_text.done", func(dst []byte) []byte {
			dst = append(f.itemFields(dst, true), `,"text":`...)
			return appendJSONString(dst, string(it.text))
		})
	default:
		dst = f.event(dst, "response.output_text.done", func(dst []byte) []byte {
			dst = append(f.itemFields(dst, true), `,"text":`...)
			return append(appendJSONString(dst, string(it.text)), `,"logprobs":[]`...)
		})
	}
	if it.kind != itemCall {
		dst = f.event(dst, "response.content_part.done", func(dst []byte) []byte {
			return f.part(append(f.itemFields(dst, true), `,"part":`...), it.kind, string(it.text))
		})
	}
	return f.event(dst, "response.output_item.done", func(dst []byte) []byte {
		dst = append(dst, `"output_index":`...)
		dst = strconv.AppendInt(dst, int64(len(f.items)-1), 10)
		return f.item(append(dst, `,"item":`...), it, false)
	})
}

// nextID is the id of the next item of a kind: the first message is msgID, the first
// reasoning item reasoningID, later ones numbered.
func (f *responsesFormat) nextID(kind string) string {
	n := 0
	for _, it := range f.items {
		if it.kind == kind {
			n++
		}
	}
	id := f.msgID
	if kind == itemReasoning {
		id = f.reasoningID()
	}
	if n == 0 {
		return id
	}
	return id + "_" + strconv.Itoa(n)
}

// appendText adds text to the open item of the kind (a message or a reasoning block), opening
// one if the open item is another, with its delta event.
func (f *responsesFormat) appendText(dst []byte, kind string, text []byte) []byte {
	if len(text) == 0 {
		return dst
	}
	if !f.open || f.items[len(f.items)-1].kind != kind {
		dst = f.openItem(dst, responseItem{kind: kind, id: f.nextID(kind)})
	}
	it := &f.items[len(f.items)-1]
	it.text = append(it.text, text...)
	typ := "response.output_text.delta"
	if kind == itemReasoning {
		typ = "response.reasoning_text.delta"
	}
	return f.event(dst, typ, func(dst []byte) []byte {
		dst = append(f.itemFields(dst, true), `,"delta":`...)
		dst = appendJSONString(dst, string(text))
		if kind == itemMessage {
			dst = append(dst, `,"logprobs":[]`...)
		}
		return dst
	})
}

func (f *responsesFormat) chunk(dst []byte, d *Delta, first bool) []byte {
	if first {
		for _, typ := range []string{"response.created", "response.in_progress"} {
			dst = f.event(dst, typ, func(dst []byte) []byte {
				return f.response(append(dst, `"response":`...), d, false)
			})
		}
		if f.out == nil {
			dst = f.openItem(dst, responseItem{kind: itemMessage, id: f.msgID})
		}
	}
	var ev outputEvents
	if f.out == nil {
		ev.content = []byte(d.Text)
	} else {
		f.out.feed(d.Text)
		if d.Finished && d.Err == nil {
			f.out.finish()
		}
		ev = f.out.take()
	}
	// within one delta, the reader's order: reasoning, content, calls, content after them
	dst = f.appendText(dst, itemReasoning, ev.reasoning)
	before := len(ev.content) - ev.after
	dst = f.appendText(dst, itemMessage, ev.content[:before])
	for _, c := range ev.calls {
		if c.id != "" {
			dst = f.openItem(dst, responseItem{kind: itemCall, id: callItemID(c.id), callID: c.id, name: c.name})
		}
		if c.args == "" {
			continue
		}
		it := &f.items[len(f.items)-1]
		it.text = append(it.text, c.args...)
		dst = f.event(dst, "response.function_call_arguments.delta", func(dst []byte) []byte {
			dst = append(f.itemFields(dst, false), `,"delta":`...)
			return appendJSONString(dst, c.args)
		})
	}
	dst = f.appendText(dst, itemMessage, ev.content[before:])
	if !d.Finished {
		return dst
	}
	if d.Err == nil {
		if len(f.items) == 0 {
			dst = f.openItem(dst, responseItem{kind: itemMessage, id: f.msgID}) // nothing was written: an empty message
		}
		dst = f.closeItem(dst, itemStatus(d))
	}
	final := "response.completed"
	switch {
	case d.Err != nil || d.FinishReason == FinishError || d.FinishReason == FinishAbort:
		final = "response.failed"
	case d.FinishReason == FinishLength:
		final = "response.incomplete"
	}
	return f.event(dst, final, func(dst []byte) []byte {
		return f.response(append(dst, `"response":`...), d, true)
	})
}

// whole appends the response object.
func (f *responsesFormat) whole(dst []byte, d *Delta) []byte {
	f.items = f.outputItems(d)
	return append(f.response(dst, d, true), '\n')
}

// streamsDone says the stream ends with its final typed event: no [DONE] follows.
func (f *responsesFormat) streamsDone() bool { return false }
