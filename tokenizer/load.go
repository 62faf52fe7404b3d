package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/llmserve/llmserve/gguf"
)

// Supported is what Load accepts, for error messages.
const Supported = "supported: tokenizer.json with a byte-level BPE model (model.type BPE; " +
	"pre_tokenizer ByteLevel, alone or last in a Sequence after Split with the GPT-2, Llama-3 or " +
	"Qwen2/Qwen3 pattern; normalizer null, NFC, NFD, NFKC, NFKD or a Sequence of them; decoder ByteLevel)"

// maxID bounds token ids so that a malformed file cannot make Load allocate without limit.
const maxID = 1 << 21

// configJSON is what tokenizer_config.json contributes.
type configJSON struct {
	BOS                 json.RawMessage            `json:"bos_token"`
	EOS                 json.RawMessage            `json:"eos_token"`
	PAD                 json.RawMessage            `json:"pad_token"`
	UNK                 json.RawMessage            `json:"unk_token"`
	AddBOS              *bool                      `json:"add_bos_token"`
	AddEOS              *bool                      `json:"add_eos_token"`
	ChatTemplate        json.RawMessage            `json:"chat_template"`
	ModelMaxLength      json.RawMessage            `json:"model_max_length"`
	AddedTokensDecoder  map[string]json.RawMessage `json:"added_tokens_decoder"`
	CleanUpTokenization *bool                      `json:"clean_up_tokenization_spaces"`
}

// Load reads dir/tokenizer.json and dir/tokenizer_config.json (optional) and builds a Tokenizer.
// Only byte-level BPE tokenizers are supported; anything else is an error saying so. A GGUF file
// in place of dir is read with LoadGGUF.
func Load(dir string) (*Tokenizer, error) {
	if gguf.IsGGUF(dir) {
		return LoadGGUF(dir)
	}
	if err := gguf.CheckNotFile(dir); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, e := os.Stat(filepath.Join(dir, "tokenizer.model")); e == nil {
				return nil, fmt.Errorf("tokenizer: %s has tokenizer.model but no tokenizer.json: SentencePiece models are not supported (%s)", dir, Supported)
			}
			return nil, fmt.Errorf("tokenizer: no tokenizer.json in %s (%s)", dir, Supported)
		}
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := New(tj, cj)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	if t.chatTemplate == "" {
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			t.chatTemplate = string(b)
		}
	}
	return t, nil
}

