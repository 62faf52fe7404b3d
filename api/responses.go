package api

// /v1/responses, OpenAI's Responses API, stateless: nothing is stored, so previous_response_id
// and conversation are refused. The input (a string or a list of messages) and instructions
// become a chat conversation and run through the chat path (template, sampling, structured
// output); the output is one assistant message with one output_text part, streamed as the
// typed events response.created ... response.completed.

import (
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
	Tools              []any           `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  json.RawMessage `json:"parallel_tool_calls"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Background         *bool           `json:"background"`
	Truncation         *string         `json:"truncation"`
	Include            []string        `json:"include"`
	StreamOptions      *streamOptions  `json:"stream_options"`
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
	if len(b.ParallelToolCalls) > 0 && string(b.ParallelToolCalls) != "null" {
		out = append(out, "parallel_tool_calls") // no tools: nothing to run in parallel
	}
	if b.Truncation != nil {
		out = append(out, "truncation") // "disabled" (checked): what happens anyway
	}
	if b.Include != nil {
		out = append(out, "include") // empty (checked): nothing extra to include
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
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		var typ, role string
		_ = json.Unmarshal(it["type"], &typ)
		_ = json.Unmarshal(it["role"], &role)
		if typ != "" && typ != "message" {
			return nil, badRequest(param+".type", fmt.Sprintf("input items of type %q are not supported (messages only)", typ))
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
		msgs = append(msgs, map[string]any{"role": role, "content": content})
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
	case len(body.Tools) > 0:
		return nil, nil, badRequest("tools", "tools are not supported on /v1/responses yet: use /v1/chat/completions")
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
	if tc := string(body.ToolChoice); tc != "" && tc != "null" && tc != `"none"` && tc != `"auto"` {
		return nil, nil, badRequest("tool_choice", "there are no tools to choose")
	}
	msgs, err := responsesMessages(body)
	if err != nil {
		return nil, nil, err
	}
	cb := chatRequest{Model: body.Model, Messages: msgs, MaxCompletionTokens: body.MaxOutputTokens, Stream: body.Stream}
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
	req, _, err := s.buildChat(&cb, start)
	if err != nil {
		var bre *BadRequestError
		if errors.As(err, &bre) {
			switch bre.Param {
			case "max_completion_tokens":
				bre.Param = "max_output_tokens"
			case "response_format", "response_format.type", "response_format.json_schema.schema":
				bre.Param = "text.format"
			}
		}
		return nil, nil, err
	}
	return req, &responsesFormat{s: s, body: body, id: "resp_" + req.RID, msgID: "msg_" + req.RID, created: start.Unix()}, nil
}

// responsesFormat writes response objects and the typed stream events.
type responsesFormat struct {
	s       *Server
	body    *responsesRequest
	id      string // the response's id
	msgID   string // its one output message's id
	created int64
	seq     int             // the next event's sequence_number
	text    strings.Builder // the output text so far (streaming)
}

// response appends the response object: status, output (the message, when done says so) and
// usage (on a finished delta).
func (f *responsesFormat) response(dst []byte, d *Delta, text string, finished bool) []byte {
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
		dst = f.message(dst, text, "completed")
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
	dst = append(dst, `,"previous_response_id":null,"store":false,"parallel_tool_calls":false,"tool_choice":"none","tools":[],"metadata":{}`...)
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

// message appends the output message item; text nil-equivalent "" with status in_progress is
// the item as first announced.
func (f *responsesFormat) message(dst []byte, text, status string) []byte {
	dst = append(dst, `{"type":"message","id":`...)
	dst = appendJSONString(dst, f.msgID)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if status == "completed" {
		dst = f.part(dst, text)
	}
	return append(dst, "]}"...)
}

func (f *responsesFormat) part(dst []byte, text string) []byte {
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

// itemFields are the fields that place an event in the one message's one text part.
func (f *responsesFormat) itemFields(dst []byte) []byte {
	dst = append(dst, `"item_id":`...)
	dst = appendJSONString(dst, f.msgID)
	return append(dst, `,"output_index":0,"content_index":0`...)
}

func (f *responsesFormat) chunk(dst []byte, d *Delta, first bool) []byte {
	if first {
		for _, typ := range []string{"response.created", "response.in_progress"} {
			dst = f.event(dst, typ, func(dst []byte) []byte {
				return f.response(append(dst, `"response":`...), d, "", false)
			})
		}
		dst = f.event(dst, "response.output_item.added", func(dst []byte) []byte {
			return f.message(append(dst, `"output_index":0,"item":`...), "", "in_progress")
		})
		dst = f.event(dst, "response.content_part.added", func(dst []byte) []byte {
			return f.part(append(f.itemFields(dst), `,"part":`...), "")
		})
	}
	if d.Text != "" {
		f.text.WriteString(d.Text)
		dst = f.event(dst, "response.output_text.delta", func(dst []byte) []byte {
			dst = append(f.itemFields(dst), `,"delta":`...)
			return append(appendJSONString(dst, d.Text), `,"logprobs":[]`...)
		})
	}
	if !d.Finished {
		return dst
	}
	text := f.text.String()
	if d.Err == nil {
		dst = f.event(dst, "response.output_text.done", func(dst []byte) []byte {
			dst = append(f.itemFields(dst), `,"text":`...)
			return append(appendJSONString(dst, text), `,"logprobs":[]`...)
		})
		dst = f.event(dst, "response.content_part.done", func(dst []byte) []byte {
			return f.part(append(f.itemFields(dst), `,"part":`...), text)
		})
		dst = f.event(dst, "response.output_item.done", func(dst []byte) []byte {
			return f.message(append(dst, `"output_index":0,"item":`...), text, "completed")
		})
	}
	final := "response.completed"
	switch {
	case d.Err != nil || d.FinishReason == FinishError || d.FinishReason == FinishAbort:
		final = "response.failed"
	case d.FinishReason == FinishLength:
		final = "response.incomplete"
	}
	return f.event(dst, final, func(dst []byte) []byte {
		return f.response(append(dst, `"response":`...), d, text, true)
	})
}

// whole appends the response object.
func (f *responsesFormat) whole(dst []byte, d *Delta) []byte {
	return append(f.response(dst, d, d.Text, true), '\n')
}

// streamsDone says the stream ends with its final typed event: no [DONE] follows.
func (f *responsesFormat) streamsDone() bool { return false }
