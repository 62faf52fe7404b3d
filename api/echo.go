package api

import (
	"fmt"
	"strconv"
)

// echoState is a completion choice's prompt as echo and vLLM's prompt_logprobs show it.
type echoState struct {
	echoText   bool    // echo: the prompt text (and, with logprobs, its logprobs) comes first
	text       string  // the prompt's text
	ids        []int32 // the prompt's ids
	promptTopN int     // prompt_logprobs K; -1 when not asked
	done       bool    // the prompt went out with a choice
}

// forPrompt is e for another prompt of the batch.
func (e *echoState) forPrompt(s *Server, ids []int32) *echoState {
	c := *e
	c.ids = ids
	if c.echoText {
		c.text = s.promptText(ids)
	}
	return &c
}

// promptText is the text of a prompt's ids, special tokens (the BOS the encoder added) left out.
func (s *Server) promptText(ids []int32) string {
	if tok := s.engine.Tokenizer(); tok != nil {
		return tok.Decode(ids, true)
	}
	return ""
}

// fillEcho applies completions' echo and prompt_logprobs: echo puts the prompt before the
// output, with its logprobs when logprobs are asked for (what loglikelihood evaluation reads).
func (s *Server) fillEcho(req *Request, f *openAIFormat, body *completionRequest) error {
	if !body.Echo && body.PromptLogprobs == nil {
		return nil
	}
	e := &echoState{echoText: body.Echo, ids: req.InputIDs, promptTopN: -1}
	if body.Echo {
		e.text = s.promptText(req.InputIDs)
		req.PromptLogprobs = req.Logprobs
	}
	if k := body.PromptLogprobs; k != nil {
		if *k < 0 || *k > MaxTopLogprobs {
			return badRequest("prompt_logprobs", fmt.Sprintf("must be in [0, %d], got %d", MaxTopLogprobs, *k))
		}
		req.PromptLogprobs, e.promptTopN = true, *k
		req.TopLogprobs = max(req.TopLogprobs, *k)
	}
	f.echo = e
	return nil
}

// vllmPromptLogprobs appends vLLM's prompt_logprobs: null for the first prompt token, then per
// token an object keyed by token id: the token itself and the K most likely, each {logprob,
// rank, decoded_token} (rank known for the top entries only).
func (f *openAIFormat) vllmPromptLogprobs(dst []byte, d *Delta) []byte {
	e := f.echo
	if len(d.PromptLogprobs) == 0 && len(e.ids) > 1 {
		return append(dst, "null"...)
	}
	kp := 0
	if len(d.PromptLogprobs) > 0 {
		kp = len(d.PromptTopLogprobIDs) / len(d.PromptLogprobs)
	}
	entry := func(dst []byte, id int32, lp float32, rank int) []byte {
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, int64(id), 10)
		dst = append(dst, `":{"logprob":`...)
		dst = appendLogprob(dst, lp)
		dst = append(dst, `,"rank":`...)
		if rank > 0 {
			dst = strconv.AppendInt(dst, int64(rank), 10)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"decoded_token":`...)
		dst = appendJSONString(dst, f.s.tokenString(id))
		return append(dst, '}')
	}
	dst = append(dst, "[null"...)
	for p := 1; p < len(e.ids) && p-1 < len(d.PromptLogprobs); p++ {
		id := e.ids[p]
		top := d.PromptTopLogprobIDs[(p-1)*kp : p*kp]
		rank := 0
		for j, t := range top {
			if t == id {
				rank = j + 1
			}
		}
		dst = append(dst, ",{"...)
		dst = entry(dst, id, d.PromptLogprobs[p-1], rank)
		for j := range min(kp, e.promptTopN) {
			if top[j] == id {
				continue
			}
			dst = append(dst, ',')
			dst = entry(dst, top[j], d.PromptTopLogprobs[(p-1)*kp+j], j+1)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}
