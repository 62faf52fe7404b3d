package api

import "github.com/llmserve/llmserve/grammar"

// checkSpec is the constraint that checks t's parameters up front, compiled as its calls will
// be: the schema alone under the server's strictness, or, for a strict function on a permissive
// server, a composition of the schema part with Strict set.
func (t tool) checkSpec(serverStrict bool) (GrammarKind, string, error) {
	if t.strict == nil || *t.strict == serverStrict {
		return GrammarJSONSchema, string(t.params), nil
	}
	spec, err := grammar.ComposeSpec(grammar.Part{Schema: t.params, Strict: t.strict})
	if err != nil {
		return GrammarNone, "", err
	}
	return GrammarCompose, spec.Text, nil
}
