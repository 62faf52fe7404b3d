package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/llmserve/llmserve/gguf"
)

// SupportedGGUF is what FromGGUF accepts, for error messages.
const SupportedGGUF = "supported: tokenizer.ggml.model gpt2 (byte-level BPE) with tokenizer.ggml.pre " +
	"one of llama-bpe, llama3, llama-v3, falcon3, smaug-bpe (Llama-3 pattern), qwen2, deepseek-r1-qwen, " +
	"megrez (Qwen2 pattern), gpt-2, phi-2 (GPT-2 pattern)"

// GGUF token types (llama_token_type), the tokenizer.ggml.token_type values.
const (
	ggufTokenNormal      = 1
	ggufTokenUnknown     = 2
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
	ggufTokenUnused      = 5
	ggufTokenByte        = 6
)

// ggufPre is what a tokenizer.ggml.pre name stands for: the split pattern of the Hugging Face
// tokenizer the file was converted from, with the options llama.cpp ties to the name.
type ggufPre struct {
	// steps is the pre-tokenizer pipeline (a Split, then ByteLevel; or ByteLevel with the GPT-2
	// regex).
	steps []preStep
	// nfc: the Hugging Face tokenizer normalizes to NFC (Qwen2's does).
	nfc bool
	// ignoreMerges: whole words in the vocab skip BPE (Llama-3's tokenizer.json sets it).
	ignoreMerges bool
	// addBOS is the default of tokenizer.ggml.add_bos_token when the file does not set it.
	addBOS bool
}

// ggufPreTokenizers maps llama.cpp's pre-tokenizer names to the patterns this package implements.
// The names are those llama.cpp's converter writes for the Llama-3, Qwen2 and GPT-2 regexes.
var ggufPreTokenizers = func() map[string]ggufPre {
	llama3 := ggufPre{steps: []preStep{{m: llamaMatcher{maxDigits: 3}, behavior: splitIsolated}, {byteLevel: true}},
		ignoreMerges: true, addBOS: true}
	qwen2 := ggufPre{steps: []preStep{{m: llamaMatcher{maxDigits: 1}, behavior: splitIsolated}, {byteLevel: true}}, nfc: true}
	gpt2 := ggufPre{steps: []preStep{{byteLevel: true, m: gpt2Matcher{}}}}
	return map[string]ggufPre{
		"llama-bpe": llama3, "llama3": llama3, "llama-v3": llama3, "falcon3": llama3, "smaug-bpe": llama3,
		"qwen2": qwen2, "deepseek-r1-qwen": qwen2, "megrez": qwen2,
		"gpt-2": gpt2, "phi-2": gpt2,
	}
}()

