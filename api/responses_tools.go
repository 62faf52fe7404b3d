package api

// Function tools on /v1/responses: the Responses API's flat tool and tool_choice shapes become
// the chat ones, and function_call / function_call_output input items become an assistant
// message's tool_calls and tool messages, so tools run through the chat path (template, the
// composed grammar that makes every call valid, the chat output reader).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// hasTools reports whether the body offers tools.
func (b *responsesRequest) hasTools() bool {
	t := bytes.TrimSpace(b.Tools)
	return len(t) > 0 && string(t) != "null" && string(t) != "[]"
}

// member is one member of a JSON object, in the order written.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers reads a JSON object's members in order.
func objectMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("must be an object")
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{key, v})
	}
	return out, nil
}

// responsesTools turns Responses function tools ({type, name, description, parameters,
// strict}) into chat tools ({type, function: {...}}), the members in the order written (the
// template prints them so).
func responsesTools(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("tools", "must be an array of {type: function, name, description, parameters, strict}")
	}
	out := []byte{'['}
	for i, t := range list {
		param := fmt.Sprintf("tools[%d]", i)
		ms, err := objectMembers(t)
		if err != nil {
			return nil, badRequest(param, err.Error())
		}
		var typ string
		fn := []byte{'{'}
		for _, m := range ms {
			switch m.key {
			case "type":
				_ = json.Unmarshal(m.value, &typ)
				continue
			case "name", "description", "parameters", "strict":
			case "function":
				return nil, badRequest(param+".function", "Responses tools are flat: {type: function, name, description, parameters, strict}")
			default:
				return nil, badRequest(param, fmt.Sprintf("unknown field %q", m.key))
			}
			if len(fn) > 1 {
				fn = append(fn, ',')
			}
			fn = appendJSONString(fn, m.key)
			fn = append(fn, ':')
			fn = append(fn, m.value...)
		}
		if typ != "function" {
			return nil, badRequest(param+".type", fmt.Sprintf("unsupported tool type %q (only function tools)", typ))
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"type":"function","function":`...)
		out = append(append(out, fn...), "}}"...)
	}
	return append(out, ']'), nil
}

// responsesToolChoice turns a Responses tool_choice (a mode, or {type: function, name}) into
// the chat one.
func responsesToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return raw, nil // the modes are the chat ones; parseTools checks them
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Name == "" {
		return nil, badRequest("tool_choice", "must be none, auto, required, or {type: function, name}")
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	return b, nil
}

// itemString reads a string member of an input item; required ones must be non-empty.
func itemString(it map[string]json.RawMessage, key, param string, required bool) (string, error) {
	var s string
	if v, ok := it[key]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &s); err != nil {
			return "", badRequest(param+"."+key, "must be a string")
		}
	}
	if required && s == "" {
		return "", badRequest(param+"."+key, "is required")
	}
	return s, nil
}

// functionCallMessage adds a function_call input item to the conversation: a tool call of the
// assistant message it follows, or of a new assistant message (carrying reasoning, the text of
// the reasoning items before it, when there is some). calls collects the call ids.
func functionCallMessage(msgs []map[string]any, it map[string]json.RawMessage, param string, calls map[string]bool, reasoning string) ([]map[string]any, error) {
	for k := range it {
		switch k {
		case "type", "id", "call_id", "name", "arguments", "status":
		default:
			return nil, badRequest(param, fmt.Sprintf("unknown field %q", k))
		}
	}
	callID, err := itemString(it, "call_id", param, true)
	if err != nil {
		return nil, err
	}
	name, err := itemString(it, "name", param, true)
	if err != nil {
		return nil, err
	}
	args, err := itemString(it, "arguments", param, true)
	if err != nil {
		return nil, err
	}
	if !json.Valid([]byte(args)) || !strings.HasPrefix(strings.TrimSpace(args), "{") {
		return nil, badRequest(param+".arguments", "must be a JSON object (as a string)")
	}
	calls[callID] = true
	call := map[string]any{"id": callID, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
	if n := len(msgs); n > 0 && msgs[n-1]["role"] == "assistant" && reasoning == "" {
		list, _ := msgs[n-1]["tool_calls"].([]any)
		msgs[n-1]["tool_calls"] = append(list, call)
		return msgs, nil
	}
	m := map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}}
	if reasoning != "" {
		m["reasoning_content"] = reasoning
	}
	return append(msgs, m), nil
}

// reasoningInput reads a reasoning input item (an earlier turn's output passed back): its
// reasoning_text parts, or its summary when it has none. It goes to the next assistant
// message's reasoning_content, which templates with a thinking block render (or drop) as they
// do for chat clients.
func reasoningInput(it map[string]json.RawMessage, param string) (string, error) {
	for k, v := range it {
		switch k {
		case "type", "id", "summary", "content", "status":
		case "encrypted_content":
			if string(v) != "null" {
				return "", badRequest(param+".encrypted_content", "this server encrypts no reasoning")
			}
		default:
			return "", badRequest(param, fmt.Sprintf("unknown field %q", k))
		}
	}
	read := func(key, want string) (string, error) {
		raw, ok := it[key]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", badRequest(param+"."+key, "must be an array of {type, text}")
		}
		var b strings.Builder
		for j, p := range parts {
			if p.Type != want {
				return "", badRequest(fmt.Sprintf("%s.%s[%d].type", param, key, j), fmt.Sprintf("want %s, got %q", want, p.Type))
			}
			b.WriteString(p.Text)
		}
		return b.String(), nil
	}
	text, err := read("content", "reasoning_text")
	if err != nil || text != "" {
		return text, err
	}
	return read("summary", "summary_text")
}

// functionOutputMessage is a function_call_output input item as a tool message; its call_id
// must answer an earlier function_call item.
func functionOutputMessage(it map[string]json.RawMessage, param string, calls map[string]bool) (map[string]any, error) {
	for k := range it {
		switch k {
		case "type", "id", "call_id", "output", "status":
		default:
			return nil, badRequest(param, fmt.Sprintf("unknown field %q", k))
		}
	}
	callID, err := itemString(it, "call_id", param, true)
	if err != nil {
		return nil, err
	}
	if !calls[callID] {
		return nil, badRequest(param+".call_id", fmt.Sprintf("%q answers no earlier function_call input item", callID))
	}
	raw, ok := it["output"]
	if !ok {
		return nil, badRequest(param+".output", "is required")
	}
	output, err := responsesContent(raw, param+".output")
	if err != nil {
		return nil, err
	}
	return map[string]any{"role": "tool", "tool_call_id": callID, "content": output}, nil
}
