package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/toolparse"
)

// Reasoning parsers (--reasoning-parser): how a model's thinking block is marked.
const (
	// ReasoningQwen3: the output may open with <think> and the block ends at </think>; output
	// that does not open with <think> (enable_thinking false) is all content.
	ReasoningQwen3 = toolparse.ReasoningQwen3
	// ReasoningDeepSeekR1: the template opens the block in the prompt, so the output is
	// reasoning up to </think> (a leading <think> is dropped).
	ReasoningDeepSeekR1 = toolparse.ReasoningDeepSeekR1
)

// DetectReasoning picks the reasoning parser a chat template implies: DeepSeek-R1's when it
// writes its own role markers and </think>, or opens the block in the generation prompt itself
// (QwQ, Qwen3 thinking-only models: the output starts inside the block); Qwen3's when it writes
// <think> blocks in ChatML; "" when it has no thinking block (or it is ambiguous).
func DetectReasoning(template string) string {
	if !strings.Contains(template, "</think>") {
		return ""
	}
	switch {
	case strings.Contains(template, "<｜Assistant｜>"),
		strings.Contains(template, `assistant\n<think>`), strings.Contains(template, "assistant\n<think>"):
		return ReasoningDeepSeekR1
	case strings.Contains(template, "<|im_start|>") && strings.Contains(template, "<think>"):
		return ReasoningQwen3
	}
	return ""
}

// reasoningParser is the server's reasoning parser: the flag's ("none" turns it off), or the
// template's own.
func (s *Server) reasoningParser() string {
	switch p := s.cfg.ReasoningParser; p {
	case "none":
		return ""
	case "", "auto":
		if tok := s.engine.Tokenizer(); tok != nil {
			return DetectReasoning(tok.ChatTemplate())
		}
		return ""
	default:
		return p
	}
}

// thinkingOn reports whether this request's output opens with a reasoning block: the server
// reads reasoning and the request did not turn thinking off (chat_template_kwargs
// enable_thinking: false, which Qwen3's template answers with an empty block in the prompt).
func thinkingOn(parser string, kwargs map[string]any) bool {
	if parser == "" {
		return false
	}
	if v, ok := kwargs["enable_thinking"].(bool); ok && !v {
		return false
	}
	if v, ok := kwargs["thinking"].(bool); ok && !v {
		return false
	}
	return true
}

// reasoningPrefix is the grammar of the reasoning block a constrained output starts with: free
// text up to </think>, then the blank line the models write, after which the constraint holds.
func reasoningPrefix(parser string, budget int) []grammar.Part {
	var ps []grammar.Part
	if parser == ReasoningQwen3 {
		ps = append(ps, grammar.Literal("<think>"))
	}
	return append(ps, grammar.Part{Text: &grammar.FreeText{Without: "</think>", MaxChars: budget}}, grammar.Literal("</think>\n\n"))
}

// reasoningBudget validates max_reasoning_chars: the most characters a thinking block may have
// before the grammar closes it (0: unbounded).
func reasoningBudget(v *int, parser string) (int, error) {
	if v == nil {
		return 0, nil
	}
	if parser == "" {
		return 0, badRequest("max_reasoning_chars", "the server reads no reasoning block (--reasoning-parser)")
	}
	if *v < 1 || *v > grammar.MaxFreeTextChars {
		return 0, badRequest("max_reasoning_chars", fmt.Sprintf("must be 1 to %d, got %d", grammar.MaxFreeTextChars, *v))
	}
	return *v, nil
}

// composeOutputGrammar replaces req's constraint by the composition the request needs: tool
// calls (and free text before them for auto), or the response_format constraint, after the
// reasoning block when thinking is on. A reasoning budget (max_reasoning_chars) bounds the block
// by grammar, so it applies to unconstrained output too. It changes nothing when none applies.
func (s *Server) composeOutputGrammar(req *Request, tr *toolRequest, thinking bool, parser string, budget int) error {
	var base *grammar.Part
	_, writable := syntaxOf(tr.syntax)
	if tr.active() && !writable && tr.choice != "auto" {
		return badRequest("tool_choice", fmt.Sprintf("the %s tool-call syntax is read back from free output only: use tool_choice auto", tr.syntax))
	}
	// A syntax the grammar cannot write (qwen3_coder, harmony) adds no constraint: auto's output
	// is free, so a constraint the request states (regex, grammar, ...) shapes it as without
	// tools, and the parser reads the calls back from what it wrote.
	if tr.active() && writable {
		if req.GrammarKind != GrammarNone {
			return badRequest("tool_choice", "tools with tool_choice "+choiceName(tr)+" cannot be combined with response_format / json_schema / regex / grammar: use tool_choice none")
		}
		p := tr.grammar()
		base = &p
	} else if thinking && req.GrammarKind != GrammarNone {
		var p grammar.Part
		switch req.GrammarKind {
		case GrammarJSONSchema:
			p = grammar.SchemaPart(json.RawMessage(req.GrammarSpec))
		case GrammarJSONObject:
			p = grammar.SchemaPart(json.RawMessage(`{"type":"object"}`))
		case GrammarRegex:
			p = grammar.Part{Regex: req.GrammarSpec}
		case GrammarGBNF:
			p = grammar.Part{GBNF: req.GrammarSpec}
		case GrammarCompose:
			if err := json.Unmarshal([]byte(req.GrammarSpec), &p); err != nil {
				return fmt.Errorf("composed constraint: %w", err)
			}
		}
		base = &p
	} else if thinking && budget > 0 {
		base = &grammar.Part{Text: &grammar.FreeText{}}
	}
	if base == nil {
		return nil
	}
	whole := *base
	if thinking {
		whole = grammar.Sequence(append(reasoningPrefix(parser, budget), *base)...)
	}
	spec, err := grammar.ComposeSpec(whole)
	if err != nil {
		return err
	}
	req.GrammarKind, req.GrammarSpec = GrammarCompose, spec.Text
	if err := s.checkGrammarBy(req.compileDeadline(), req.GrammarKind, req.GrammarSpec); err != nil {
		if errors.Is(err, ErrOverloaded) { // no compile slot in time: the engine's state, a 503
			return err
		}
		return refuseGrammar("tools", "invalid constraint: "+err.Error())
	}
	return nil
}

func choiceName(tr *toolRequest) string {
	switch tr.choice {
	case "auto", "required", "none":
		return tr.choice
	}
	return "{function: " + tr.choice + "}"
}
