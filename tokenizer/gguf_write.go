package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/llmserve/llmserve/gguf"
)

// SetGGUFMetadata sets w's tokenizer.ggml.* and tokenizer.chat_template keys from the Hugging
// Face tokenizer in dir, the way llama.cpp's convert_hf_to_gguf.py writes them for a byte-level
// BPE: every id below vocabSize (the model's embedding rows) gets a token, ids the tokenizer
// lacks become unused "[PAD<id>]" entries; added tokens are control tokens when special (or
// shaped like <|...|>), user-defined otherwise; merges are "a b" strings; the pre-tokenizer is
// named by its split pattern (llama-bpe, qwen2 or gpt-2). GGUF has no field for the normalizer:
// readers apply the one of the named tokenizer family (NFC for qwen2).
func SetGGUFMetadata(w *gguf.Writer, dir string, vocabSize int) error {
	t, err := Load(dir)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	_, raw, err := parseTokenizerJSON(data)
	if err != nil || raw == nil {
		return fmt.Errorf("tokenizer: %s: tokenizer.json: %v", dir, err)
	}
	pre, err := t.ggufPreName()
	if err != nil {
		return fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	n := max(vocabSize, len(t.idToToken))
	tokens := make([]string, n)
	types := make([]int32, n)
	for id := range n {
		switch {
		case id >= len(t.idToToken) || t.flags[id]&flagExists == 0:
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), ggufTokenUnused
		case t.flags[id]&flagAdded != 0:
			tokens[id] = t.idToToken[id]
			types[id] = ggufTokenUserDefined
			if t.flags[id]&flagSpecial != 0 || looksSpecial(tokens[id]) {
				types[id] = ggufTokenControl
			}
		default:
			tokens[id], types[id] = t.idToToken[id], ggufTokenNormal
		}
	}
	merges := make([]string, len(raw.mergeOff)/3)
	for r := range merges {
		a, b, e := raw.mergeOff[3*r], raw.mergeOff[3*r+1], raw.mergeOff[3*r+2]
		merges[r] = string(raw.mergeBlob[a:b]) + " " + string(raw.mergeBlob[b:e])
	}
	set := func(k string, v any) {
		if err == nil {
			err = w.Set(k, v)
		}
	}
	set("tokenizer.ggml.model", "gpt2")
	set("tokenizer.ggml.pre", pre)
	set("tokenizer.ggml.tokens", tokens)
	set("tokenizer.ggml.token_type", types)
	set("tokenizer.ggml.merges", merges)
	for _, s := range []struct{ name, key string }{
		{"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
		{"pad_token", "tokenizer.ggml.padding_token_id"}, {"unk_token", "tokenizer.ggml.unknown_token_id"},
	} {
		if id, ok := t.specialID(s.name); ok {
			set(s.key, uint32(id))
		}
	}
	prefix, suffix := t.AddsSpecialTokens()
	switch {
	case len(prefix) == 0:
	case len(prefix) == 1 && t.hasBOS && prefix[0] == t.bos:
	default:
		return fmt.Errorf("tokenizer: %s: added prefix %v is not the BOS token; GGUF can only say add_bos_token", dir, prefix)
	}
	switch {
	case len(suffix) == 0:
	case len(suffix) == 1 && t.hasEOS && suffix[0] == t.eos:
	default:
		return fmt.Errorf("tokenizer: %s: added suffix %v is not the EOS token; GGUF can only say add_eos_token", dir, suffix)
	}
	set("tokenizer.ggml.add_bos_token", len(prefix) == 1)
	set("tokenizer.ggml.add_eos_token", len(suffix) == 1)
	if t.chatTemplate != "" {
		set("tokenizer.chat_template", t.chatTemplate)
	}
	if err != nil {
		return fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	return nil
}

// looksSpecial is llama.cpp's converter's test for added tokens that are special in all but
// name (<|...|>).
func looksSpecial(tok string) bool {
	return strings.HasPrefix(tok, "<|") && strings.HasSuffix(tok, "|>") ||
		strings.HasPrefix(tok, "<｜") && strings.HasSuffix(tok, "｜>")
}

// ggufPreName is the llama.cpp pre-tokenizer name for t's pre-tokenizer pipeline.
func (t *Tokenizer) ggufPreName() (string, error) {
	for _, name := range []string{"llama-bpe", "qwen2", "gpt-2"} {
		if slices.Equal(t.steps, ggufPreTokenizers[name].steps) {
			return name, nil
		}
	}
	return "", fmt.Errorf("the pre-tokenizer is not one GGUF can name (%s)", SupportedGGUF)
}
