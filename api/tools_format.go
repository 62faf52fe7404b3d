package api

import (
	"fmt"
	"maps"
	"strconv"
)

// parsedMessage appends a chat message (whole) or delta (chunk) read through f.out: content,
// reasoning_content and tool_calls the OpenAI way. A delta carries what its text completed; a
// call's first delta has its id, type and name, later ones arguments fragments only.
func (f *openAIFormat) parsedMessage(dst []byte, d *Delta, chunk, first bool) []byte {
	o := f.out
	if !chunk {
		o.feed(d.Text)
		o.finish()
		dst = append(dst, `"message":{"role":"assistant","content":`...)
		all := o.all()
		calls := o.calls()
		ev := &all
		if len(ev.Content) == 0 && len(calls) > 0 {
			dst = append(dst, "null"...)
		} else {
			dst = appendJSONString(dst, string(ev.Content))
		}
		// harmony reads its analysis channel as reasoning with no --reasoning-parser: the
		// streamed deltas carry it, so the whole message does too
		if o.reasoning != "" || len(ev.Reasoning) > 0 {
			dst = append(dst, `,"reasoning_content":`...)
			if len(ev.Reasoning) == 0 {
				dst = append(dst, "null"...)
			} else {
				dst = appendJSONString(dst, string(ev.Reasoning))
			}
		}
		if len(calls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			for i, c := range calls {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"id":`...)
				dst = appendJSONString(dst, c.ID)
				dst = append(dst, `,"type":"function","function":{"name":`...)
				dst = appendJSONString(dst, c.Name)
				dst = append(dst, `,"arguments":`...)
				dst = appendJSONString(dst, string(c.Args))
				dst = append(dst, `}}`...)
			}
			dst = append(dst, ']')
		}
		return append(dst, '}')
	}
	ev := o.last
	dst = append(dst, `"delta":{`...)
	sep := false
	field := func(name string) {
		if sep {
			dst = append(dst, ',')
		}
		sep = true
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `":`...)
	}
	if first {
		field("role")
		dst = append(dst, `"assistant"`...)
	}
	if len(ev.Reasoning) > 0 {
		field("reasoning_content")
		dst = appendJSONString(dst, string(ev.Reasoning))
	}
	if len(ev.Content) > 0 || (len(ev.Reasoning) == 0 && len(ev.Calls) == 0) {
		field("content")
		dst = appendJSONString(dst, string(ev.Content))
	}
	if len(ev.Calls) > 0 {
		field("tool_calls")
		dst = append(dst, '[')
		for i, c := range ev.Calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"index":`...)
			dst = strconv.AppendInt(dst, int64(c.Index), 10)
			if c.ID != "" {
				dst = append(dst, `,"id":`...)
				dst = appendJSONString(dst, c.ID)
				dst = append(dst, `,"type":"function","function":{"name":`...)
				dst = appendJSONString(dst, c.Name)
				dst = append(dst, `,"arguments":`...)
			} else {
				dst = append(dst, `,"function":{"arguments":`...)
			}
			dst = appendJSONString(dst, c.Args)
			dst = append(dst, `}}`...)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// readChunk reads a streamed delta's text into f.out (kept for parsedMessage) and reports
// whether the delta makes a chunk: text held back (a possible marker) or consumed by syntax (a
// call's head) leaves nothing to show, and such a delta is sent only when its token ids or
// logprobs are asked for, or it starts or ends the stream.
func (f *openAIFormat) readChunk(d *Delta, first bool) bool {
	o := f.out
	o.feed(d.Text)
	if d.Finished {
		o.finish()
	}
	o.last = o.take()
	ev := &o.last
	return !ev.Empty() || first || d.Finished || d.Err != nil || f.tokenIDs || f.s.cfg.SkipTokenizerInit || len(d.Logprobs) > 0
}

// reasoningKwargs are the template variables of a chat request: chat_template_kwargs, plus
// reasoning_effort (low, medium or high) for templates that read it.
func reasoningKwargs(kwargs map[string]any, effort *string) (map[string]any, error) {
	if effort == nil {
		return kwargs, nil
	}
	switch *effort {
	case "low", "medium", "high":
	default:
		return nil, badRequest("reasoning_effort", fmt.Sprintf("%q: want low, medium or high", *effort))
	}
	out := maps.Clone(kwargs)
	if out == nil {
		out = map[string]any{}
	}
	if _, set := out["reasoning_effort"]; !set {
		out["reasoning_effort"] = *effort
	}
	return out, nil
}
