package main

import "testing"

// TestCheckParsers: --tool-call-parser and --reasoning-parser take their documented values only.
func TestCheckParsers(t *testing.T) {
	for _, tool := range []string{"auto", "hermes", "llama3_json", "fallback", "mistral", "deepseek_v3", "qwen3_coder", "harmony"} {
		for _, r := range []string{"auto", "none", "qwen3", "deepseek_r1"} {
			if err := checkParsers(tool, r); err != nil {
				t.Errorf("%s/%s: %v", tool, r, err)
			}
		}
	}
	for _, bad := range [][2]string{{"", "auto"}, {"mistral_v11", "auto"}, {"auto", ""}, {"auto", "qwen"}} {
		if err := checkParsers(bad[0], bad[1]); err == nil {
			t.Errorf("%q/%q accepted", bad[0], bad[1])
		}
	}
}
