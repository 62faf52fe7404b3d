package api

import (
	"encoding/json"

	"github.com/llmserve/llmserve/toolparse"
)

// chatOutput reads a chat completion's text as it streams in and splits it into reasoning,
// content and tool calls through the syntax's toolparse parser. The same reader serves
// streamed and non-streamed responses (the latter feed the whole text at once), so streamed
// fragments concatenate to the non-streamed fields.
type chatOutput struct {
	reasoning string            // reasoning parser: "" (none), ReasoningQwen3 or ReasoningDeepSeekR1
	syntax    string            // the toolparse parser's name
	opts      toolparse.Options // its options, for fresh
	p         toolparse.Parser
	// ev is what the feeds since the last take produced; last is what the latest streamed
	// delta produced (readChunk), for its chunk
	ev, last toolparse.Events
}

// parserName is the toolparse parser of a tool syntax (the fallback writes Hermes calls).
func parserName(syntax string) string {
	if syntax == ToolSyntaxFallback || syntax == "" {
		return ToolSyntaxHermes
	}
	return syntax
}

func newChatOutput(reasoning string, tr *toolRequest) *chatOutput {
	o := &chatOutput{reasoning: reasoning, syntax: ToolSyntaxHermes, opts: toolparse.Options{Reasoning: reasoning, Tools: tr.active()}}
	if tr != nil {
		o.syntax = parserName(tr.syntax)
		if o.opts.Tools {
			o.opts.ParamTypes = paramTypes(tr.tools)
		}
	}
	return o.fresh()
}

// fresh is a new parser of the same kind, for another choice of the same request.
func (o *chatOutput) fresh() *chatOutput {
	n := &chatOutput{reasoning: o.reasoning, syntax: o.syntax, opts: o.opts}
	p, err := toolparse.New(n.syntax, n.opts)
	if err != nil { // the flag was checked at startup
		p, _ = toolparse.New(ToolSyntaxHermes, n.opts)
	}
	n.p = p
	return n
}

// paramTypes are the declared types of the tools' top-level parameters.
func paramTypes(tools []tool) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, t := range tools {
		var s struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.params, &s) != nil {
			continue
		}
		m := map[string]string{}
		for k, p := range s.Properties {
			if ty, ok := p.Type.(string); ok {
				m[k] = ty
			}
		}
		out[t.name] = m
	}
	return out
}

// feed reads more text.
func (o *chatOutput) feed(text string) { o.ev.Append(o.p.Feed(text)) }

// finish reads the end of the output: held-back text goes out as what it was.
func (o *chatOutput) finish() { o.ev.Append(o.p.Finish()) }

// take returns what the text fed since the last take produced, and clears it.
func (o *chatOutput) take() toolparse.Events {
	ev := o.ev
	o.ev = toolparse.Events{}
	return ev
}

// all is everything read so far.
func (o *chatOutput) all() toolparse.Events { return o.p.All() }

// calls are the calls read so far.
func (o *chatOutput) calls() []toolparse.Call { return o.p.Calls() }

// hasCalls reports whether any call was opened.
func (o *chatOutput) hasCalls() bool { return len(o.p.Calls()) > 0 }
