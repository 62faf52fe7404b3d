package api

// Logprobs in each endpoint's shape. Every logprob is the natural-log probability under the
// model's raw logits at that position (before logit_bias, penalties, the grammar mask and
// temperature), as vLLM reports by default; the top entries are the most likely tokens of that
// same distribution.

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxTopLogprobs bounds top_logprobs (chat), logprobs (completions) and top_logprobs_num.
const MaxTopLogprobs = 20

// tokenString is the text of one token as logprobs show it: its bytes when they are valid UTF-8,
// else "bytes:" and the bytes as \xNN escapes (as vLLM writes a partial character).
func (s *Server) tokenString(id int32) string {
	tok := s.engine.Tokenizer()
	if tok == nil {
		return ""
	}
	b := tok.TokenBytes(id)
	if utf8.Valid(b) {
		return string(b)
	}
	out := []byte("bytes:")
	for _, c := range b {
		out = append(out, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
	}
	return string(out)
}

// tokenBytes is one token's bytes (nil without a tokenizer).
func (s *Server) tokenBytes(id int32) []byte {
	if tok := s.engine.Tokenizer(); tok != nil {
		return tok.TokenBytes(id)
	}
	return nil
}

// topK is how many top entries each position of d carries.
func topK(d *Delta) int {
	if len(d.IDs) == 0 {
		return 0
	}
	return len(d.TopLogprobIDs) / len(d.IDs)
}

// logprobs appends the choice's logprobs object (null unless asked for): chat's
// {"content":[{token, logprob, bytes, top_logprobs}]}, or completions' {tokens, token_logprobs,
// top_logprobs, text_offset}.
func (f *openAIFormat) logprobs(dst []byte, d *Delta) []byte {
	if !f.chat {
		return f.completionLogprobs(dst, d)
	}
	if !f.wantLogprobs || len(d.Logprobs) != len(d.IDs) || len(d.IDs) == 0 {
		return append(dst, "null"...)
	}
	k := topK(d)
	dst = append(dst, `{"content":[`...)
	for i, id := range d.IDs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = f.chatEntry(dst, id, d.Logprobs[i])
		dst = append(dst, `,"top_logprobs":[`...)
		for j := range min(k, f.topN) {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = f.chatEntry(dst, d.TopLogprobIDs[i*k+j], d.TopLogprobs[i*k+j])
			dst = append(dst, '}')
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, `]}`...)
}

// lpEntry is one position of a completions logprobs object.
type lpEntry struct {
	id      int32
	lp      float32
	null    bool      // the prompt's first token: no logprob, no top entries
	topIDs  []int32   // the most likely tokens there, most likely first
	topLps  []float32 // their logprobs
	shownTo int       // how many top entries to show
}

// completionLogprobs appends completions' {tokens, token_logprobs, top_logprobs, text_offset}:
// with echo, the prompt's positions first (the first one null), then the generated ones.
func (f *openAIFormat) completionLogprobs(dst []byte, d *Delta) []byte {
	if !f.wantLogprobs || len(d.Logprobs) != len(d.IDs) {
		return append(dst, "null"...)
	}
	var entries []lpEntry
	if e := f.echo; e != nil && e.echoText && !e.done {
		kp := 0
		if len(d.PromptLogprobs) > 0 {
			kp = len(d.PromptTopLogprobIDs) / len(d.PromptLogprobs)
		}
		for p, id := range e.ids {
			if p == 0 || p-1 >= len(d.PromptLogprobs) {
				entries = append(entries, lpEntry{id: id, null: true})
				continue
			}
			entries = append(entries, lpEntry{id: id, lp: d.PromptLogprobs[p-1],
				topIDs: d.PromptTopLogprobIDs[(p-1)*kp : p*kp], topLps: d.PromptTopLogprobs[(p-1)*kp : p*kp], shownTo: min(kp, f.topN)})
		}
	}
	k := topK(d)
	for i, id := range d.IDs {
		entries = append(entries, lpEntry{id: id, lp: d.Logprobs[i],
			topIDs: d.TopLogprobIDs[i*k : (i+1)*k], topLps: d.TopLogprobs[i*k : (i+1)*k], shownTo: min(k, f.topN)})
	}
	dst = append(dst, `{"tokens":[`...)
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, f.s.tokenString(e.id))
	}
	dst = append(dst, `],"token_logprobs":[`...)
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		if e.null {
			dst = append(dst, "null"...)
		} else {
			dst = appendLogprob(dst, e.lp)
		}
	}
	dst = append(dst, `],"top_logprobs":[`...)
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		if e.null {
			dst = append(dst, "null"...)
			continue
		}
		// The top entries, then the token itself when it is not among them (OpenAI: "up to
		// logprobs+1 elements").
		dst = append(dst, '{')
		listed := false
		for j := range e.shownTo {
			if j > 0 {
				dst = append(dst, ',')
			}
			listed = listed || e.topIDs[j] == e.id
			dst = appendJSONString(dst, f.s.tokenString(e.topIDs[j]))
			dst = append(dst, ':')
			dst = appendLogprob(dst, e.topLps[j])
		}
		if !listed {
			if e.shownTo > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, f.s.tokenString(e.id))
			dst = append(dst, ':')
			dst = appendLogprob(dst, e.lp)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"text_offset":[`...)
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(f.textOffset), 10)
		f.textOffset += utf8.RuneCountInString(f.s.tokenString(e.id))
	}
	return append(dst, "]}"...)
}

// chatEntry appends {"token":..,"logprob":..,"bytes":[..] without its closing brace.
func (f *openAIFormat) chatEntry(dst []byte, id int32, lp float32) []byte {
	dst = append(dst, `{"token":`...)
	dst = appendJSONString(dst, f.s.tokenString(id))
	dst = append(dst, `,"logprob":`...)
	dst = appendLogprob(dst, lp)
	dst = append(dst, `,"bytes":[`...)
	for i, c := range f.s.tokenBytes(id) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(c), 10)
	}
	return append(dst, ']')
}

// appendLogprob writes a logprob; -Inf (a token the model gives no chance) is JSON's most
// negative float, as OpenAI clients expect a number.
func appendLogprob(dst []byte, lp float32) []byte {
	if lp < -3.4e38 {
		return append(dst, "-9999.0"...)
	}
	return appendFloat(dst, lp)
}

// fillNativeLogprobs applies /generate's top_logprobs_num and logprob_start_len.
func (s *Server) fillNativeLogprobs(req *Request, body *generateRequest) error {
	if n := body.TopLogprobsNum; n != nil {
		if *n < 0 || *n > MaxTopLogprobs {
			return badRequest("top_logprobs_num", fmt.Sprintf("must be in [0, %d], got %d", MaxTopLogprobs, *n))
		}
		if *n > 0 && !req.Logprobs {
			return badRequest("top_logprobs_num", "needs return_logprob: true")
		}
		req.TopLogprobs = *n
	}
	if l := body.LogprobStartLen; l != nil && *l != -1 {
		if *l < 0 || *l >= len(req.InputIDs) {
			return badRequest("logprob_start_len", fmt.Sprintf("must be -1 (no prompt logprobs) or in [0, %d) (the prompt's length), got %d", len(req.InputIDs), *l))
		}
		if !req.Logprobs {
			return badRequest("logprob_start_len", "needs return_logprob: true")
		}
		req.PromptLogprobs = true
	}
	return nil
}

// appendNativeInput appends SGLang's input_token_logprobs (and input_top_logprobs with top):
// [logprob, id, null] for each prompt position from start, the first position's logprob null.
func appendNativeInput(dst []byte, d *Delta, ids []int32, start int, top bool) []byte {
	kp := 0
	if len(d.PromptLogprobs) > 0 {
		kp = len(d.PromptTopLogprobIDs) / len(d.PromptLogprobs)
	}
	dst = append(dst, `,"input_token_logprobs":[`...)
	for p := start; p < len(ids); p++ {
		if p > start {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		if p == 0 || p-1 >= len(d.PromptLogprobs) {
			dst = append(dst, "null"...)
		} else {
			dst = appendLogprob(dst, d.PromptLogprobs[p-1])
		}
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, int64(ids[p]), 10)
		dst = append(dst, ",null]"...)
	}
	dst = append(dst, ']')
	if !top {
		return dst
	}
	dst = append(dst, `,"input_top_logprobs":[`...)
	for p := start; p < len(ids); p++ {
		if p > start {
			dst = append(dst, ',')
		}
		if p == 0 || p-1 >= len(d.PromptLogprobs) {
			dst = append(dst, "null"...)
			continue
		}
		dst = append(dst, '[')
		for j := range kp {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = appendLogprob(dst, d.PromptTopLogprobs[(p-1)*kp+j])
			dst = append(dst, ',')
			dst = strconv.AppendInt(dst, int64(d.PromptTopLogprobIDs[(p-1)*kp+j]), 10)
			dst = append(dst, ",null]"...)
		}
		dst = append(dst, ']')
	}
	return append(dst, ']')
}

// appendNativeTop appends SGLang's output_top_logprobs: per position, [logprob, id, null] for
// each of the most likely tokens.
func appendNativeTop(dst []byte, d *Delta) []byte {
	k := topK(d)
	dst = append(dst, `,"output_top_logprobs":[`...)
	for i := range d.IDs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		for j := range k {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = appendLogprob(dst, d.TopLogprobs[i*k+j])
			dst = append(dst, ',')
			dst = strconv.AppendInt(dst, int64(d.TopLogprobIDs[i*k+j]), 10)
			dst = append(dst, ",null]"...)
		}
		dst = append(dst, ']')
	}
	return append(dst, ']')
}
