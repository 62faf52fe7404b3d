package api

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/llmserve/llmserve/sampling"
)

// samplingFields are the sampling and stopping fields shared by the OpenAI endpoints, with the
// SGLang/vLLM extensions. Pointers tell "absent" from zero.
type samplingFields struct {
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	Seed              *int64             `json:"seed"`
	Stop              json.RawMessage    `json:"stop"`
	StopTokenIDs      []int32            `json:"stop_token_ids"`
	IgnoreEOS         bool               `json:"ignore_eos"`
	MinTokens         *int               `json:"min_tokens"`
	SkipSpecialTokens *bool              `json:"skip_special_tokens"`
	StreamInterval    *int               `json:"stream_interval"`
	N                 *int               `json:"n"`
	Regex             *string            `json:"regex"`
	JSONSchema        *string            `json:"json_schema"`
	ResponseFormat    *responseFormat    `json:"response_format"`
	ReturnTokenIDs    bool               `json:"return_token_ids"`
	RoutedDPRank      *int               `json:"routed_dp_rank"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	// Aliases of response_format (policy.go): vLLM's guided decoding and structured outputs.
	GuidedJSON        json.RawMessage    `json:"guided_json"`
	GuidedRegex       *string            `json:"guided_regex"`
	GuidedChoice      []string           `json:"guided_choice"`
	StructuredOutputs *structuredOutputs `json:"structured_outputs"`
	// vLLM's: the stop string that ended the output stays in its text; keep only the prompt's
	// last k tokens (-1: as many as the context holds).
	IncludeStopStrInOutput bool `json:"include_stop_str_in_output"`
	TruncatePromptTokens   *int `json:"truncate_prompt_tokens"`
	// SpacesBetweenSpecialTokens is vLLM's; see ignoredNames.
	SpacesBetweenSpecialTokens *bool `json:"spaces_between_special_tokens"`
	// Accepted and ignored (named in the response): they change nothing about generation.
	ignoredFields
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// parseStop accepts a string or an array of strings.
func parseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "must be a string or an array of strings")
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

func finite(name string, v *float64) (float32, error) {
	if math.IsNaN(*v) || math.IsInf(*v, 0) {
		return 0, badRequest(name, "must be a finite number")
	}
	return float32(*v), nil
}

// applySampling overrides p with the fields present and validates the result.
func applySampling(p sampling.Params, f *samplingFields) (sampling.Params, error) {
	set := func(name string, src *float64, dst *float32) error {
		if src == nil {
			return nil
		}
		v, err := finite(name, src)
		*dst = v
		return err
	}
	for _, e := range []error{
		set("temperature", f.Temperature, &p.Temperature),
		set("top_p", f.TopP, &p.TopP),
		set("min_p", f.MinP, &p.MinP),
		set("repetition_penalty", f.RepetitionPenalty, &p.RepetitionPenalty),
		set("frequency_penalty", f.FrequencyPenalty, &p.FrequencyPenalty),
		set("presence_penalty", f.PresencePenalty, &p.PresencePenalty),
	} {
		if e != nil {
			return p, e
		}
	}
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed)
		p.Seed = &seed
	}
	if err := p.Validate(); err != nil {
		return p, badRequest("", err.Error())
	}
	return p, nil
}

// fillCommon applies the shared fields to req: sampling, stops, interval, grammar, n.
func (s *Server) fillCommon(req *Request, f *samplingFields) error {
	var err error
	if req.Sampling, err = applySampling(s.cfg.DefaultSampling, f); err != nil {
		return err
	}
	if f.N != nil && (*f.N < 1 || *f.N > MaxChoices) {
		return badRequest("n", fmt.Sprintf("must be in [1, %d], got %d", MaxChoices, *f.N))
	}
	if err := s.fillGenerationExtras(req, f); err != nil {
		return err
	}
	if req.StopStrings, err = parseStop(f.Stop); err != nil {
		return err
	}
	if len(req.StopStrings) > 0 {
		if err := s.needTokenizer("stop strings"); err != nil {
			return err
		}
	}
	req.StopTokenIDs = f.StopTokenIDs
	req.IgnoreEOS = f.IgnoreEOS
	if f.MinTokens != nil {
		if *f.MinTokens < 0 {
			return badRequest("min_tokens", "must be >= 0")
		}
		req.MinNewTokens = *f.MinTokens
	}
	req.SkipSpecialTokens = true
	if f.SkipSpecialTokens != nil {
		req.SkipSpecialTokens = *f.SkipSpecialTokens
	}
	req.StreamInterval = s.cfg.StreamInterval
	if f.StreamInterval != nil {
		if *f.StreamInterval < 1 {
			return badRequest("stream_interval", fmt.Sprintf("must be an integer >= 1, got %d", *f.StreamInterval))
		}
		req.StreamInterval = *f.StreamInterval
	}
	req.RoutedRank = -1
	if f.RoutedDPRank != nil {
		if *f.RoutedDPRank < 0 {
			return badRequest("routed_dp_rank", "must be >= 0")
		}
		req.RoutedRank = *f.RoutedDPRank
	}
	return s.fillConstraint(req, f)
}

// fillGrammar sets the structured-output constraint from response_format or the SGLang fields.
func (s *Server) fillGrammar(req *Request, rf *responseFormat, regex, schema *string) error {
	n := 0
	if rf != nil && rf.Type != "" && rf.Type != "text" {
		n++
		switch rf.Type {
		case "json_object":
			req.GrammarKind = GrammarJSONObject
		case "json_schema":
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
				return badRequest("response_format.json_schema.schema", "is required for type json_schema")
			}
			req.GrammarKind, req.GrammarSpec = GrammarJSONSchema, string(rf.JSONSchema.Schema)
		default:
			return badRequest("response_format.type", fmt.Sprintf("unsupported type %q (text, json_object, json_schema)", rf.Type))
		}
	}
	if regex != nil {
		n++
		req.GrammarKind, req.GrammarSpec = GrammarRegex, *regex
	}
	if schema != nil {
		n++
		req.GrammarKind, req.GrammarSpec = GrammarJSONSchema, *schema
	}
	if n > 1 {
		return badRequest("response_format", "give at most one of response_format, regex and json_schema")
	}
	if req.GrammarKind == GrammarNone {
		return nil
	}
	if err := s.needTokenizer("structured output (response_format / json_schema / regex)"); err != nil {
		return err
	}
	if err := s.engine.CheckGrammar(req.GrammarKind, req.GrammarSpec); err != nil {
		return badRequest("response_format", "invalid constraint: "+err.Error())
	}
	return nil
}

// checkLength applies the context limit: prompt + max new tokens must fit.
func (s *Server) checkLength(req *Request, maxTokens *int, param string, dflt int) error {
	n := len(req.InputIDs)
	if n == 0 {
		return badRequest("prompt", "is empty")
	}
	if n >= s.cfg.ContextLength {
		return badRequest("prompt", fmt.Sprintf("prompt has %d tokens; the context length is %d", n, s.cfg.ContextLength))
	}
	if maxTokens == nil {
		req.MaxNewTokens = min(dflt, s.cfg.ContextLength-n)
		if dflt <= 0 {
			req.MaxNewTokens = s.cfg.ContextLength - n
		}
		return nil
	}
	if *maxTokens < 1 {
		return badRequest(param, fmt.Sprintf("must be >= 1, got %d", *maxTokens))
	}
	if n+*maxTokens > s.cfg.ContextLength {
		return badRequest(param, fmt.Sprintf("prompt (%d tokens) + %s (%d) exceeds the context length (%d)", n, param, *maxTokens, s.cfg.ContextLength))
	}
	req.MaxNewTokens = *maxTokens
	if req.MinNewTokens > req.MaxNewTokens {
		return badRequest("min_tokens", "must not exceed the maximum number of new tokens")
	}
	return nil
}

// parsePrompts reads an OpenAI prompt: a string, an array of token ids, or a batch (an array of
// strings or of token-id arrays), one entry per prompt.
func (s *Server) parsePrompts(raw json.RawMessage) ([][]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		ids, err := s.encode(text)
		return [][]int32{ids}, err
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return [][]int32{ids}, s.checkIDs(ids)
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil {
		if len(texts) == 0 {
			return nil, badRequest("prompt", "is an empty batch")
		}
		out := make([][]int32, len(texts))
		for i, t := range texts {
			if out[i], err = s.encode(t); err != nil {
				return nil, err
			}
		}
		return out, s.checkBatch(len(out))
	}
	var batch [][]int32
	if err := json.Unmarshal(raw, &batch); err == nil {
		if len(batch) == 0 {
			return nil, badRequest("prompt", "is an empty batch")
		}
		for i, ids := range batch {
			if err := s.checkIDs(ids); err != nil {
				return nil, badRequest(fmt.Sprintf("prompt[%d]", i), err.(*BadRequestError).Msg)
			}
		}
		return batch, s.checkBatch(len(batch))
	}
	return nil, badRequest("prompt", "must be a string, an array of token ids, or an array of either")
}

func (s *Server) encode(text string) ([]int32, error) {
	if err := s.needTokenizer("a text prompt"); err != nil {
		return nil, err
	}
	return s.engine.Tokenizer().Encode(text, true), nil
}

func (s *Server) checkIDs(ids []int32) error {
	vocab := -1
	if tok := s.engine.Tokenizer(); tok != nil {
		vocab = tok.VocabSize()
	}
	for _, id := range ids {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return badRequest("input_ids", fmt.Sprintf("token id %d is out of range", id))
		}
	}
	return nil
}
