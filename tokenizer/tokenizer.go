// Package tokenizer is a pure-Go implementation of Hugging Face byte-level BPE tokenizers
// (tokenizer.json + tokenizer_config.json, as used by GPT-2, Llama-3, Qwen2/Qwen3 and their
// relatives) with exact parity with the `tokenizers` library: the same ids for the same text, the
// same text for the same ids.
//
// Encoding runs the tokenizers pipeline: added tokens are split out of the raw text (longest
// match first), the rest is normalized (NFC etc.), pre-tokenized by the model's split pattern
// (hand-written scanners with the exact Oniguruma semantics, lookahead included), and each piece
// is merged by BPE over raw bytes with a word cache. Decoding concatenates each token's bytes and
// replaces ill-formed UTF-8 with U+FFFD the way String::from_utf8_lossy does; no
// clean_up_tokenization_spaces is applied (transformers 5 output, which the fixtures record).
//
// A Tokenizer is safe for concurrent use; a Decoder (streaming detokenization) is not.
package tokenizer

import (
	"strings"
	"unicode/utf8"
)

const (
	flagExists uint8 = 1 << iota
	flagAdded
	flagSpecial
)

// preStep is one pre-tokenizer: a Split, or the final ByteLevel (whose regex, if used, is the
// GPT-2 pattern, and which may prepend a space to each piece).
type preStep struct {
	m           matcher
	behavior    int
	invert      bool
	byteLevel   bool
	prefixSpace bool
}

// Tokenizer is a loaded byte-level BPE tokenizer.
type Tokenizer struct {
	bpe       *bpeModel
	normForms []normForm
	steps     []preStep

	idToToken []string
	flags     []uint8
	otherToID map[string]int32 // vocab tokens that are not over the byte-level alphabet
	addedToID map[string]int32
	added     map[int32]*addedToken
	rawTrie   *tokenTrie // added tokens matched in the raw text
	normTrie  *tokenTrie // added tokens matched in the normalized text

	byteOff  []uint32 // token id -> its bytes in byteBlob
	byteBlob []byte

	prefix, suffix []int32 // ids Encode adds with addSpecial

	special        map[string]string
	bos, eos       int32
	hasBOS, hasEOS bool
	chatTemplate   string
	modelMaxLength int
}

// Encode returns the token ids of text. With addSpecial it adds what the post-processor (or
// tokenizer_config's add_bos_token / add_eos_token) prescribes, e.g. a BOS token. Text that is not
// valid UTF-8 is first repaired with U+FFFD replacements.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	if !utf8.ValidString(text) {
		text = lossyString([]byte(text))
	}
	e := encoder{t: t, out: make([]int32, 0, len(text)/3+len(t.prefix)+len(t.suffix)+2)}
	if addSpecial {
		e.out = append(e.out, t.prefix...)
	}
	t.rawTrie.split(text, e.rawText, e.token)
	if addSpecial {
		e.out = append(e.out, t.suffix...)
	}
	return e.out
}

type encoder struct {
	t      *Tokenizer
	out    []int32
	pieces []string
	tmp    []string
}

func (e *encoder) token(id int32) { e.out = append(e.out, id) }

// rawText handles a stretch of raw text between added tokens: normalize, then split out the
// normalized added tokens.
func (e *encoder) rawText(s string) {
	s = e.t.normalize(s)
	if e.t.normTrie.empty() {
		e.normText(s)
		return
	}
	e.t.normTrie.split(s, e.normText, e.token)
}

// normText pre-tokenizes normalized text and BPE-encodes each piece.
func (e *encoder) normText(s string) {
	t := e.t
	if len(t.steps) == 1 || len(t.steps) == 2 && t.isSimpleSplit() {
		e.fastPath(s)
		return
	}
	e.pieces = append(e.pieces[:0], s)
	for _, st := range t.steps {
		e.tmp = e.tmp[:0]
		for _, p := range e.pieces {
			if st.byteLevel {
				if st.prefixSpace && !strings.HasPrefix(p, " ") {
					p = " " + p
				}
				if st.m == nil {
					e.tmp = append(e.tmp, p)
					continue
				}
				e.tmp = splitSpans(e.tmp, p, st.m, splitIsolated, false)
				continue
			}
			e.tmp = splitSpans(e.tmp, p, st.m, st.behavior, st.invert)
		}
		e.pieces, e.tmp = e.tmp, e.pieces
	}
	for _, p := range e.pieces {
		e.out = t.bpe.encodeWord(e.out, p)
	}
}

// isSimpleSplit reports whether the pre-tokenizer is Split(pattern, Isolated) then a plain
// ByteLevel (no regex, no prefix space), the Qwen / Llama-3 layout.
func (t *Tokenizer) isSimpleSplit() bool {
	s, b := t.steps[0], t.steps[1]
	return !s.byteLevel && s.behavior == splitIsolated && !s.invert && b.m == nil && !b.prefixSpace
}

