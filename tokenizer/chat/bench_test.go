package chat

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkApplyQwen3 renders a 10-message conversation (system, four
// user/assistant exchanges with reasoning, a final user turn).
func BenchmarkApplyQwen3(b *testing.B) {
	tmpl, special := loadConfig(b, filepath.Join("..", "..", "testdata", "tokenizer-files", "qwen3", "tokenizer_config.json"))
	msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant."}}
	for i := range 4 {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: what is %d squared?", i, i)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("<think>\nmultiply %d by itself\n</think>\n\n%d", i, i*i)})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "Thanks, and 12 squared?"})
	opts := Options{AddGenerationPrompt: true, Special: special}
	if _, err := tmpl.Apply(msgs, opts); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Apply(msgs, opts); err != nil {
			b.Fatal(err)
		}
	}
}