// New builds a Tokenizer from the contents of tokenizer.json and tokenizer_config.json (which may
// be empty).
func New(tokenizerJSONData, configJSONData []byte) (*Tokenizer, error) {
	tj, model, err := parseTokenizerJSON(tokenizerJSONData)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var cfg configJSON
	if len(bytes.TrimSpace(configJSONData)) > 0 {
		if err := json.Unmarshal(configJSONData, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	t := &Tokenizer{modelMaxLength: math.MaxInt}
	if err := t.loadModel(model); err != nil {
		return nil, err
	}
	if err := t.loadNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	if err := t.loadPreTokenizer(tj.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.loadDecoder(tj.Decoder); err != nil {
		return nil, err
	}
	// Added tokens: tokenizer.json's, then any of tokenizer_config's added_tokens_decoder that
	// tokenizer.json lacks (transformers adds those at load).
	added := tj.AddedTokens
	if len(cfg.AddedTokensDecoder) > 0 {
		have := map[string]bool{}
		for _, a := range added {
			have[a.Content] = true
		}
		var extra []addedToken
		for k, raw := range cfg.AddedTokensDecoder {
			var id int64
			if _, err := fmt.Sscan(k, &id); err != nil || id < 0 || id >= maxID {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder key %q is not a token id", k)
			}
			var a addedToken
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder[%s]: %w", k, err)
			}
			if have[a.Content] {
				continue
			}
			a.ID = int32(id)
			extra = append(extra, a)
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i].ID < extra[j].ID })
		added = append(added, extra...)
	}
	if err := t.loadAdded(added); err != nil {
		return nil, err
	}
	t.buildTokenBytes()
	t.compactStrings()
	if err := t.loadConfig(&cfg); err != nil {
		return nil, err
	}
	if err := t.loadPostProcessor(tj.PostProcessor, &cfg); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) loadModel(m *rawModel) error {
	if m == nil {
		return fmt.Errorf("tokenizer.json has no model (%s)", Supported)
	}
	if m.Type == "" && m.hasMerges {
		m.Type = "BPE"
	}
	if m.Type != "BPE" {
		return fmt.Errorf("model type %q is not supported (%s)", m.Type, Supported)
	}
	if m.ByteFallback {
		return fmt.Errorf("BPE with byte_fallback (SentencePiece-style) is not supported (%s)", Supported)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return fmt.Errorf("BPE dropout is not supported")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" ||
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("BPE continuing_subword_prefix / end_of_word_suffix are not supported (%s)", Supported)
	}
	if m.vocabNotObject {
		return fmt.Errorf("model vocab is not an object of token -> id")
	}
	if len(m.vocabToks) == 0 {
		return fmt.Errorf("model has an empty vocab")
	}
	maxTok := int32(-1)
	for _, id := range m.vocabIDs {
		maxTok = max(maxTok, id)
	}
	t.idToToken = make([]string, maxTok+1)
	t.flags = make([]uint8, maxTok+1)
	bpe := &bpeModel{
		bytesToID:    make(map[string]int32, len(m.vocabToks)),
		ignoreMerges: m.IgnoreMerges,
		unkID:        -1,
		fuseUnk:      m.FuseUnk,
		cache:        wordCache{slots: make([]atomic.Pointer[cacheEntry], cacheSlots)},
	}
	t.otherToID = map[string]int32{}
	var buf []byte
	// A key repeated in the JSON object: the later entry wins the token -> id direction.
	for i, tok := range m.vocabToks {
		id := m.vocabIDs[i]
		if t.flags[id]&flagExists != 0 && t.idToToken[id] < tok {
			continue // two tokens with one id: keep the lexically smaller, deterministically
		}
		t.idToToken[id] = tok
		t.flags[id] |= flagExists
		var ok bool
		buf, ok = byteLevelDecode(buf[:0], tok)
		if ok {
			if string(buf) == tok {
				bpe.bytesToID[tok] = id // the token spells its own bytes: share the string
			} else {
				bpe.bytesToID[string(buf)] = id
			}
		} else {
			t.otherToID[tok] = id
		}
	}
	for b := 0; b < 256; b++ {
		bpe.byteID[b] = -1
		if id, ok := bpe.bytesToID[string([]byte{byte(b)})]; ok {
			bpe.byteID[b] = id
		}
	}
	if m.UnkToken != nil {
		if id, ok := t.vocabID(*m.UnkToken, bpe); ok {
			bpe.unkID = id
		}
	}
	nm := len(m.mergeOff) / 3
	bpe.merges = newMergeTable(nm)
	var ab, bb []byte
	for rank := 0; rank < nm; rank++ {
		sa, sb, se := m.mergeOff[3*rank], m.mergeOff[3*rank+1], m.mergeOff[3*rank+2]
		ta, tb := m.mergeBlob[sa:sb], m.mergeBlob[sb:se]
		a, ok1, blA := t.vocabIDBytes(ta, bpe, &ab)
		b, ok2, blB := t.vocabIDBytes(tb, bpe, &bb)
		if !ok1 || !ok2 {
			return fmt.Errorf("merge %d (%q %q): token not in vocab", rank, ta, tb)
		}
		var c int32
		var ok bool
		if blA && blB {
			ab = append(ab, bb...)
			c, ok = bpe.bytesToID[string(ab)]
		} else {
			c, ok = t.vocabID(string(ta)+string(tb), bpe)
		}
		if !ok {
			return fmt.Errorf("merge %d (%q %q): merged token not in vocab", rank, ta, tb)
		}
		bpe.merges.put(pairKey(a, b), uint64(rank)<<32|uint64(uint32(c)))
	}
	t.bpe = bpe
	return nil
}

// vocabIDBytes is vocabID for a token given as bytes. When the token is over the byte-level
// alphabet (byteLevel), *scratch receives the bytes it stands for.
func (t *Tokenizer) vocabIDBytes(tok []byte, bpe *bpeModel, scratch *[]byte) (id int32, ok, byteLevel bool) {
	b := (*scratch)[:0]
	for i := 0; i < len(tok); {
		r, n := utf8.DecodeRune(tok[i:])
		if r >= 0x200 || runeToByteSmall[r] < 0 {
			*scratch = b[:0]
			id, ok := t.otherToID[string(tok)]
			return id, ok, false
		}
		b = append(b, byte(runeToByteSmall[r]))
		i += n
	}
	*scratch = b
	id, ok = bpe.bytesToID[string(b)]
	return id, ok, true
}

// vocabID looks a token string up in the model vocab.
func (t *Tokenizer) vocabID(tok string, bpe *bpeModel) (int32, bool) {
	var arr [64]byte
	b, ok := byteLevelDecode(arr[:0], tok)
	if ok {
		id, found := bpe.bytesToID[string(b)]
		return id, found
	}
	id, found := t.otherToID[tok]
	return id, found
}

