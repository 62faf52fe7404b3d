package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLoadEmbeddingConfig reads sentence-transformers' files as Qwen3-Embedding ships them, and
// refuses poolings the engine does not implement.
func TestLoadEmbeddingConfig(t *testing.T) {
	write := func(dir, name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	none := t.TempDir()
	write(none, "config.json", `{"hidden_size": 8}`)
	if ec, err := LoadEmbeddingConfig(none); err != nil || ec.Pooling != "" || ec.Matryoshka {
		t.Fatalf("plain model dir: %+v, %v", ec, err)
	}
	qwen := t.TempDir()
	write(qwen, "config.json", `{"hidden_size": 8, "matryoshka_dimensions": [4, 8]}`)
	write(qwen, "modules.json", `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
		{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
		{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]`)
	write(qwen, "1_Pooling/config.json", `{"word_embedding_dimension": 8, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false,
		"pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
		"pooling_mode_lasttoken": true, "include_prompt": true}`)
	ec, err := LoadEmbeddingConfig(qwen)
	if err != nil || ec.Pooling != "last" || !ec.Normalize || !ec.Matryoshka || !slices.Equal(ec.MatryoshkaDims, []int{4, 8}) {
		t.Fatalf("Qwen3-Embedding-like dir: %+v, %v", ec, err)
	}
	write(qwen, "1_Pooling/config.json", `{"pooling_mode_max_tokens": true}`)
	if _, err := LoadEmbeddingConfig(qwen); err == nil || !strings.Contains(err.Error(), "pools by max") {
		t.Fatalf("max pooling: %v", err)
	}
	write(qwen, "1_Pooling/config.json", `{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true}`)
	if _, err := LoadEmbeddingConfig(qwen); err == nil || !strings.Contains(err.Error(), "several") {
		t.Fatalf("two poolings: %v", err)
	}
}
