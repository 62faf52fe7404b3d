package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
	// IncludeObfuscation is openai-go's; accepted and ignored (policy.go).
	IncludeObfuscation json.RawMessage `json:"include_obfuscation"`
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Logprobs      *int            `json:"logprobs"`
	Echo          bool            `json:"echo"`
	BestOf        *int            `json:"best_of"`
	Suffix        *string         `json:"suffix"`
	// PromptLogprobs is vLLM's: the logprob of every prompt token and its K most likely.
	PromptLogprobs *int `json:"prompt_logprobs"`
	samplingFields
}

type chatRequest struct {
	Model               string           `json:"model"`
	Messages            []map[string]any `json:"messages"`
	MaxTokens           *int             `json:"max_tokens"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	Stream              bool             `json:"stream"`
	StreamOptions       *streamOptions   `json:"stream_options"`
	Logprobs            bool             `json:"logprobs"`
	TopLogprobs         *int             `json:"top_logprobs"`
	Tools               json.RawMessage  `json:"tools"`
	ToolChoice          json.RawMessage  `json:"tool_choice"`
	ParallelToolCalls   *bool            `json:"parallel_tool_calls"`
	ChatTemplateKwargs  map[string]any   `json:"chat_template_kwargs"`
	ReasoningEffort     *string          `json:"reasoning_effort"`
	// MaxReasoningChars bounds the thinking block (an extension; see composeOutputGrammar).
	MaxReasoningChars *int `json:"max_reasoning_chars"`
	samplingFields
}

// buildCompletion validates a /v1/completions body into its request and text_completion format.
func (s *Server) buildCompletion(body *completionRequest, start time.Time) (*Request, outputFormat, error) {
	if err := s.checkModel(body.Model); err != nil {
		return nil, nil, err
	}
	if body.Suffix != nil && *body.Suffix != "" {
		return nil, nil, badRequest("suffix", "suffix is not supported")
	}
	req := &Request{RID: s.engine.NewRID(), Stream: body.Stream}
	prompts, err := s.parsePrompts(body.Prompt)
	if err != nil {
		return nil, nil, err
	}
	req.InputIDs = prompts[0]
	if err := s.fillCommon(req, &body.samplingFields); err != nil {
		return nil, nil, err
	}
	if body.Logprobs != nil {
		if *body.Logprobs < 0 || *body.Logprobs > MaxTopLogprobs {
			return nil, nil, badRequest("logprobs", fmt.Sprintf("must be in [0, %d], got %d", MaxTopLogprobs, *body.Logprobs))
		}
		req.Logprobs, req.TopLogprobs = true, *body.Logprobs
	}
	req.NoText = s.cfg.SkipTokenizerInit
	if err := s.checkLength(req, body.MaxTokens, "max_tokens", 16); err != nil {
		return nil, nil, err
	}
	f := s.openAIFormat(false, "cmpl-", req, body.StreamOptions, body.ReturnTokenIDs, start)
	f.includeStop = body.IncludeStopStrInOutput
	f.wantLogprobs, f.topN = req.Logprobs, req.TopLogprobs
	if err := s.fillEcho(req, f, body); err != nil {
		return nil, nil, err
	}
	if len(prompts) > 1 || body.N != nil && *body.N > 1 || body.BestOf != nil {
		return s.expandChoices(req, f, prompts, body.N, body.BestOf, body.TruncatePromptTokens, body.MaxTokens)
	}
	return req, f, nil
}

// openAIFormat is the response format of an OpenAI completion (chat false) or chat completion.
func (s *Server) openAIFormat(chat bool, idPrefix string, req *Request, so *streamOptions, tokenIDs bool, start time.Time) *openAIFormat {
	return &openAIFormat{s: s, chat: chat, id: idPrefix + req.RID, created: start.Unix(),
		includeUsage: so != nil && so.IncludeUsage, continuousUsage: so != nil && so.ContinuousUsageStats, tokenIDs: tokenIDs}
}

// buildChat validates a /v1/chat/completions body into its request and chat.completion format.
func (s *Server) buildChat(body *chatRequest, start time.Time) (*Request, outputFormat, error) {
	if err := s.checkModel(body.Model); err != nil {
		return nil, nil, err
	}
	if err := s.needTokenizer("chat completions (chat template)"); err != nil {
		return nil, nil, err
	}
	if s.tmpl == nil {
		return nil, nil, badRequest("messages", "the model has no chat template")
	}
	if len(body.Messages) == 0 {
		return nil, nil, badRequest("messages", "must be a non-empty array")
	}
	for i, m := range body.Messages {
		role, _ := m["role"].(string)
		switch role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, nil, badRequest(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("unknown role %q", role))
		}
	}
	tr, err := s.parseTools(body.Tools, body.ToolChoice, body.ParallelToolCalls)
	if err != nil {
		return nil, nil, err
	}
	kwargs, err := reasoningKwargs(body.ChatTemplateKwargs, body.ReasoningEffort)
	if err != nil {
		return nil, nil, err
	}
	if t := body.TopLogprobs; t != nil && (*t < 0 || *t > MaxTopLogprobs) {
		return nil, nil, badRequest("top_logprobs", fmt.Sprintf("must be in [0, %d], got %d", MaxTopLogprobs, *t))
	}
	if t := body.TopLogprobs; t != nil && *t > 0 && !body.Logprobs {
		return nil, nil, badRequest("top_logprobs", "needs logprobs: true")
	}
	for _, k := range []string{"messages", "tools", "documents", "add_generation_prompt"} {
		if _, ok := body.ChatTemplateKwargs[k]; ok {
			return nil, nil, badRequest("chat_template_kwargs."+k, "is set by the request itself and cannot be overridden")
		}
	}
	tok := s.engine.Tokenizer()
	prompt, err := s.renderChat(body.Messages, body.Tools, tr, kwargs)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkTextFits(len(prompt), "messages"); err != nil {
		return nil, nil, err
	}
	// the tools' compiles (parseTools) started the request's one compile deadline
	req := &Request{RID: s.engine.NewRID(), Stream: body.Stream, Logprobs: body.Logprobs, compileBy: tr.compileBy}
	if body.TopLogprobs != nil {
		req.TopLogprobs = *body.TopLogprobs
	}
	req.InputIDs = tok.Encode(prompt, false)
	if err := s.fillCommon(req, &body.samplingFields); err != nil {
		return nil, nil, err
	}
	maxTokens := body.MaxCompletionTokens
	param := "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, param = body.MaxTokens, "max_tokens"
	}
	if err := s.checkLength(req, maxTokens, param, 0); err != nil {
		return nil, nil, err
	}
	parser := s.reasoningParser()
	thinking := thinkingOn(parser, kwargs)
	budget, err := reasoningBudget(body.MaxReasoningChars, parser)
	if err != nil {
		return nil, nil, err
	}
	if err := s.composeOutputGrammar(req, tr, thinking, parser, budget); err != nil {
		return nil, nil, err
	}
	f := s.openAIFormat(true, "chatcmpl-", req, body.StreamOptions, body.ReturnTokenIDs, start)
	f.includeStop = body.IncludeStopStrInOutput
	f.wantLogprobs, f.topN = req.Logprobs, req.TopLogprobs
	if tr.active() || parser != "" {
		f.out = newChatOutput(parser, tr)
	}
	f.rtok = s.newReasoningTokens(parser, thinking)
	if body.N != nil && *body.N > 1 {
		return s.expandChoices(req, f, [][]int32{req.InputIDs}, body.N, nil, nil, nil)
	}
	return req, f, nil
}

// openAIFormat writes completion and chat.completion objects and chunks.
type openAIFormat struct {
	s            *Server
	chat         bool
	id           string
	created      int64
	includeUsage bool
	// continuousUsage (stream_options.continuous_usage_stats, vLLM's) puts the usage so far on
	// every chunk; counts holds the latest counts seen.
	continuousUsage bool
	counts          Delta
	// includeStop is include_stop_str_in_output: a matched stop string ends the text.
	includeStop bool
	// wantLogprobs: the choices carry logprobs, with topN top entries per token; textOffset is
	// the completion text's length so far in characters (completions' text_offset).
	wantLogprobs bool
	topN         int
	textOffset   int
	// index is the choice's index (choices.go: several prompts, n, best_of); totals, when set,
	// are the whole response's counts, which continuous usage reports instead of this choice's.
	index  int
	totals *usageTotals
	// echo, when set, puts the prompt before the first choice text written (and its logprobs
	// before the completion's); it also carries vLLM's prompt_logprobs.
	echo      *echoState
	tokenIDs  bool
	chunkHead []byte // head(nil, true), built once per stream
	// out splits chat output into reasoning, content and tool calls; nil when the request has
	// neither tools nor a reasoning parser
	out *chatOutput
	// rtok counts the thinking block's tokens (usage.completion_tokens_details); nil without
	// thinking, and for n > 1 (the choices' totals do not carry it)
	rtok *reasoningTokens
}

func (f *openAIFormat) head(dst []byte, chunk bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, f.id)
	switch {
	case f.chat && chunk:
		dst = append(dst, `,"object":"chat.completion.chunk"`...)
	case f.chat:
		dst = append(dst, `,"object":"chat.completion"`...)
	default:
		dst = append(dst, `,"object":"text_completion"`...)
	}
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, f.created, 10)
	dst = append(dst, `,"model":`...)
	return appendJSONString(dst, f.s.cfg.ServedModelName)
}

// appendChunkHead appends the head every chunk of the stream shares, formatted once.
func (f *openAIFormat) appendChunkHead(dst []byte) []byte {
	if f.chunkHead == nil {
		f.chunkHead = f.head(nil, true)
	}
	return append(dst, f.chunkHead...)
}

func finishJSON(d *Delta) string {
	if !d.Finished {
		return "null"
	}
	switch d.FinishReason {
	case FinishLength:
		return `"length"`
	case FinishAbort:
		return `"abort"`
	case FinishError:
		return `"error"`
	}
	return `"stop"`
}

func (f *openAIFormat) usage(dst []byte, d *Delta) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.PromptTokens+d.CompletionTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(d.CachedTokens), 10)
	dst = append(dst, '}')
	if f.totals == nil {
		dst = f.rtok.appendDetails(dst)
	}
	return append(dst, '}')
}

// choice appends one choice: the text (as delta content for chat chunks, message for chat).
func (f *openAIFormat) choice(dst []byte, d *Delta, chunk, first bool) []byte {
	if m, ok := d.MatchedStop.(string); ok && f.includeStop && d.Finished {
		withStop := *d
		withStop.Text += m // the detokenizer cut the output at the stop string
		d = &withStop
	}
	if f.echo != nil && !f.echo.done {
		withPrompt := *d
		withPrompt.Text = f.echo.text + d.Text
		d = &withPrompt
		defer func() { f.echo.done = true }() // the prompt goes with the first choice written
	}
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(f.index), 10)
	dst = append(dst, ',')
	switch {
	case f.chat && f.out != nil:
		dst = f.parsedMessage(dst, d, chunk, first)
	case f.chat && chunk:
		dst = append(dst, `"delta":{`...)
		if first {
			dst = append(dst, `"role":"assistant",`...)
		}
		dst = append(dst, `"content":`...)
		dst = appendJSONString(dst, d.Text)
		dst = append(dst, '}')
	case f.chat:
		dst = append(dst, `"message":{"role":"assistant","content":`...)
		dst = appendJSONString(dst, d.Text)
		dst = append(dst, '}')
	default:
		dst = append(dst, `"text":`...)
		dst = appendJSONString(dst, d.Text)
	}
	if f.tokenIDs || f.s.cfg.SkipTokenizerInit {
		dst = append(dst, `,"token_ids":`...)
		dst = appendIDs(dst, d.IDs)
	}
	dst = append(dst, `,"logprobs":`...)
	dst = f.logprobs(dst, d)
	if f.echo != nil && !f.echo.done && f.echo.promptTopN >= 0 {
		dst = append(dst, `,"prompt_logprobs":`...)
		dst = f.vllmPromptLogprobs(dst, d)
	}
	dst = append(dst, `,"finish_reason":`...)
	if f.out != nil && d.Finished && d.FinishReason == FinishStop && f.out.hasCalls() {
		dst = append(dst, `"tool_calls"`...)
	} else {
		dst = append(dst, finishJSON(d)...)
	}
	if d.Finished && d.MatchedStop != nil {
		dst = append(dst, `,"matched_stop":`...)
		switch m := d.MatchedStop.(type) {
		case string:
			dst = appendJSONString(dst, m)
		case int32:
			dst = strconv.AppendInt(dst, int64(m), 10)
		}
	}
	return append(dst, '}')
}

// chunk appends the SSE events for one delta of a streamed completion.
func (f *openAIFormat) chunk(dst []byte, d *Delta, first bool) []byte {
	f.rtok.add(d.IDs)
	if f.out != nil && !f.readChunk(d, first) {
		return dst
	}
	content := len(d.IDs) > 0 || d.Text != "" || first
	if content || (d.Finished && d.Err == nil) {
		dst = append(dst, "data: "...)
		dst = f.appendChunkHead(dst)
		dst = append(dst, `,"choices":[`...)
		fin := *d
		if d.Err != nil {
			fin.Finished = false // the error event below ends the stream
		}
		dst = f.choice(dst, &fin, true, first)
		dst = append(dst, ']')
		if f.continuousUsage {
			f.counts.mergeMeta(d)
			dst = append(dst, `,"usage":`...)
			if f.totals != nil {
				f.totals.update(f.index, &f.counts)
				u := f.totals.sum()
				dst = f.usage(dst, &u)
			} else {
				dst = f.usage(dst, &f.counts)
			}
		}
		dst = append(dst, "}\n\n"...)
	}
	if d.Err != nil {
		dst = appendErrorEvent(dst, d.Err)
	}
	if d.Finished && f.includeUsage {
		dst = append(dst, "data: "...)
		dst = f.appendChunkHead(dst)
		dst = append(dst, `,"choices":[],"usage":`...)
		dst = f.usage(dst, d)
		dst = append(dst, "}\n\n"...)
	}
	return dst
}

// whole appends the non-streamed response object.
func (f *openAIFormat) whole(dst []byte, d *Delta) []byte {
	f.rtok.add(d.IDs)
	dst = f.head(dst, false)
	dst = append(dst, `,"choices":[`...)
	dst = f.choice(dst, d, false, false)
	dst = append(dst, `],"usage":`...)
	dst = f.usage(dst, d)
	return append(dst, "}\n"...)
}
