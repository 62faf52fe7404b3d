package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/llmserve/llmserve/gguf"
)

// EmbeddingConfig is what a model directory says about its embeddings: sentence-transformers'
// modules.json (a Pooling module whose config.json names the mode, and whether a Normalize
// module follows) and config.json's Matryoshka settings (vLLM's names: is_matryoshka,
// matryoshka_dimensions).
type EmbeddingConfig struct {
	// Pooling is "last", "mean" or "cls" from the Pooling module; "" when the directory has no
	// sentence-transformers configuration.
	Pooling string
	// Normalize says a Normalize module follows the pooling (meaningful when Pooling is set).
	Normalize bool
	// Matryoshka says a prefix of the embedding is an embedding; MatryoshkaDims, when set, are
	// the prefix lengths the model was trained for.
	Matryoshka     bool
	MatryoshkaDims []int
}

// stModule is one entry of sentence-transformers' modules.json.
type stModule struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// stPooling is sentence-transformers' Pooling module config (1_Pooling/config.json).
type stPooling struct {
	CLS          bool `json:"pooling_mode_cls_token"`
	Mean         bool `json:"pooling_mode_mean_tokens"`
	Max          bool `json:"pooling_mode_max_tokens"`
	MeanSqrtLen  bool `json:"pooling_mode_mean_sqrt_len_tokens"`
	WeightedMean bool `json:"pooling_mode_weightedmean_tokens"`
	LastToken    bool `json:"pooling_mode_lasttoken"`
}

// LoadEmbeddingConfig reads dir's embedding settings. A directory (or GGUF file) without them
// gives the zero config; a pooling this engine does not implement (max, mean_sqrt_len,
// weighted mean, or several at once) is an error naming it.
func LoadEmbeddingConfig(dir string) (EmbeddingConfig, error) {
	var ec EmbeddingConfig
	if gguf.IsGGUF(dir) {
		return ec, nil
	}
	var mats struct {
		IsMatryoshka bool  `json:"is_matryoshka"`
		Dims         []int `json:"matryoshka_dimensions"`
	}
	if data, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		if err := json.Unmarshal(data, &mats); err != nil {
			return ec, fmt.Errorf("read %s: %w", filepath.Join(dir, "config.json"), err)
		}
	}
	ec.Matryoshka, ec.MatryoshkaDims = mats.IsMatryoshka || len(mats.Dims) > 0, mats.Dims
	path := filepath.Join(dir, "modules.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ec, nil
	}
	if err != nil {
		return ec, fmt.Errorf("read %s: %w", path, err)
	}
	var mods []stModule
	if err := json.Unmarshal(data, &mods); err != nil {
		return ec, fmt.Errorf("read %s: %w", path, err)
	}
	for _, m := range mods {
		switch {
		case strings.HasSuffix(m.Type, ".Pooling"):
			if ec.Pooling, err = readSTPooling(filepath.Join(dir, m.Path, "config.json")); err != nil {
				return ec, err
			}
		case strings.HasSuffix(m.Type, ".Normalize"):
			ec.Normalize = true
		}
	}
	return ec, nil
}

func readSTPooling(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read sentence-transformers pooling config: %w", err)
	}
	var p stPooling
	if err := json.Unmarshal(data, &p); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	var modes []string
	for _, m := range []struct {
		on   bool
		name string
	}{{p.LastToken, "last"}, {p.Mean, "mean"}, {p.CLS, "cls"}, {p.Max, "max"}, {p.MeanSqrtLen, "mean_sqrt_len"}, {p.WeightedMean, "weightedmean"}} {
		if m.on {
			modes = append(modes, m.name)
		}
	}
	switch {
	case len(modes) == 0:
		return "", fmt.Errorf("%s names no pooling mode", path)
	case len(modes) > 1:
		return "", fmt.Errorf("%s names several pooling modes %v; this engine pools one way (last, mean or cls)", path, modes)
	case modes[0] != "last" && modes[0] != "mean" && modes[0] != "cls":
		return "", fmt.Errorf("%s pools by %s; this engine pools by last, mean or cls", path, modes[0])
	}
	return modes[0], nil
}
