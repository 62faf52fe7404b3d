package chat

import (
	"path/filepath"
	"strings"
	"testing"
)

func FuzzCompile(f *testing.F) {
	for _, seed := range []string{
		"",
		"{{ x }}",
		"{% for m in messages %}{{ m.role }}{% endfor %}",
		"{%- if a -%}{{ b|trim }}{%- else %}{# c #}{% endif %}",
		"{% set ns = namespace(x=1) %}{% set ns.x = ns.x + 1 %}{{ ns.x }}",
		"{% macro m(a, b=2) %}{{ a ~ b }}{% endmacro %}{{ m(1) }}",
		"{{ 'a'[::-1] ~ [1,2][1:] | string }}{{ {'a': [1]}|tojson(indent=2) }}",
		"{% raw %}{{ x }}{% endraw %}",
		"{{ x if y else z is defined and not w in [1, (2,)] }}",
		"{{ '\\u00e9\\x41' }}{{ 1e5 // 3 % 2 ** -1 }}",
		"{% for x in range(3) if x %}{{ loop.cycle('a') }}{% break %}{% else %}e{% endfor %}",
		"{{ messages[0]['content'].split('</think>')[-1].lstrip('\\n') }}",
		"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
		"{{ '%s %d' % ('a', 1) }}{{ '{}'.format(1) }}",
		"{{ {",
		"{% if %}",
		"{{ 1 + }}",
	} {
		f.Add(seed)
	}
	saved := maxSteps
	maxSteps = 20000
	defer func() { maxSteps = saved }()
	vars := map[string]any{
		"messages": []any{
			map[string]any{"role": "user", "content": "hi </think> there"},
			map[string]any{"role": "assistant", "content": "ok", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "f", "arguments": map[string]any{"a": 1}}}}},
		},
		"x": "s", "y": 1, "z": []any{1, 2.5}, "a": true, "b": nil,
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Compile(src)
		if err != nil {
			return
		}
		out, err := tmpl.Render(vars)
		if err == nil && len(out) > maxOutput {
			t.Fatalf("output of %d bytes exceeds the limit", len(out))
		}
	})
}

func FuzzApplyQwen3(f *testing.F) {
	tmpl, special := loadConfig(f, filepath.Join("..", "..", "testdata", "tokenizer-files", "qwen3", "tokenizer_config.json"))
	f.Add("user", "What is 2+2?", "", true)
	f.Add("assistant", "<think>\nhmm\n</think>\n\n4", "", false)
	f.Add("assistant", "plain", "because", true)
	f.Add("tool", "<tool_response>x</tool_response>", "", true)
	f.Add("system", "{{ not a template }} {% raw %}", "\x00\xff", false)
	f.Fuzz(func(t *testing.T, role, content, reasoning string, addGenerationPrompt bool) {
		msgs := []map[string]any{
			{"role": "user", "content": "first"},
			{"role": role, "content": content},
		}
		if reasoning != "" {
			msgs[1]["reasoning_content"] = reasoning
		}
		out, err := tmpl.Apply(msgs, Options{AddGenerationPrompt: addGenerationPrompt, Special: special})
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if !strings.HasPrefix(out, "<|im_start|>user\nfirst<|im_end|>\n") {
			t.Fatalf("prompt does not start with the first turn: %q", out)
		}
		if role == "user" && !strings.Contains(out, "<|im_start|>user\n"+content+"<|im_end|>\n") {
			t.Fatalf("user content not rendered verbatim: %q", out)
		}
		if addGenerationPrompt != strings.HasSuffix(out, "<|im_start|>assistant\n") {
			t.Fatalf("generation prompt %v but output %q", addGenerationPrompt, out)
		}
	})
}