func isNull(raw json.RawMessage) bool {
	r := bytes.TrimSpace(raw)
	return len(r) == 0 || bytes.Equal(r, []byte("null"))
}

func (t *Tokenizer) loadNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var forms []normForm
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		var n struct {
			Type        string            `json:"type"`
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("normalizer: %w", err)
		}
		switch n.Type {
		case "NFC":
			forms = append(forms, formNFC)
		case "NFD":
			forms = append(forms, formNFD)
		case "NFKC":
			forms = append(forms, formNFKC)
		case "NFKD":
			forms = append(forms, formNFKD)
		case "Sequence":
			for _, c := range n.Normalizers {
				if isNull(c) {
					continue
				}
				if err := walk(c); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("normalizer type %q is not supported (%s)", n.Type, Supported)
		}
		return nil
	}
	if err := walk(raw); err != nil {
		return err
	}
	t.normForms = forms
	return nil
}

func (t *Tokenizer) loadPreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("no pre_tokenizer: a byte-level BPE needs a ByteLevel pre_tokenizer (%s)", Supported)
	}
	var steps []preStep
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		var p struct {
			Type           string            `json:"type"`
			Pretokenizers  []json.RawMessage `json:"pretokenizers"`
			Pattern        json.RawMessage   `json:"pattern"`
			Behavior       string            `json:"behavior"`
			Invert         bool              `json:"invert"`
			AddPrefixSpace bool              `json:"add_prefix_space"`
			UseRegex       *bool             `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("pre_tokenizer: %w", err)
		}
		switch p.Type {
		case "Sequence":
			for _, c := range p.Pretokenizers {
				if err := walk(c); err != nil {
					return err
				}
			}
		case "Split":
			var pat struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			}
			if err := json.Unmarshal(p.Pattern, &pat); err != nil {
				return fmt.Errorf("pre_tokenizer Split pattern: %w", err)
			}
			var m matcher
			switch {
			case pat.Regex != nil:
				m = matcherForRegex(*pat.Regex)
				if m == nil {
					return fmt.Errorf("pre_tokenizer Split regex %q is not supported: only the known GPT-2, Llama-3 and Qwen patterns are (%s)", *pat.Regex, Supported)
				}
			case pat.String != nil:
				m = literalMatcher{*pat.String}
			default:
				return fmt.Errorf("pre_tokenizer Split has no pattern")
			}
			beh, ok := splitBehaviors[p.Behavior]
			if !ok {
				return fmt.Errorf("pre_tokenizer Split behavior %q is not supported", p.Behavior)
			}
			steps = append(steps, preStep{m: m, behavior: beh, invert: p.Invert})
		case "ByteLevel":
			st := preStep{byteLevel: true, prefixSpace: p.AddPrefixSpace}
			if p.UseRegex == nil || *p.UseRegex {
				st.m = gpt2Matcher{}
			}
			steps = append(steps, st)
		default:
			return fmt.Errorf("pre_tokenizer type %q is not supported (%s)", p.Type, Supported)
		}
		return nil
	}
	if err := walk(raw); err != nil {
		return err
	}
	for i, s := range steps {
		if s.byteLevel && i != len(steps)-1 {
			return fmt.Errorf("pre_tokenizer: ByteLevel must come last (%s)", Supported)
		}
	}
	if len(steps) == 0 || !steps[len(steps)-1].byteLevel {
		return fmt.Errorf("pre_tokenizer has no ByteLevel step: only byte-level BPE is supported (%s)", Supported)
	}
	t.steps = steps
	return nil
}

func (t *Tokenizer) loadDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("no decoder: a byte-level BPE needs a ByteLevel decoder (%s)", Supported)
	}
	var d struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	switch d.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(d.Decoders) == 1 {
			return t.loadDecoder(d.Decoders[0])
		}
	}
	return fmt.Errorf("decoder type %q is not supported (%s)", d.Type, Supported)
}

// loadAdded registers the added tokens the way tokenizers' AddedVocabulary::add_tokens does when
// it loads tokenizer.json: the id of a token is the vocab's id for its content when the vocab has
// it, else the next free id after the vocab (the "id" written in the file is not consulted, as in
// tokenizers, which only warns when they differ). A repeated content keeps its first id and takes
// the later flags.
func (t *Tokenizer) loadAdded(added []addedToken) error {
	t.addedToID = map[string]int32{}
	t.added = make(map[int32]*addedToken, len(added))
	t.rawTrie = newTokenTrie()
	t.normTrie = newTokenTrie()
	vocabCount := int32(len(t.bpe.bytesToID) + len(t.otherToID))
	specialSet := map[string]bool{}
	for i := range added {
		if added[i].Special && added[i].Content != "" {
			specialSet[added[i].Content] = true
		}
	}
	var order []int32
	maxAdded := int32(-1)
	for i := range added {
		a := added[i]
		if a.Content == "" {
			continue
		}
		id, ok := t.addedToID[a.Content]
		if !ok {
			id, ok = t.vocabID(a.Content, t.bpe)
		}
		if !ok {
			id = vocabCount
			if maxAdded >= 0 && (maxAdded >= vocabCount || vocabCount == 0) {
				id = maxAdded + 1
			}
		}
		if id >= maxID {
			return fmt.Errorf("too many added tokens")
		}
		maxAdded = max(maxAdded, id)
		if _, seen := t.added[id]; !seen {
			order = append(order, id)
		}
		t.addedToID[a.Content] = id
		a.ID = id
		t.added[id] = &a
	}
	for int32(len(t.idToToken)) <= maxAdded {
		t.idToToken = append(t.idToToken, "")
		t.flags = append(t.flags, 0)
	}
	for _, id := range order {
		a := t.added[id]
		t.idToToken[id] = a.Content
		t.flags[id] |= flagExists | flagAdded
		if specialSet[a.Content] {
			t.flags[id] |= flagSpecial
		}
		if a.Normalized {
			// Matched in the normalized text, by its normalized form.
			n := *a
			n.Content = t.normalize(a.Content)
			t.normTrie.add(&n)
		} else {
			t.rawTrie.add(a)
		}
	}
	return nil
}

// normalize applies the normalizer.
func (t *Tokenizer) normalize(s string) string {
	for _, f := range t.normForms {
		s = f.apply(s)
	}
	return s
}

// specialTokenString reads a tokenizer_config special token: a string, an AddedToken object
// ({"content": ...}) or null.
func specialTokenString(raw json.RawMessage) (string, bool, error) {
	if isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", false, fmt.Errorf("special token %s is neither a string nor an AddedToken", raw)
	}
	return *o.Content, true, nil
}

func (t *Tokenizer) loadConfig(cfg *configJSON) error {
	t.special = map[string]string{}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"bos_token", cfg.BOS}, {"eos_token", cfg.EOS}, {"pad_token", cfg.PAD}, {"unk_token", cfg.UNK}} {
		s, ok, err := specialTokenString(f.raw)
		if err != nil {
			return fmt.Errorf("tokenizer_config.json %s: %w", f.name, err)
		}
		if ok {
			t.special[f.name] = s
		}
	}
	t.bos, t.hasBOS = t.specialID("bos_token")
	t.eos, t.hasEOS = t.specialID("eos_token")
	if !isNull(cfg.ChatTemplate) {
		var s string
		if err := json.Unmarshal(cfg.ChatTemplate, &s); err == nil {
			t.chatTemplate = s
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(cfg.ChatTemplate, &list); err != nil {
				return fmt.Errorf("tokenizer_config.json chat_template is neither a string nor a list of {name, template}")
			}
			for _, e := range list {
				if e.Name == "default" {
					t.chatTemplate = e.Template
				}
			}
		}
	}
	if !isNull(cfg.ModelMaxLength) {
		// Often a float such as 1e30 ("no limit"): read it as a big number and clamp.
		f, _, err := big.ParseFloat(string(bytes.TrimSpace(cfg.ModelMaxLength)), 10, 128, big.ToNearestEven)
		if err != nil {
			return fmt.Errorf("tokenizer_config.json model_max_length %s is not a number", cfg.ModelMaxLength)
		}
		if f.Sign() > 0 && f.Cmp(new(big.Float).SetInt64(math.MaxInt32)) <= 0 {
			n, _ := f.Int64()
			t.modelMaxLength = int(n)
		}
	}
	return nil
}

func (t *Tokenizer) specialID(name string) (int32, bool) {
	s, ok := t.special[name]
	if !ok {
		return 0, false
	}
	return t.TokenID(s)
}

// loadPostProcessor decides which ids Encode adds with addSpecial. When tokenizer_config sets
// add_bos_token or add_eos_token, those decide (transformers rebuilds the post-processor from
// them); otherwise a TemplateProcessing / RobertaProcessing / BertProcessing post_processor does.
func (t *Tokenizer) loadPostProcessor(raw json.RawMessage, cfg *configJSON) error {
	if cfg.AddBOS != nil || cfg.AddEOS != nil {
		if cfg.AddBOS != nil && *cfg.AddBOS {
			if !t.hasBOS {
				return fmt.Errorf("tokenizer_config.json: add_bos_token is true but bos_token is not a known token")
			}
			t.prefix = []int32{t.bos}
		}
		if cfg.AddEOS != nil && *cfg.AddEOS {
			if !t.hasEOS {
				return fmt.Errorf("tokenizer_config.json: add_eos_token is true but eos_token is not a known token")
			}
			t.suffix = []int32{t.eos}
		}
		return nil
	}
	if isNull(raw) {
		return nil
	}
	var p struct {
		Type          string            `json:"type"`
		Processors    []json.RawMessage `json:"processors"`
		Single        []json.RawMessage `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
		Sep []json.RawMessage `json:"sep"`
		Cls []json.RawMessage `json:"cls"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, c := range p.Processors {
			if err := t.loadPostProcessor(c, cfg); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		seenSeq := false
		for _, piece := range p.Single {
			var e struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			}
			if err := json.Unmarshal(piece, &e); err != nil {
				return fmt.Errorf("post_processor TemplateProcessing: %w", err)
			}
			switch {
			case e.Sequence != nil:
				if e.Sequence.ID != "A" {
					return fmt.Errorf("post_processor TemplateProcessing: single template uses sequence %q", e.Sequence.ID)
				}
				seenSeq = true
			case e.SpecialToken != nil:
				st, ok := p.SpecialTokens[e.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor TemplateProcessing: special token %q not defined", e.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id >= int32(len(t.idToToken)) {
						return fmt.Errorf("post_processor TemplateProcessing: id %d out of range", id)
					}
				}
				if seenSeq {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			default:
				return fmt.Errorf("post_processor TemplateProcessing: bad template piece %s", piece)
			}
		}
		return nil
	case "RobertaProcessing", "BertProcessing":
		id := func(pair []json.RawMessage) (int32, error) {
			var v int32
			if len(pair) != 2 {
				return 0, fmt.Errorf("post_processor %s: cls/sep must be [token, id]", p.Type)
			}
			if err := json.Unmarshal(pair[1], &v); err != nil || v < 0 || v >= int32(len(t.idToToken)) {
				return 0, fmt.Errorf("post_processor %s: bad id %s", p.Type, pair[1])
			}
			return v, nil
		}
		cls, err := id(p.Cls)
		if err != nil {
			return err
		}
		sep, err := id(p.Sep)
		if err != nil {
			return err
		}
		t.prefix, t.suffix = []int32{cls}, []int32{sep}
		return nil
	}
	return fmt.Errorf("post_processor type %q is not supported", p.Type)
}

// compactStrings moves the token texts and the byte strings keying bytesToID into one backing
// string each. Decoded one by one they are ~2 allocations per vocab entry, which every GC cycle
// of the process marks again (about 5 ms per cycle for a 128k vocab on one core); substrings of
// one string are marked as one object.
func (t *Tokenizer) compactStrings() {
	t.idToToken = intern(t.idToToken)
	if t.bpe == nil {
		return
	}
	keys := make([]string, 0, len(t.bpe.bytesToID))
	for k := range t.bpe.bytesToID {
		keys = append(keys, k)
	}
	keys = intern(keys)
	m := make(map[string]int32, len(keys))
	for _, k := range keys {
		m[k] = t.bpe.bytesToID[k]
	}
	t.bpe.bytesToID = m
}

// intern returns ss with every string a substring of one new string.
func intern(ss []string) []string {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, s := range ss {
		sb.WriteString(s)
	}
	all := sb.String()
	out := make([]string, len(ss))
	off := 0
	for i, s := range ss {
		out[i] = all[off : off+len(s)]
		off += len(s)
	}
	return out
}

// buildTokenBytes precomputes the bytes each id stands for, as the ByteLevel decoder maps it.
func (t *Tokenizer) buildTokenBytes() {
	n := len(t.idToToken)
	t.byteOff = make([]uint32, n+1)
	size := 0
	for _, s := range t.idToToken {
		size += len(s)
	}
	t.byteBlob = make([]byte, 0, size)
	for id, s := range t.idToToken {
		t.byteOff[id] = uint32(len(t.byteBlob))
		if t.flags[id]&flagExists != 0 {
			t.byteBlob, _ = byteLevelDecode(t.byteBlob, s)
		}
	}
	t.byteOff[n] = uint32(len(t.byteBlob))
}
