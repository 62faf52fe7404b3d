package api

// The request-field policy (README, "Request fields"): a field that changes what is generated and
// is not supported is a 400 naming it (the JSON decoder refuses unknown fields); a field that
// changes nothing here (metadata, caching and routing hints, client telemetry) is accepted, and
// the response names it in the X-LLMServe-Ignored-Fields header, with a warning log line. vLLM's
// and SGLang's structured-output fields are aliases of response_format.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// IgnoredFieldsHeader names, comma-separated, the request fields that were accepted and ignored.
const IgnoredFieldsHeader = "X-LLMServe-Ignored-Fields"

// ignoredFields are the fields accepted by the OpenAI endpoints that change nothing this engine
// generates. Each is kept raw: only its presence matters.
type ignoredFields struct {
	User                 json.RawMessage `json:"user"`                   // end-user id for abuse tracking
	Metadata             json.RawMessage `json:"metadata"`               // tags for stored completions
	Store                json.RawMessage `json:"store"`                  // store for distillation: nothing is stored
	ServiceTier          json.RawMessage `json:"service_tier"`           // OpenAI's processing tier
	RequestID            json.RawMessage `json:"request_id"`             // vLLM's client request id (ours is the response id)
	Priority             json.RawMessage `json:"priority"`               // vLLM's priority scheduling: queue order is arrival
	PromptCacheKey       json.RawMessage `json:"prompt_cache_key"`       // cache routing hint: prefix reuse is automatic
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"` // cache lifetime hint
	SafetyIdentifier     json.RawMessage `json:"safety_identifier"`      // end-user id for abuse tracking
}

// names lists the fields present (a JSON null counts as absent), in declaration order.
func (f *ignoredFields) names() []string {
	var out []string
	v := reflect.ValueOf(f).Elem()
	for i := range v.NumField() {
		raw := v.Field(i).Interface().(json.RawMessage)
		if len(raw) > 0 && string(raw) != "null" {
			out = append(out, strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0])
		}
	}
	return out
}

// ignoredNamer is a request body that can list the ignored fields it carries.
type ignoredNamer interface{ ignoredNames() []string }

// ignoredNames lists stream_options' ignored fields.
func (o *streamOptions) ignoredNames() []string {
	if o == nil || len(o.IncludeObfuscation) == 0 || string(o.IncludeObfuscation) == "null" {
		return nil
	}
	// Obfuscation pads chunks against length side channels; these chunks carry no padding.
	return []string{"stream_options.include_obfuscation"}
}

// ignoredNames lists the sampling block's ignored fields.
func (f *samplingFields) ignoredNames() []string {
	out := f.ignoredFields.names()
	if f.SpacesBetweenSpecialTokens != nil && *f.SpacesBetweenSpecialTokens {
		// Like Hugging Face fast tokenizers, the decoder never inserts spaces around special
		// tokens: true (vLLM's default) changes nothing, false is what happens anyway.
		out = append(out, "spaces_between_special_tokens")
	}
	if rf := f.ResponseFormat; rf != nil && rf.JSONSchema != nil {
		// The schema's label, and a description the engine never shows the model.
		if rf.JSONSchema.Name != "" {
			out = append(out, "response_format.json_schema.name")
		}
		if rf.JSONSchema.Description != "" {
			out = append(out, "response_format.json_schema.description")
		}
	}
	return out
}

func (b *completionRequest) ignoredNames() []string {
	return append(b.samplingFields.ignoredNames(), b.StreamOptions.ignoredNames()...)
}

func (b *chatRequest) ignoredNames() []string {
	return append(b.samplingFields.ignoredNames(), b.StreamOptions.ignoredNames()...)
}

func (b *generateRequest) ignoredNames() []string {
	var out []string
	if sp := b.SamplingParams; sp != nil && sp.SpacesBetweenSpecialTokens != nil && *sp.SpacesBetweenSpecialTokens {
		out = append(out, "sampling_params.spaces_between_special_tokens")
	}
	if len(b.Priority) > 0 && string(b.Priority) != "null" {
		out = append(out, "priority") // under fcfs (reportIgnored drops it under priority)
	}
	return out
}

// reportIgnored names body's ignored fields in the response header and the log.
func (s *Server) reportIgnored(w http.ResponseWriter, endpoint string, body any) {
	b, ok := body.(ignoredNamer)
	if !ok {
		return
	}
	names := b.ignoredNames()
	if s.cfg.SchedulingPolicy == "priority" {
		names = slices.DeleteFunc(names, func(n string) bool { return n == "priority" }) // it orders the queue
	}
	if c, ok := body.(*chatRequest); ok && c.ReasoningEffort != nil && !s.templateNames("reasoning_effort") {
		names = append(names, "reasoning_effort") // a template that never names it cannot read it
	}
	if len(names) == 0 {
		return
	}
	w.Header().Set(IgnoredFieldsHeader, strings.Join(names, ","))
	s.log.Warn("request fields accepted and ignored: they change nothing this engine generates",
		"endpoint", endpoint, "fields", names, "request_id", w.Header().Get(requestIDHeader))
}

// templateNames reports whether the chat template's text mentions name (a variable it may read).
func (s *Server) templateNames(name string) bool {
	tok := s.engine.Tokenizer()
	return tok != nil && strings.Contains(tok.ChatTemplate(), name)
}

// structuredOutputs is vLLM's structured_outputs object (the successor of its guided_* fields).
// Its other members (structural_tag, ...) are unknown fields: a 400 naming them.
type structuredOutputs struct {
	JSON       json.RawMessage `json:"json"`        // a JSON Schema, as an object or a string
	Regex      *string         `json:"regex"`       // a regular expression
	Choice     []string        `json:"choice"`      // one of these strings exactly
	JSONObject *bool           `json:"json_object"` // any JSON object
	Grammar    *string         `json:"grammar"`     // a grammar in GBNF syntax
}

