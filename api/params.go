package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/llmserve/llmserve/sampling"
)

// samplingCore are the sampling and stopping fields that the OpenAI bodies and /generate's
// sampling_params spell alike. Pointers tell "absent" from zero.
type samplingCore struct {
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	Seed              *int64          `json:"seed"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	SkipSpecialTokens *bool           `json:"skip_special_tokens"`
	StreamInterval    *int            `json:"stream_interval"`
	N                 *int            `json:"n"`
	Regex             *string         `json:"regex"`
	JSONSchema        *string         `json:"json_schema"`
	// EBNF is SGLang's name for a grammar in GBNF syntax.
	EBNF *string `json:"ebnf"`
	// SpacesBetweenSpecialTokens is vLLM's; see ignoredNames.
	SpacesBetweenSpecialTokens *bool `json:"spaces_between_special_tokens"`
}

// samplingFields are the sampling and stopping fields shared by the OpenAI endpoints, with the
// SGLang/vLLM extensions.
type samplingFields struct {
	samplingCore
	MinTokens *int `json:"min_tokens"`
	// Grammar is /generate's plain name for a GBNF grammar (set from sampling_params.grammar,
	// never read from an OpenAI body).
	Grammar        *string            `json:"-"`
	ResponseFormat *responseFormat    `json:"response_format"`
	ReturnTokenIDs bool               `json:"return_token_ids"`
	RoutedDPRank   *int               `json:"routed_dp_rank"`
	LogitBias      map[string]float64 `json:"logit_bias"`
	// Aliases of response_format (policy.go): vLLM's guided decoding and structured outputs.
	GuidedJSON        json.RawMessage    `json:"guided_json"`
	GuidedRegex       *string            `json:"guided_regex"`
	GuidedChoice      []string           `json:"guided_choice"`
	GuidedGrammar     *string            `json:"guided_grammar"`
	StructuredOutputs *structuredOutputs `json:"structured_outputs"`
	// vLLM's: the stop string that ended the output stays in its text; keep only the prompt's
	// last k tokens (-1: as many as the context holds).
	IncludeStopStrInOutput bool `json:"include_stop_str_in_output"`
	TruncatePromptTokens   *int `json:"truncate_prompt_tokens"`
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
	structuralTagFields
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

// finite converts a JSON number to the float32 the engine computes with, refusing what float32
// cannot hold (it would become +-Inf, not the number sent).
func finite(name string, v *float64) (float32, error) {
	if math.IsNaN(*v) || math.IsInf(*v, 0) || math.Abs(*v) > math.MaxFloat32 {
		return 0, badRequest(name, fmt.Sprintf("must be a finite number of magnitude at most %g", math.MaxFloat32))
	}
	return float32(*v), nil
}

// maxTemperature is the largest temperature whose reciprocal, which scales the logits, is a
// normal float32 (2^126): above it the scale underflows and the logits lose their meaning.
const maxTemperature = 0x1p126

// maxInt32 bounds the integer fields that travel to the ranks as int32.
const maxInt32 = math.MaxInt32

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
	if f.Temperature != nil && *f.Temperature > maxTemperature {
		return p, badRequest("temperature", fmt.Sprintf("must be at most %g (the sampler divides logits by it in float32), got %g", maxTemperature, *f.Temperature))
	}
	if f.TopK != nil {
		if *f.TopK > maxInt32 {
			return p, badRequest("top_k", fmt.Sprintf("must be -1, 0 (disabled) or in [1, %d], got %d", maxInt32, *f.TopK))
		}
		p.TopK = *f.TopK
	}
	if f.Seed != nil {
		if *f.Seed < 0 {
			return p, badRequest("seed", fmt.Sprintf("must be >= 0, got %d", *f.Seed))
		}
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
	prio, err := parsePriority(f.Priority)
	if err != nil {
		return err
	}
	if s.cfg.SchedulingPolicy == "priority" {
		req.Priority = prio // under fcfs it is checked, then named ignored
	}
	if req.StopStrings, err = parseStop(f.Stop); err != nil {
		return err
	}
	if len(req.StopStrings) > 0 {
		if err := s.needTokenizer("stop strings"); err != nil {
			return err
		}
	}
	if err := s.checkIDRange(f.StopTokenIDs, "stop_token_ids"); err != nil {
		return err
	}
	req.StopTokenIDs = f.StopTokenIDs
	req.IgnoreEOS = f.IgnoreEOS
	if f.MinTokens != nil {
		if *f.MinTokens < 0 {
			return badRequest("min_tokens", "must be >= 0")
		}
		req.MinNewTokens = *f.MinTokens // at most the maximum new tokens: checkLength
	}
	req.SkipSpecialTokens = true
	if f.SkipSpecialTokens != nil {
		req.SkipSpecialTokens = *f.SkipSpecialTokens
	}
	req.StreamInterval = s.cfg.StreamInterval
	if f.StreamInterval != nil {
		if *f.StreamInterval < 1 || *f.StreamInterval > maxInt32 {
			return badRequest("stream_interval", fmt.Sprintf("must be an integer in [1, %d], got %d", maxInt32, *f.StreamInterval))
		}
		req.StreamInterval = *f.StreamInterval
	}
	req.RoutedRank = -1
	if f.RoutedDPRank != nil {
		if *f.RoutedDPRank < 0 || *f.RoutedDPRank > maxInt32 {
			return badRequest("routed_dp_rank", fmt.Sprintf("must be a rank in [0, dp size), got %d", *f.RoutedDPRank))
		}
		req.RoutedRank = *f.RoutedDPRank
	}
	return s.fillConstraint(req, f)
}

// fillGrammar sets the structured-output constraint from response_format or the SGLang fields.
func (s *Server) fillGrammar(req *Request, rf *responseFormat, regex, schema, gbnf *string) error {
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
		case "structural_tag":
			spec, err := structuralTagSpec(rf.structuralTagFields)
			if err != nil {
				return err
			}
			req.GrammarKind, req.GrammarSpec = GrammarCompose, spec
		default:
			return badRequest("response_format.type", fmt.Sprintf("unsupported type %q (text, json_object, json_schema, structural_tag)", rf.Type))
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
	if gbnf != nil {
		n++
		req.GrammarKind, req.GrammarSpec = GrammarGBNF, *gbnf
	}
	if n > 1 {
		return badRequest("response_format", "give at most one of response_format, regex, json_schema and ebnf")
	}
	if req.GrammarKind == GrammarNone {
		return nil
	}
	if err := s.needTokenizer("structured output (response_format / json_schema / regex / ebnf)"); err != nil {
		return err
	}
	if err := s.checkGrammarBy(req.compileDeadline(), req.GrammarKind, req.GrammarSpec); err != nil {
		if errors.Is(err, ErrOverloaded) { // no compile slot in time: the engine's state, a 503
			return err
		}
		return refuseGrammar("response_format", "invalid constraint: "+err.Error())
	}
	return nil
}

// checkLength applies the context limit: prompt + max new tokens must fit, and min new tokens
// must not exceed the max.
func (s *Server) checkLength(req *Request, maxTokens *int, param string, dflt int) error {
	n := len(req.InputIDs)
	if n == 0 {
		return badRequest("prompt", "is empty")
	}
	limit, kv := s.maxModelLen()
	if n >= limit {
		return badRequest("prompt", fmt.Sprintf("prompt has %d tokens; the limit is %s", n, lengthLimit(limit, kv)))
	}
	room := limit - n
	switch {
	case maxTokens == nil && dflt <= 0:
		req.MaxNewTokens = room
	case maxTokens == nil:
		req.MaxNewTokens = min(dflt, room)
	case *maxTokens < 1:
		return badRequest(param, fmt.Sprintf("must be >= 1, got %d", *maxTokens))
	case *maxTokens > room: // not n+*maxTokens, which overflows
		return badRequest(param, fmt.Sprintf("prompt (%d tokens) + %s (%d) exceeds %s", n, param, *maxTokens, lengthLimit(limit, kv)))
	default:
		req.MaxNewTokens = *maxTokens
	}
	if req.MinNewTokens > req.MaxNewTokens {
		return badRequest("min_tokens", fmt.Sprintf("%d exceeds the maximum number of new tokens (%d)", req.MinNewTokens, req.MaxNewTokens))
	}
	return nil
}

// parsePrompts reads an OpenAI prompt: a string, an array of token ids, or a batch (an array of
// strings or of token-id arrays), one entry per prompt. Token ids are counted as they are read,
// so an over-long prompt is refused before it is all parsed.
func (s *Server) parsePrompts(raw json.RawMessage) ([][]int32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		ids, err := s.encode(text, "prompt")
		return [][]int32{ids}, err
	}
	if raw[0] != '[' {
		return nil, badRequest("prompt", "must be a string, an array of token ids, or an array of either")
	}
	rest := bytes.TrimSpace(raw[1:])
	switch {
	case len(rest) > 0 && rest[0] == ']':
		return nil, badRequest("prompt", "is an empty batch")
	case len(rest) > 0 && rest[0] == '"':
		var texts []string
		if err := json.Unmarshal(raw, &texts); err != nil {
			return nil, badRequest("prompt", "must be a string, an array of token ids, or an array of either")
		}
		return batchPrompts(s, texts, "prompt", s.encode) // the batch size is checked before any prompt is tokenized
	case len(rest) > 0 && rest[0] == '[':
		var lists []json.RawMessage
		if err := json.Unmarshal(raw, &lists); err != nil {
			return nil, badRequest("prompt", "must be a string, an array of token ids, or an array of either")
		}
		return batchPrompts(s, lists, "prompt", s.promptIDs)
	}
	ids, err := s.promptIDs(raw, "prompt")
	return [][]int32{ids}, err
}

// promptIDs reads a prompt given as token ids, refusing it as soon as it has more ids than the
// context holds, and checks each against the vocabulary.
func (s *Server) promptIDs(raw json.RawMessage, param string) ([]int32, error) {
	ids, err := parseTokenIDs(raw, param, s.cfg.ContextLength-1)
	if err != nil {
		var bre *BadRequestError
		if errors.As(err, &bre) && strings.HasPrefix(bre.Msg, "more than") {
			bre.Msg += fmt.Sprintf("; the context length is %d", s.cfg.ContextLength)
		}
		return nil, err
	}
	return ids, s.checkIDs(ids)
}

// promptSlack allows for normalizers that shrink text before it is split into tokens.
const promptSlack = 4

// encode tokenizes a text prompt, refusing at once a text too long to fit in the context
// whatever its tokens (each token covers at most maxTokenBytes bytes of text).
func (s *Server) encode(text, param string) ([]int32, error) {
	if err := s.needTokenizer("a text prompt"); err != nil {
		return nil, err
	}
	if err := s.checkTextFits(len(text), param); err != nil {
		return nil, err
	}
	return s.engine.Tokenizer().Encode(text, true), nil
}

// checkTextFits refuses a text of n bytes that cannot fit in the context as tokens.
func (s *Server) checkTextFits(n int, param string) error {
	if s.maxTokenBytes > 0 && n/promptSlack/s.maxTokenBytes >= s.cfg.ContextLength {
		return badRequest(param, fmt.Sprintf("text of %d bytes cannot fit in the context length (%d tokens)", n, s.cfg.ContextLength))
	}
	return nil
}

func (s *Server) checkIDs(ids []int32) error { return s.checkIDRange(ids, "input_ids") }

// checkIDRange refuses ids outside the vocabulary.
func (s *Server) checkIDRange(ids []int32, param string) error {
	vocab := -1
	if tok := s.engine.Tokenizer(); tok != nil {
		vocab = tok.VocabSize()
	}
	for i, id := range ids {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return badRequest(param, fmt.Sprintf("token id %d (index %d) is out of range", id, i))
		}
	}
	return nil
}
