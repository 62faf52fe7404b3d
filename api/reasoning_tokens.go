package api

import (
	"bytes"
	"strconv"
)

// reasoningTokens counts the output tokens of the thinking block, as the usage's
// completion_tokens_details.reasoning_tokens: the tokens from the output's start through the
// one that completes "</think>", when the output opens the block (Qwen3: it starts with
// "<think>"; DeepSeek-R1: the prompt opened it). It reads the tokens' bytes, not their ids, so
// a marker spelled in several tokens (as a grammar may let a model write it) counts the same as
// the special token; the same ids give the same count streamed or whole.
type reasoningTokens struct {
	tok       tokenBytes // the vocabulary
	openFirst bool       // the output opens inside the block (deepseek_r1)
	state     uint8      // 0: undecided, 1: inside the block, 2: done
	text      []byte     // the output's bytes while undecided or inside
	n         int        // tokens counted
}

const thinkOpen, thinkClose = "<think>", "</think>"

// newReasoningTokens is the counter of a request whose output opens a thinking block, or nil.
func (s *Server) newReasoningTokens(parser string, thinking bool) *reasoningTokens {
	tok := s.engine.Tokenizer()
	if parser == "" || !thinking || tok == nil {
		return nil
	}
	return &reasoningTokens{tok: tok, openFirst: parser == ReasoningDeepSeekR1}
}

// tokenBytes is the vocabulary's side the counter reads (a tokenizer; a table in tests).
type tokenBytes interface{ TokenBytes(id int32) []byte }

// add counts the next output ids.
func (r *reasoningTokens) add(ids []int32) {
	if r == nil {
		return
	}
	for _, id := range ids {
		if r.state == 2 {
			return
		}
		from := max(0, len(r.text)-len(thinkClose))
		r.text = append(r.text, r.tok.TokenBytes(id)...)
		r.n++
		if r.state == 0 {
			switch {
			case r.openFirst || bytes.HasPrefix(r.text, []byte(thinkOpen)):
				r.state = 1
			case !bytes.HasPrefix([]byte(thinkOpen), r.text):
				r.state, r.n, r.text = 2, 0, nil // no block
				return
			default:
				continue // too little text to tell
			}
		}
		if bytes.Contains(r.text[from:], []byte(thinkClose)) {
			r.state, r.text = 2, nil
		}
	}
}

// appendDetails appends the usage's completion_tokens_details member.
func (r *reasoningTokens) appendDetails(dst []byte) []byte {
	if r == nil {
		return dst
	}
	n := r.n
	if r.state == 0 {
		n = 0 // the output ended before it could open the block
	}
	dst = append(dst, `,"completion_tokens_details":{"reasoning_tokens":`...)
	return append(strconv.AppendInt(dst, int64(n), 10), '}')
}