// constraint is one structured-output constraint a request stated, with the field that stated it.
type constraint struct {
	field string
	rf    *responseFormat // set for response_format and the JSON-object forms
	regex *string
	json  *string
	gbnf  *string
}

// constraints lists every structured-output constraint f states, response_format's and its
// aliases': vLLM's guided_json / guided_regex / guided_choice / guided_grammar /
// structured_outputs and SGLang's json_schema / regex / ebnf (and /generate's grammar).
func (f *samplingFields) constraints() ([]constraint, error) {
	var out []constraint
	if err := f.ResponseFormat.structuralTagOnly(); err != nil {
		return nil, err
	}
	if rf := f.ResponseFormat; rf != nil && rf.Type != "" && rf.Type != "text" {
		out = append(out, constraint{field: "response_format", rf: rf})
	}
	if f.Regex != nil {
		out = append(out, constraint{field: "regex", regex: f.Regex})
	}
	if f.JSONSchema != nil {
		out = append(out, constraint{field: "json_schema", json: f.JSONSchema})
	}
	if f.EBNF != nil {
		out = append(out, constraint{field: "ebnf", gbnf: f.EBNF})
	}
	if f.Grammar != nil {
		out = append(out, constraint{field: "grammar", gbnf: f.Grammar})
	}
	addJSON := func(field string, raw json.RawMessage) error {
		if len(raw) == 0 || string(raw) == "null" {
			return nil
		}
		text, err := schemaText(raw)
		if err != nil {
			return badRequest(field, err.Error())
		}
		out = append(out, constraint{field: field, json: &text})
		return nil
	}
	addChoice := func(field string, choices []string) error {
		if choices == nil {
			return nil
		}
		if len(choices) == 0 {
			return badRequest(field, "must list at least one string")
		}
		re := choiceRegex(choices)
		out = append(out, constraint{field: field, regex: &re})
		return nil
	}
	if err := addJSON("guided_json", f.GuidedJSON); err != nil {
		return nil, err
	}
	if f.GuidedRegex != nil {
		out = append(out, constraint{field: "guided_regex", regex: f.GuidedRegex})
	}
	if err := addChoice("guided_choice", f.GuidedChoice); err != nil {
		return nil, err
	}
	if f.GuidedGrammar != nil {
		out = append(out, constraint{field: "guided_grammar", gbnf: f.GuidedGrammar})
	}
	if so := f.StructuredOutputs; so != nil {
		if err := addJSON("structured_outputs.json", so.JSON); err != nil {
			return nil, err
		}
		if so.Regex != nil {
			out = append(out, constraint{field: "structured_outputs.regex", regex: so.Regex})
		}
		if err := addChoice("structured_outputs.choice", so.Choice); err != nil {
			return nil, err
		}
		if so.Grammar != nil {
			out = append(out, constraint{field: "structured_outputs.grammar", gbnf: so.Grammar})
		}
		if so.JSONObject != nil && *so.JSONObject {
			out = append(out, constraint{field: "structured_outputs.json_object", rf: &responseFormat{Type: "json_object"}})
		}
	}
	return out, nil
}

// schemaText reads a schema given as a JSON object or as a string holding one.
func schemaText(raw json.RawMessage) (string, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	if raw[0] != '{' && string(raw) != "true" && string(raw) != "false" {
		return "", fmt.Errorf("must be a JSON Schema (an object, or a string holding one)")
	}
	return string(raw), nil
}

// choiceRegex is a regular expression matching exactly one of choices: their alternation, each
// escaped so it matches literally.
func choiceRegex(choices []string) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, c := range choices {
		if i > 0 {
			b.WriteByte('|')
		}
		for _, r := range c {
			switch {
			case r < 0x20 || r == 0x7f:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r < 0x80 && !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == ' '):
				// Punctuation escaped with a backslash is always literal.
				b.WriteByte('\\')
				b.WriteRune(r)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte(')')
	return b.String()
}

// fillConstraint sets req's structured-output constraint from whichever of f's fields states
// one (at most one may), honouring a per-request json_schema.strict.
func (s *Server) fillConstraint(req *Request, f *samplingFields) error {
	cs, err := f.constraints()
	if err != nil {
		return err
	}
	if len(cs) > 1 {
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = c.field
		}
		return badRequest(names[0], "give at most one structured-output constraint, got "+strings.Join(names, ", "))
	}
	if len(cs) == 0 {
		return nil
	}
	c := cs[0]
	if rf := c.rf; rf != nil && rf.Type == "json_schema" && rf.JSONSchema != nil && rf.JSONSchema.Strict != nil &&
		*rf.JSONSchema.Strict != s.cfg.GrammarStrict && len(rf.JSONSchema.Schema) > 0 {
		schema, err := rewriteStrict(rf.JSONSchema.Schema, *rf.JSONSchema.Strict)
		if err != nil {
			return badRequest("response_format.json_schema.schema", err.Error())
		}
		js := *rf.JSONSchema
		js.Schema = schema
		c.rf = &responseFormat{Type: rf.Type, JSONSchema: &js}
	}
	if err := s.fillGrammar(req, c.rf, c.regex, c.json, c.gbnf); err != nil {
		var bre *BadRequestError
		if c.rf == nil && errors.As(err, &bre) && bre.Param == "response_format" {
			bre.Param = c.field // name the field the client used
		}
		return err
	}
	return nil
}
