package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// nativeSampling is SGLang's sampling_params object.
type nativeSampling struct {
	samplingCore
	MaxNewTokens *int   `json:"max_new_tokens"`
	MinNewTokens *int   `json:"min_new_tokens"`
	SamplingSeed *int64 `json:"sampling_seed"` // seed's alias; seed wins when both are given
	// Grammar is the same thing as ebnf: a grammar in GBNF syntax.
	Grammar *string `json:"grammar"`
	// LogitBias is SGLang's and OpenAI's token id -> bias in [-100, 100], checked as on chat.
	LogitBias map[string]float64 `json:"logit_bias"`
}

type generateRequest struct {
	Text           json.RawMessage `json:"text"`
	InputIDs       json.RawMessage `json:"input_ids"` // parsed by promptIDs, counted as read
	SamplingParams *nativeSampling `json:"sampling_params"`
	Stream         bool            `json:"stream"`
	RID            string          `json:"rid"`
	ReturnLogprob  bool            `json:"return_logprob"`
	// TopLogprobsNum is how many most likely tokens to report per output position;
	// LogprobStartLen is where prompt logprobs start (-1, the default: none).
	TopLogprobsNum  *int `json:"top_logprobs_num"`
	LogprobStartLen *int `json:"logprob_start_len"`
	RoutedDPRank    *int `json:"routed_dp_rank"`
	// Priority is SGLang's request priority (--scheduling-policy priority: lower first).
	Priority json.RawMessage `json:"priority"`
}

// buildGenerate validates a /generate body into its request and native format.
func (s *Server) buildGenerate(body *generateRequest, _ time.Time) (*Request, outputFormat, error) {
	sp := body.SamplingParams
	if sp == nil {
		sp = &nativeSampling{}
	}
	if len(body.RID) > maxRIDBytes {
		return nil, nil, badRequest("rid", fmt.Sprintf("is %d bytes; at most %d are allowed", len(body.RID), maxRIDBytes))
	}
	req := &Request{RID: body.RID, Stream: body.Stream, Logprobs: body.ReturnLogprob, NoText: s.cfg.SkipTokenizerInit}
	if req.RID == "" {
		req.RID = s.engine.NewRID()
	}
	prompts, batched, err := s.nativePrompts(body)
	if err != nil {
		return nil, nil, err
	}
	if batched && body.RID != "" {
		return nil, nil, badRequest("rid", "give no rid with a batch: each prompt gets its own")
	}
	req.InputIDs = prompts[0]
	common := samplingFields{samplingCore: sp.samplingCore, MinTokens: sp.MinNewTokens, RoutedDPRank: body.RoutedDPRank, Grammar: sp.Grammar}
	common.Priority = body.Priority
	if common.Seed == nil {
		common.Seed = sp.SamplingSeed
	}
	if err := s.fillCommon(req, &common); err != nil {
		return nil, nil, err
	}
	if err := s.fillGenerationExtras(req, &samplingFields{LogitBias: sp.LogitBias}); err != nil {
		var bre *BadRequestError
		if errors.As(err, &bre) {
			bre.Param = "sampling_params." + bre.Param
		}
		return nil, nil, err
	}
	if err := s.checkLength(req, sp.MaxNewTokens, "max_new_tokens", s.cfg.DefaultMaxNewTokens); err != nil {
		return nil, nil, err
	}
	if err := s.fillNativeLogprobs(req, body); err != nil {
		return nil, nil, err
	}
	nf := &nativeFormat{rid: req.RID, text: !req.NoText, logprobs: req.Logprobs, top: req.TopLogprobs > 0, inputFrom: -1, index: -1}
	if req.PromptLogprobs {
		nf.inputFrom, nf.inputIDs = *body.LogprobStartLen, req.InputIDs
	}
	n := 1
	if sp.N != nil {
		n = *sp.N // range-checked by fillCommon
	}
	if batched || n > 1 {
		if n > 1 && body.RID != "" {
			return nil, nil, badRequest("rid", "give no rid with n > 1: each choice gets its own")
		}
		return s.expandNative(req, nf, prompts, n, sp.MaxNewTokens)
	}
	return req, nf, nil
}

// nativeFormat writes /generate objects: {text, output_ids, meta_info}.
type nativeFormat struct {
	rid      string
	text     bool
	logprobs bool
	top      bool // output_top_logprobs too (top_logprobs_num > 0)
	// inputFrom is logprob_start_len (-1: no prompt logprobs); inputIDs the prompt they score.
	// They go out once, with the first object written.
	inputFrom int
	inputIDs  []int32
	// index is the prompt's place in a batch (written as "index"); -1 when not batched.
	index int
}

