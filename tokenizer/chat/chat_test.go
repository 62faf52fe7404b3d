package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureCase is one entry of testdata/chat/*-chat-expected.json, made by
// transformers' apply_chat_template.
type fixtureCase struct {
	Messages            []map[string]any `json:"messages"`
	AddGenerationPrompt bool             `json:"add_generation_prompt"`
	EnableThinking      *bool            `json:"enable_thinking"`
	Prompt              string           `json:"prompt"`
}

// tokenizerConfig holds the parts of tokenizer_config.json the chat
// template needs.
type tokenizerConfig struct {
	ChatTemplate string `json:"chat_template"`
	BOSToken     any    `json:"bos_token"`
	EOSToken     any    `json:"eos_token"`
	PadToken     any    `json:"pad_token"`
	UnkToken     any    `json:"unk_token"`
}

func loadConfig(t testing.TB, path string) (*Template, map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var cfg tokenizerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	tmpl, err := Compile(cfg.ChatTemplate)
	if err != nil {
		t.Fatalf("compile template of %s: %v", path, err)
	}
	special := map[string]string{}
	for name, v := range map[string]any{"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken, "pad_token": cfg.PadToken, "unk_token": cfg.UnkToken} {
		switch tok := v.(type) {
		case string:
			special[name] = tok
		case map[string]any: // AddedToken form
			if s, ok := tok["content"].(string); ok {
				special[name] = s
			}
		}
	}
	return tmpl, special
}

func loadCases(t testing.TB, path string) []fixtureCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var cases []fixtureCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if len(cases) == 0 {
		t.Fatalf("%s has no cases", path)
	}
	return cases
}

func TestTransformersFixtures(t *testing.T) {
	for _, model := range []string{"qwen3", "llama3"} {
		tmpl, special := loadConfig(t, filepath.Join("..", "..", "testdata", "tokenizer-files", model, "tokenizer_config.json"))
		cases := loadCases(t, filepath.Join("..", "..", "testdata", "chat", model+"-chat-expected.json"))
		for i, c := range cases {
			opts := Options{AddGenerationPrompt: c.AddGenerationPrompt, Special: special}
			if c.EnableThinking != nil {
				opts.Extra = map[string]any{"enable_thinking": *c.EnableThinking}
			}
			got, err := tmpl.Apply(c.Messages, opts)
			if err != nil {
				t.Errorf("%s case %d: %v", model, i, err)
				continue
			}
			if got != c.Prompt {
				t.Errorf("%s case %d:\n got %q\nwant %q", model, i, got, c.Prompt)
			}
		}
	}
}

// TestPicoTemplate checks the pico model's ChatML template against the
// prompts its template defines (the same layout as Qwen's fixtures).
func TestPicoTemplate(t *testing.T) {
	tmpl, special := loadConfig(t, filepath.Join("..", "..", "models", "pico", "tokenizer_config.json"))
	cases := loadCases(t, filepath.Join("..", "..", "testdata", "chat", "qwen3-chat-expected.json"))
	checked := 0
	for i, c := range cases {
		if c.EnableThinking != nil {
			continue // a Qwen3-only variable
		}
		got, err := tmpl.Apply(c.Messages, Options{AddGenerationPrompt: c.AddGenerationPrompt, Special: special})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		// Without tools or assistant reasoning, Qwen3's template reduces to
		// plain ChatML, which is exactly the pico template.
		if got != c.Prompt {
			t.Errorf("case %d:\n got %q\nwant %q", i, got, c.Prompt)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no pico cases checked")
	}
}

func TestContentParts(t *testing.T) {
	tmpl, special := loadConfig(t, filepath.Join("..", "..", "testdata", "tokenizer-files", "qwen3", "tokenizer_config.json"))
	parts := []map[string]any{{
		"role": "user",
		"content": []any{
			map[string]any{"type": "text", "text": "Describe"},
			map[string]any{"type": "text", "text": "this."},
		},
	}}
	got, err := tmpl.Apply(parts, Options{AddGenerationPrompt: true, Special: special})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nDescribe\nthis.<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q want %q", got, want)
	}
	// The caller's message is not modified.
	if _, ok := parts[0]["content"].([]any); !ok {
		t.Error("Apply modified the caller's message")
	}
	image := []map[string]any{{"role": "user", "content": []any{map[string]any{"type": "image_url", "image_url": map[string]any{"url": "x"}}}}}
	if _, err := tmpl.Apply(image, Options{Special: special}); err == nil || !strings.Contains(err.Error(), "image_url") {
		t.Errorf("image part: got err %v, want one naming image_url", err)
	}

	// A template that loops over content receives the parts unchanged.
	loops, err := Compile(`{% for m in messages %}{% for p in m.content %}[{{ p.type }}:{{ p.text }}]{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err = loops.Apply(parts, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[text:Describe][text:this.]"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

func TestRaiseException(t *testing.T) {
	tmpl, err := Compile(`{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}ok`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Apply([]map[string]any{{"role": "assistant", "content": "hi"}}, Options{})
	var te *TemplateError
	if !errors.As(err, &te) {
		t.Fatalf("got %v (%T), want *TemplateError", err, err)
	}
	if te.Message != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Errorf("message %q", te.Message)
	}
	out, err := tmpl.Apply([]map[string]any{{"role": "user", "content": "hi"}}, Options{})
	if err != nil || out != "ok" {
		t.Errorf("got %q, %v", out, err)
	}
}

func TestUnsupportedFeatures(t *testing.T) {
	for src, feature := range map[string]string{
		`{% include 'x.jinja' %}`:                   "{% include %}",
		`{% extends 'base' %}`:                      "{% extends %}",
		`{% call m() %}x{% endcall %}`:              "{% call %}",
		`{% filter upper %}x{% endfilter %}`:        "{% filter %}",
		`{{ x|wordwrap(10) }}`:                      "filter 'wordwrap'",
		`{{ x|random }}`:                            "filter 'random'",
		`{% for x in y recursive %}{% endfor %}`:    "recursive for loops",
		`{{ 'a'.encode('utf-8') }}`:                 "method 'encode()'",
		`{{ x is escaped }}`:                        "test 'escaped'",
		`{{ cycler('a', 'b').next() }}`:             "global 'cycler()'",
		`{{ f(*args) }}`:                            "*args and **kwargs in calls",
		`{{ 99999999999999999999999 }}`:             "integer literal",
		`{% autoescape true %}x{% endautoescape %}`: "{% autoescape %}",
	} {
		_, err := Compile(src)
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: got %v, want *UnsupportedError", src, err)
			continue
		}
		if !strings.Contains(ue.Feature, feature) || !strings.Contains(err.Error(), feature) {
			t.Errorf("%s: error %q does not name %q", src, err, feature)
		}
	}
	// Syntax errors are plain errors, not UnsupportedError.
	for _, src := range []string{`{{ x |nosuchfilter }}`, `{% if x %}`, `{{ x `, `{% endfor %}`, `{{ (1 }}`} {
		_, err := Compile(src)
		var ue *UnsupportedError
		if err == nil || errors.As(err, &ue) {
			t.Errorf("%s: got %v, want a syntax error", src, err)
		}
	}
}

func TestOrderedTools(t *testing.T) {
	tmpl, special := loadConfig(t, filepath.Join("..", "..", "testdata", "tokenizer-files", "qwen3", "tokenizer_config.json"))
	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}}]`)
	got, err := tmpl.Apply([]map[string]any{{"role": "user", "content": "Weather?"}}, Options{ToolsJSON: tools, Special: special})
	if err != nil {
		t.Fatal(err)
	}
	wantTool := `{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}}`
	if !strings.Contains(got, "<tools>\n"+wantTool+"\n</tools>") {
		t.Errorf("tools not rendered in source order:\n%s", got)
	}
}

// TestBinaryOperatorsAssociateLeft: chained binary operators join left to right at each
// precedence level, ** included. The wants are Jinja2 3.x's output for the same template.
func TestBinaryOperatorsAssociateLeft(t *testing.T) {
	tmpl, err := Compile(`{{ 2 ** 3 ** 2 }}|{{ 10 - 3 - 2 }}|{{ 20 // 3 % 4 * 2 }}|{{ false or 0 or "x" }}|{{ 1 and 2 and 0 }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Apply(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "64|5|4|x|0"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}