// LoadGGUF reads the tokenizer and chat template of the GGUF file at path.
func LoadGGUF(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// FromGGUF builds a Tokenizer from a GGUF file's tokenizer.ggml.* metadata and
// tokenizer.chat_template. Tokens of type control become special added tokens, user-defined ones
// plain added tokens (both matched in the raw text before BPE, as llama.cpp and Hugging Face do),
// unused ones (the padding entries up to the model's vocab size) are left out. The returned
// Tokenizer does not refer to f.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("tokenizer.ggml.model %q is not supported (%s)", model, SupportedGGUF)
	}
	preName, err := f.String("tokenizer.ggml.pre")
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, SupportedGGUF)
	}
	pre, ok := ggufPreTokenizers[preName]
	if !ok {
		return nil, fmt.Errorf("tokenizer.ggml.pre %q is not supported (%s)", preName, SupportedGGUF)
	}
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	if len(tokens) == 0 || len(tokens) >= maxID {
		return nil, fmt.Errorf("tokenizer.ggml.tokens has %d tokens, want 1 to %d", len(tokens), maxID-1)
	}
	types := make([]int64, len(tokens))
	for i := range types {
		types[i] = ggufTokenNormal
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		tt, ok := v.Ints()
		if !ok || len(tt) != len(tokens) {
			return nil, fmt.Errorf("tokenizer.ggml.token_type must be an integer array of %d entries", len(tokens))
		}
		types = tt
	}
	merges, err := f.Strings("tokenizer.ggml.merges")
	if err != nil {
		return nil, err
	}

	m := &rawModel{Type: "BPE", IgnoreMerges: pre.ignoreMerges, hasMerges: true}
	var added []addedToken
	for id, tok := range tokens {
		switch types[id] {
		case ggufTokenNormal, ggufTokenUnknown, ggufTokenByte:
			m.vocabToks = append(m.vocabToks, tok)
			m.vocabIDs = append(m.vocabIDs, int32(id))
		case ggufTokenControl, ggufTokenUserDefined:
			if tok == "" {
				return nil, fmt.Errorf("tokenizer.ggml.tokens[%d] is an empty added token", id)
			}
			added = append(added, addedToken{ID: int32(id), Content: tok, Special: types[id] == ggufTokenControl})
		case ggufTokenUnused:
		default:
			return nil, fmt.Errorf("tokenizer.ggml.token_type[%d] is %d, not a llama.cpp token type (1 to 6)", id, types[id])
		}
	}
	for rank, mg := range merges {
		// As llama.cpp splits them: at the first space after the first byte.
		sp := -1
		if len(mg) > 1 {
			sp = strings.IndexByte(mg[1:], ' ')
		}
		if sp < 0 {
			return nil, fmt.Errorf("tokenizer.ggml.merges[%d] %q is not two tokens separated by a space", rank, mg)
		}
		sp++
		off := uint32(len(m.mergeBlob))
		m.mergeBlob = append(m.mergeBlob, mg[:sp]...)
		mid := uint32(len(m.mergeBlob))
		m.mergeBlob = append(m.mergeBlob, mg[sp+1:]...)
		m.mergeOff = append(m.mergeOff, off, mid, uint32(len(m.mergeBlob)))
	}

	t := &Tokenizer{modelMaxLength: math.MaxInt}
	if err := t.loadModel(m); err != nil {
		return nil, err
	}
	if pre.nfc {
		t.normForms = []normForm{formNFC}
	}
	t.steps = slices.Clone(pre.steps)
	if err := t.loadGGUFAdded(added); err != nil {
		return nil, err
	}
	// Unused entries leave holes in the id space only at the end in converted files; anywhere
	// else they stay empty ids, as missing vocab ids do in tokenizer.json.
	t.buildTokenBytes()
	t.compactStrings()

	t.special = map[string]string{}
	for _, s := range []struct{ key, name string }{
		{"tokenizer.ggml.bos_token_id", "bos_token"}, {"tokenizer.ggml.eos_token_id", "eos_token"},
		{"tokenizer.ggml.padding_token_id", "pad_token"}, {"tokenizer.ggml.unknown_token_id", "unk_token"},
	} {
		if _, ok := f.Get(s.key); !ok {
			continue
		}
		id, err := f.Uint(s.key)
		if err != nil {
			return nil, err
		}
		if id >= uint64(len(t.idToToken)) || t.flags[id]&flagExists == 0 {
			return nil, fmt.Errorf("%s %d is not a token of the vocabulary", s.key, id)
		}
		t.special[s.name] = t.idToToken[id]
	}
	t.bos, t.hasBOS = t.specialID("bos_token")
	t.eos, t.hasEOS = t.specialID("eos_token")
	addBOS, addEOS := pre.addBOS, false
	for _, s := range []struct {
		key string
		dst *bool
	}{{"tokenizer.ggml.add_bos_token", &addBOS}, {"tokenizer.ggml.add_eos_token", &addEOS}} {
		if _, ok := f.Get(s.key); ok {
			if *s.dst, err = f.Bool(s.key); err != nil {
				return nil, err
			}
		}
	}
	if addBOS {
		if !t.hasBOS {
			return nil, fmt.Errorf("tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id")
		}
		t.prefix = []int32{t.bos}
	}
	if addEOS {
		if !t.hasEOS {
			return nil, fmt.Errorf("tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id")
		}
		t.suffix = []int32{t.eos}
	}
	if _, ok := f.Get("tokenizer.chat_template"); ok {
		if t.chatTemplate, err = f.String("tokenizer.chat_template"); err != nil {
			return nil, err
		}
	}
	if arch, err := f.String("general.architecture"); err == nil {
		if n, err := f.Uint(arch + ".context_length"); err == nil && n > 0 && n <= math.MaxInt32 {
			t.modelMaxLength = int(n)
		}
	}
	return t, nil
}

// loadGGUFAdded registers added tokens at the ids the file gives them (unlike tokenizer.json's
// added tokens, whose ids loadAdded derives). GGUF records no lstrip/rstrip/normalized flags;
// llama.cpp matches them as written, in the raw text.
func (t *Tokenizer) loadGGUFAdded(added []addedToken) error {
	t.addedToID = map[string]int32{}
	t.added = make(map[int32]*addedToken, len(added))
	t.rawTrie = newTokenTrie()
	t.normTrie = newTokenTrie()
	for i := range added {
		a := &added[i]
		if prev, dup := t.addedToID[a.Content]; dup {
			return fmt.Errorf("tokenizer.ggml.tokens: added token %q appears at ids %d and %d", a.Content, prev, a.ID)
		}
		for int32(len(t.idToToken)) <= a.ID {
			t.idToToken = append(t.idToToken, "")
			t.flags = append(t.flags, 0)
		}
		t.addedToID[a.Content] = a.ID
		t.added[a.ID] = a
		t.idToToken[a.ID] = a.Content
		t.flags[a.ID] |= flagExists | flagAdded
		if a.Special {
			t.flags[a.ID] |= flagSpecial
		}
		t.rawTrie.add(a)
	}
	return nil
}
