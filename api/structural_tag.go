package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/llmserve/llmserve/grammar"
)

// structuralTagFields are response_format's keys for type structural_tag, in either shape the
// grammar package reads (grammar.StructuralTag): vLLM's and SGLang's structures and triggers,
// or the newer format tree.
type structuralTagFields struct {
	// Structures is [{begin, schema, end}], with Triggers.
	Structures json.RawMessage `json:"structures,omitempty"`
	// Triggers are the texts that start a structure.
	Triggers json.RawMessage `json:"triggers,omitempty"`
	// Format is the newer shape's tree of formats.
	Format json.RawMessage `json:"format,omitempty"`
}

// structuralTagSpec compiles nothing: it turns a structural_tag response_format into the
// composition the rank constrains with (free text, tagged regions valid against their schemas).
func structuralTagSpec(f structuralTagFields) (string, error) {
	raw, err := json.Marshal(f)
	if err != nil {
		return "", badRequest("response_format", "structural_tag: "+err.Error())
	}
	p, err := grammar.StructuralTag(raw)
	if err != nil {
		return "", badRequest("response_format", err.Error())
	}
	spec, err := grammar.ComposeSpec(p)
	if err != nil {
		return "", badRequest("response_format", err.Error())
	}
	return spec.Text, nil
}

// compileDeadline is the one deadline of all req's grammar compiles (the response_format
// constraint, each tool's parameters, the composition after a reasoning block), set on first
// use: a request cannot get a fresh requestCompileBudget per compile.
func (req *Request) compileDeadline() time.Time {
	if req.compileBy.IsZero() {
		req.compileBy = time.Now().Add(requestCompileBudget)
	}
	return req.compileBy
}

// structuralTagOnly refuses structural-tag keys on a response_format of another type, where
// they would silently constrain nothing.
func (rf *responseFormat) structuralTagOnly() error {
	if rf == nil || rf.Type == "structural_tag" {
		return nil
	}
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"structures", rf.Structures}, {"triggers", rf.Triggers}, {"format", rf.Format}} {
		if f.v != nil {
			return badRequest("response_format."+f.name, fmt.Sprintf("is read only with type structural_tag, not %q", rf.Type))
		}
	}
	return nil
}
