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
// ctx does, whichever is first, and ctx's end also stops the compile's work: the builder polls
// it and allocates nothing more once it has ended, so the caller's deadline bounds both its
// wait and the CPU and memory spent. A compile stopped this way is not cached.
func (c *Compiler) Compile(ctx context.Context, s Spec) (*Grammar, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("grammar compile not started: %w", err)
	}
	type result struct {
		g   *Grammar
		err error
	}
	done := make(chan result, 1) // buffered: a compile stopping after its caller left does not block
	go func() {
		g, err := c.compileSpec(ctx, s)
		done <- result{g, err}
	}()
	select {
	case r := <-done:
		return r.g, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("grammar compile abandoned: %w", context.Cause(ctx))
	}
}

// CompileWait is Compile, but it returns only once the compile's work has stopped (finished, or
// stopped by ctx): a caller that holds a compile slot frees it when the CPU is free again.
func (c *Compiler) CompileWait(ctx context.Context, s Spec) (*Grammar, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("grammar compile not started: %w", err)
	}
	g, err := c.compileSpec(ctx, s)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("grammar compile abandoned: %w", context.Cause(ctx))
	}
	return g, err
}

func (c *Compiler) compileSpec(ctx context.Context, s Spec) (*Grammar, error) {
	switch s.Kind {
	case KindJSONSchema:
		return c.jsonSchema(ctx, s.Text, c.opts.Strict)
	case KindJSONObject:
		return c.jsonObject(ctx)
	case KindRegex:
		return c.regex(ctx, s.Text)
	case KindCompose:
		return c.compose(ctx, s.Text)
	case KindGBNF:
		return c.gbnf(ctx, s.Text)
	}
	return nil, fmt.Errorf("compile: unknown grammar kind %v", s.Kind)
}
