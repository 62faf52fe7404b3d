package grammar

import (
	"context"
	"fmt"
)

// Kind says how a Spec's text is read.
type Kind uint8

// Grammar kinds. The API carries this type (api.GrammarKind); the wire has its own
// (ipc.GrammarKind), which the worker and the rank convert to and from by name, and a test
// pins the mapping.
const (
	KindNone       Kind = iota // unconstrained; nothing to compile
	KindJSONSchema             // Text is a JSON Schema document
	KindJSONObject             // any JSON object; Text is empty
	KindRegex                  // Text is a regular expression
	KindCompose                // Text is the JSON of a Part (compose.go): tool calls, reasoning
	KindGBNF                   // Text is a grammar in llama.cpp's GBNF syntax (gbnf.go)
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindJSONSchema:
		return "json_schema"
	case KindJSONObject:
		return "json_object"
	case KindRegex:
		return "regex"
	case KindCompose:
		return "compose"
	case KindGBNF:
		return "gbnf"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Spec is one structured-output constraint as a request states it.
type Spec struct {
	Kind Kind
	Text string
}

// Compile compiles s (cached, like the kind's own method). It returns when the compile ends or
// ctx does, whichever is first: a caller bounds its wait with a deadline. A compile that ctx
// abandons runs on to its end (compiles are bounded by Limits) and its result is cached for
// the next request with the same spec.
func (c *Compiler) Compile(ctx context.Context, s Spec) (*Grammar, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("grammar compile not started: %w", err)
	}
	type result struct {
		g   *Grammar
		err error
	}
	done := make(chan result, 1) // buffered: an abandoned compile does not block
	go func() {
		g, err := c.compileSpec(s)
		done <- result{g, err}
	}()
	select {
	case r := <-done:
		return r.g, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("grammar compile abandoned: %w", context.Cause(ctx))
	}
}

func (c *Compiler) compileSpec(s Spec) (*Grammar, error) {
	switch s.Kind {
	case KindJSONSchema:
		return c.JSONSchema(s.Text)
	case KindJSONObject:
		return c.JSONObject()
	case KindRegex:
		return c.Regex(s.Text)
	case KindCompose:
		return c.Compose(s.Text)
	case KindGBNF:
		return c.GBNF(s.Text)
	}
	return nil, fmt.Errorf("compile: unknown grammar kind %v", s.Kind)
}