func (f *nativeFormat) object(dst []byte, d *Delta) []byte {
	dst = append(dst, '{')
	if f.index >= 0 {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(f.index), 10)
		dst = append(dst, ',')
	}
	if f.text {
		dst = append(dst, `"text":`...)
		dst = appendJSONString(dst, d.Text)
		dst = append(dst, ',')
	}
	dst = append(dst, `"output_ids":`...)
	dst = appendIDs(dst, d.IDs)
	dst = append(dst, `,"meta_info":{"id":`...)
	dst = appendJSONString(dst, f.rid)
	dst = append(dst, `,"finish_reason":`...)
	switch {
	case !d.Finished:
		dst = append(dst, "null"...)
	case d.FinishReason == FinishLength:
		dst = append(dst, `{"type":"length","length":`...)
		dst = strconv.AppendInt(dst, int64(d.CompletionTokens), 10)
		dst = append(dst, '}')
	case d.FinishReason == FinishStop:
		dst = append(dst, `{"type":"stop","matched":`...)
		switch m := d.MatchedStop.(type) {
		case string:
			dst = appendJSONString(dst, m)
		case int32:
			dst = strconv.AppendInt(dst, int64(m), 10)
		default:
			dst = append(dst, "null"...)
		}
		dst = append(dst, '}')
	default:
		dst = append(dst, `{"type":`...)
		dst = appendJSONString(dst, d.FinishReason.String())
		if d.Err != nil {
			dst = append(dst, `,"message":`...)
			dst = appendJSONString(dst, d.Err.Error())
		}
		dst = append(dst, '}')
	}
	if d.Finished {
		dst = append(dst, `,"prompt_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.PromptTokens), 10)
		dst = append(dst, `,"completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.CompletionTokens), 10)
		dst = append(dst, `,"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(d.CachedTokens), 10)
	}
	if f.logprobs {
		dst = append(dst, `,"output_token_logprobs":[`...)
		for i, lp := range d.Logprobs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = appendLogprob(dst, lp)
			dst = append(dst, ',')
			dst = strconv.AppendInt(dst, int64(d.IDs[i]), 10)
			dst = append(dst, ",null]"...)
		}
		dst = append(dst, ']')
		if f.top {
			dst = appendNativeTop(dst, d)
		}
		if f.inputFrom >= 0 {
			dst = appendNativeInput(dst, d, f.inputIDs, f.inputFrom, f.top)
			f.inputFrom = -1
		}
	}
	return append(dst, "}}"...)
}

// whole appends the non-streamed response object.
func (f *nativeFormat) whole(dst []byte, d *Delta) []byte {
	return append(f.object(dst, d), '\n')
}

func (f *nativeFormat) chunk(dst []byte, d *Delta, first bool) []byte {
	// A failed request's last object says how it ended and counts what it delivered (its
	// finish_reason carries the message, as SGLang's abort does); the error event follows.
	if len(d.IDs) > 0 || d.Text != "" || d.Finished {
		dst = append(dst, "data: "...)
		dst = f.object(dst, d)
		dst = append(dst, "\n\n"...)
	}
	if d.Err != nil {
		dst = appendErrorEvent(dst, d.Err)
	}
	return dst
}

type tokenizeRequest struct {
	Text             *string          `json:"text"`
	Prompt           *string          `json:"prompt"`
	Messages         []map[string]any `json:"messages"`
	Tools            json.RawMessage  `json:"tools"`
	ChatTemplateArgs map[string]any   `json:"chat_template_kwargs"`
	AddSpecialTokens *bool            `json:"add_special_tokens"`
	Model            string           `json:"model"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var body tokenizeRequest
	if !s.tokenizerBody(w, r, "/tokenize", &body, &body.Model) {
		return
	}
	tok := s.engine.Tokenizer()
	addSpecial := true
	if body.AddSpecialTokens != nil {
		addSpecial = *body.AddSpecialTokens
	}
	var text string
	switch {
	case body.Messages != nil:
		if s.tmpl == nil {
			s.writeError(w, http.StatusBadRequest, badRequest("messages", "the model has no chat template"))
			return
		}
		p, err := s.renderMessages(body.Messages, body.Tools, body.ChatTemplateArgs)
		if err != nil {
			s.writeError(w, http.StatusBadRequest, err)
			return
		}
		text, addSpecial = p, false
	case body.Text != nil:
		text = *body.Text
	case body.Prompt != nil:
		text = *body.Prompt
	default:
		s.writeError(w, http.StatusBadRequest, badRequest("text", "one of text, prompt or messages is required"))
		return
	}
	ids := tok.Encode(text, addSpecial)
	limit, _ := s.maxModelLen()
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids, "count": len(ids), "max_model_len": limit})
}

// tokenizerBody is the start of /tokenize and /detokenize: count the request, decode the body
// into v, check the model it names (*model, a field of v) and that there is a tokenizer. False
// means the error has been answered.
func (s *Server) tokenizerBody(w http.ResponseWriter, r *http.Request, endpoint string, v any, model *string) bool {
	s.met.requests[endpoint].Inc()
	err := s.decodeBody(w, r, v)
	if err == nil {
		err = s.checkModel(*model)
	}
	if err == nil {
		err = s.needTokenizer(endpoint)
	}
	if err != nil {
		s.fail(w, err)
		return false
	}
	return true
}

type detokenizeRequest struct {
	Tokens json.RawMessage `json:"tokens"` // parsed by parseTokenIDs
	// SkipSpecialTokens defaults to true, as in SGLang.
	SkipSpecialTokens *bool  `json:"skip_special_tokens"`
	Model             string `json:"model"`
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var body detokenizeRequest
	if !s.tokenizerBody(w, r, "/detokenize", &body, &body.Model) {
		return
	}
	tokens, err := parseTokenIDs(body.Tokens, "tokens", math.MaxInt)
	if err == nil {
		err = s.checkIDRange(tokens, "tokens")
	}
	if err != nil {
		s.writeError(w, http.StatusBadRequest, err)
		return
	}
	skip := body.SkipSpecialTokens == nil || *body.SkipSpecialTokens
	text := s.engine.Tokenizer().Decode(tokens, skip)
	// SGLang answers {text}, vLLM {prompt}: both, so either client reads its own.
	writeJSON(w, http.StatusOK, map[string]string{"text": text, "prompt": text})
}
