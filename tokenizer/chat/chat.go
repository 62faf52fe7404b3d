// Package chat renders Hugging Face chat templates (the Jinja2 source in
// tokenizer_config.json's chat_template) to prompt strings exactly as
// transformers' apply_chat_template(..., tokenize=False) does.
//
// It contains its own small Jinja engine (lexer, parser, evaluator) with
// the environment transformers uses: trim_blocks and lstrip_blocks on,
// loop controls, the immutable sandbox, a tojson filter without HTML
// escaping, and the raise_exception and strftime_now globals. Features it
// does not implement fail at Compile with an *UnsupportedError rather than
// rendering a different prompt.
package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Message is one chat message: role, content (a string or a list of
// {"type": "text", "text": ...} parts), and optionally name, tool_calls,
// tool_call_id, reasoning_content or any other key the template reads.
type Message = map[string]any

// Template is a compiled chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	body []stmt
	// iteratesContent is true when the template loops over a message's
	// content, i.e. it expects OpenAI-style lists of content parts.
	iteratesContent bool
}

// Compile parses a chat template.
func Compile(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("compile chat template: %w", err)
	}
	body, err := parse(toks)
	if err != nil {
		return nil, fmt.Errorf("compile chat template: %w", err)
	}
	return &Template{body: body, iteratesContent: loopsOverContent(body)}, nil
}

// Render evaluates the template with the given variables. Values may be
// nil, bool, any integer or float type, string, json.Number,
// json.RawMessage (decoded with key order kept), *Map, and slices and
// string-keyed maps of those. Plain Go maps iterate in sorted key order;
// use *Map where Python's insertion order matters.
func (t *Template) Render(vars map[string]any) (string, error) {
	return t.render(vars, nil)
}

func (t *Template) render(vars map[string]any, opts *Options) (string, error) {
	globals := make(map[string]any, len(vars))
	for k, v := range vars {
		n, err := normalize(v)
		if err != nil {
			return "", fmt.Errorf("render chat template: variable %s: %w", k, err)
		}
		globals[k] = n
	}
	var out strings.Builder
	ev := &evaluator{out: &out, globals: globals, opts: opts}
	if _, err := ev.execList(t.body, &frame{}); err != nil {
		if te, ok := err.(*TemplateError); ok {
			return "", te
		}
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out.String(), nil
}

// Options are the apply_chat_template arguments besides the messages.
type Options struct {
	// AddGenerationPrompt appends the assistant turn header.
	AddGenerationPrompt bool
	// Tools are OpenAI tool definitions, passed as `tools`. Go maps lose
	// key order: prefer ToolsJSON when tools are rendered with tojson.
	Tools []map[string]any
	// ToolsJSON is the request's tools array as raw JSON; it is decoded
	// keeping key order, as Python would. Use either Tools or ToolsJSON.
	ToolsJSON json.RawMessage
	// Extra are additional template variables (e.g. enable_thinking); they
	// override the standard ones.
	Extra map[string]any
	// Special are the tokenizer's special tokens (bos_token, eos_token,
	// pad_token, unk_token, ...); only those the tokenizer defines.
	Special map[string]string
	// Now is strftime_now's clock; zero means time.Now().
	Now time.Time
}

// Apply renders messages the way transformers' apply_chat_template does
// with tokenize=False. Messages are OpenAI-style maps (role, content, name,
// tool_calls, tool_call_id, reasoning_content, ...). When the template does
// not itself loop over message content, list content of text parts is
// joined with "\n", as vLLM does; other part types are an error for such
// templates. Null content stays None, as some templates test for it.
//
// Errors raised by the template through raise_exception are returned as
// *TemplateError carrying the template's message.
func (t *Template) Apply(messages []Message, opts Options) (string, error) {
	msgs := make([]any, len(messages))
	for i, m := range messages {
		fixed, err := t.prepareMessage(m)
		if err != nil {
			return "", fmt.Errorf("apply chat template: message %d: %w", i, err)
		}
		msgs[i] = fixed
	}
	vars := make(map[string]any, 4+len(opts.Special)+len(opts.Extra))
	for k, v := range opts.Special {
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = opts.AddGenerationPrompt
	vars["documents"] = nil
	switch {
	case opts.ToolsJSON != nil && opts.Tools != nil:
		return "", fmt.Errorf("apply chat template: both Tools and ToolsJSON set")
	case opts.ToolsJSON != nil:
		vars["tools"] = opts.ToolsJSON
	case opts.Tools != nil:
		vars["tools"] = opts.Tools
	default:
		vars["tools"] = nil
	}
	for k, v := range opts.Extra {
		vars[k] = v
	}
	return t.render(vars, &opts)
}

// prepareMessage flattens content parts for templates that expect string
// content. It copies the message only when it changes it.
func (t *Template) prepareMessage(m map[string]any) (map[string]any, error) {
	if t.iteratesContent {
		return m, nil
	}
	content, has := m["content"]
	if !has {
		return m, nil
	}
	var text string
	switch c := content.(type) {
	case []any, []map[string]any, json.RawMessage:
		parts, err := normalize(c)
		if err != nil {
			return nil, err
		}
		list, ok := parts.([]any)
		if !ok {
			return m, nil
		}
		if text, err = joinTextParts(list); err != nil {
			return nil, err
		}
	default:
		return m, nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	out["content"] = text
	return out, nil
}

func joinTextParts(parts []any) (string, error) {
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		if s, ok := p.(string); ok {
			texts = append(texts, s)
			continue
		}
		if !isDict(p) {
			return "", fmt.Errorf("content part %d: expected an object, got %s", i, typeName(p))
		}
		typ, _ := dictGet(p, "type")
		if typ != "text" {
			return "", fmt.Errorf("content part %d: type %v is not supported by this chat template (it expects text)", i, typ)
		}
		text, _ := dictGet(p, "text")
		s, ok := text.(string)
		if !ok {
			return "", fmt.Errorf("content part %d: text must be a string", i)
		}
		texts = append(texts, s)
	}
	return strings.Join(texts, "\n"), nil
}

// loopsOverContent reports whether any for loop iterates over something
// named content (message.content, message['content'], or a variable
// content), the sign of a template that handles content-part lists.
func loopsOverContent(body []stmt) bool {
	found := false
	var visit func([]stmt)
	visit = func(stmts []stmt) {
		for _, s := range stmts {
			switch s := s.(type) {
			case *forStmt:
				if isContentRef(s.iter) {
					found = true
				}
				visit(s.body)
				visit(s.elseBody)
			case *ifStmt:
				for _, b := range s.bodies {
					visit(b)
				}
				visit(s.elseBody)
			case *setBlockStmt:
				visit(s.body)
			case *macroStmt:
				visit(s.m.body)
			case *withStmt:
				visit(s.body)
			}
		}
	}
	visit(body)
	return found
}

func isContentRef(x expr) bool {
	for {
		switch e := x.(type) {
		case *filterExpr:
			x = e.arg
		case *attrExpr:
			return e.name == "content"
		case *itemExpr:
			k, ok := e.key.(*constExpr)
			return ok && k.val == "content"
		case *nameExpr:
			return e.name == "content"
		default:
			return false
		}
	}
}