// fastPath handles a single isolating split (or a lone ByteLevel) without building piece lists.
func (e *encoder) fastPath(s string) {
	t := e.t
	st := t.steps[0]
	if st.byteLevel && st.prefixSpace && len(s) > 0 && s[0] != ' ' {
		s = " " + s
	}
	if st.m == nil {
		if len(s) > 0 {
			e.out = t.bpe.encodeWord(e.out, s)
		}
		return
	}
	bpe := t.bpe
	switch m := st.m.(type) {
	case llamaMatcher:
		for i := 0; i < len(s); {
			j := scanLlama(s, i, m.maxDigits)
			e.out = bpe.encodeWord(e.out, s[i:j])
			i = j
		}
	case gpt2Matcher:
		for i := 0; i < len(s); {
			j := scanGPT2(s, i)
			e.out = bpe.encodeWord(e.out, s[i:j])
			i = j
		}
	default:
		e.pieces = splitSpans(e.pieces[:0], s, st.m, splitIsolated, false)
		for _, p := range e.pieces {
			e.out = bpe.encodeWord(e.out, p)
		}
	}
}

// tokenBytes returns the bytes id stands for (nil for an unknown id).
func (t *Tokenizer) tokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.flags) {
		return nil
	}
	a, b := t.byteOff[id], t.byteOff[id+1]
	return t.byteBlob[a:b:b]
}

// skip reports whether Decode drops id: unknown ids always, special added tokens on request.
func (t *Tokenizer) skip(id int32, skipSpecial bool) bool {
	if id < 0 || int(id) >= len(t.flags) {
		return true
	}
	f := t.flags[id]
	return f&flagExists == 0 || skipSpecial && f&flagSpecial != 0
}

// Decode returns the text of ids. With skipSpecial, special added tokens are left out. Bytes that
// do not form valid UTF-8 become U+FFFD (one per maximal ill-formed subsequence).
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	buf := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		if t.skip(id, skipSpecial) {
			continue
		}
		a, b := t.byteOff[id], t.byteOff[id+1]
		buf = append(buf, t.byteBlob[a:b]...)
	}
	return lossyString(buf)
}

// VocabSize is the largest token id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// TokenBytes returns the raw bytes token id stands for (what it adds to decoded output), or nil
// for an unknown id. The slice is shared: do not modify it.
func (t *Tokenizer) TokenBytes(id int32) []byte { return t.tokenBytes(id) }

// IsSpecial reports whether id is a special added token (one Decode skips with skipSpecial).
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.flags) && t.flags[id]&flagSpecial != 0
}

// TokenID returns the id of a token string (an added token's content, or a vocab entry in its
// byte-level form such as "Ġthe").
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if id, ok := t.addedToID[s]; ok {
		return id, true
	}
	return t.vocabID(s, t.bpe)
}

// Token returns the token string of id ("" for an unknown id).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.idToToken) {
		return ""
	}
	return t.idToToken[id]
}

// BOS returns the id of tokenizer_config's bos_token, if it names a known token.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.hasBOS }

// EOS returns the id of tokenizer_config's eos_token, if it names a known token.
func (t *Tokenizer) EOS() (int32, bool) { return t.eos, t.hasEOS }

// ChatTemplate returns tokenizer_config's chat_template (the "default" one when it is a list of
// named templates; chat_template.jinja when the config has none), or "".
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// SpecialTokenStrings returns the bos_token, eos_token, pad_token and unk_token strings that
// tokenizer_config sets (absent keys are left out), for rendering chat templates.
func (t *Tokenizer) SpecialTokenStrings() map[string]string {
	m := make(map[string]string, len(t.special))
	for k, v := range t.special {
		m[k] = v
	}
	return m
}

// ModelMaxLength returns tokenizer_config's model_max_length, or math.MaxInt when it is absent or
// is transformers' "no limit" placeholder (1e30).
func (t *Tokenizer) ModelMaxLength() int { return t.modelMaxLength }

// AddsSpecialTokens returns the ids Encode puts before and after the text with addSpecial.
func (t *Tokenizer) AddsSpecialTokens() (prefix, suffix []int32) {
	return append([]int32(nil), t.prefix...), append([]int32(nil), t.suffix...)
}

// Decoder decodes a stream of ids incrementally. Each Add returns only the new text, never ending
// in a partial UTF-8 character (incomplete bytes wait for the next call); Flush emits what is
// still held back. The concatenation of all Add results and Flush equals Decode of all the ids.
// The work per call is proportional to the ids added.
type Decoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // an incomplete UTF-8 sequence, at most 3 bytes
	buf         []byte
}

// NewDecoder starts an incremental decode.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *Decoder {
	return &Decoder{t: t, skipSpecial: skipSpecial}
}

// Add decodes ids and returns the text delta they complete.
func (d *Decoder) Add(ids []int32) string {
	t := d.t
	buf := append(d.buf[:0], d.pending...)
	for _, id := range ids {
		if t.skip(id, d.skipSpecial) {
			continue
		}
		a, b := t.byteOff[id], t.byteOff[id+1]
		buf = append(buf, t.byteBlob[a:b]...)
	}
	cut := incompleteTail(buf)
	out := lossyString(buf[:cut])
	d.pending = append(d.pending[:0], buf[cut:]...)
	if cap(buf) <= 4096 {
		d.buf = buf
	}
	return out
}

// Flush returns the bytes still held back (an incomplete character, shown as U+FFFD) and resets
// the decoder for a new stream.
func (d *Decoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	s := lossyString(d.pending)
	d.pending = d.pending[:0]
	return s
}

// Pending reports how many bytes of an incomplete character Add is holding back.
func (d *Decoder) Pending() int { return len(d.pending) }
