package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The split patterns of byte-level BPE tokenizers use a negative lookahead (`\s+(?!\S)`) that Go's
// regexp lacks, so each known pattern is a hand-written scanner with the exact leftmost-first
// (backtracking) semantics Oniguruma gives it in Hugging Face tokenizers.

// Known split patterns, as they appear (JSON-decoded) in tokenizer.json.
const (
	// Qwen2 / Qwen2.5 / Qwen3: single digits.
	patternQwen = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama-3: digits in groups of up to three.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2, the pattern of the ByteLevel pre-tokenizer with use_regex=true.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// Character classes of the patterns. \r and \n are whitespace that some alternatives single out.
const (
	clOther uint8 = 0
	clL     uint8 = 1 // \p{L}
	clN     uint8 = 2 // \p{N}
	clS     uint8 = 4 // \s (Unicode White_Space)
	clNL    uint8 = 8 // [\r\n], always with clS
)

var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			asciiClass[c] = clL
		case unicode.IsNumber(r):
			asciiClass[c] = clN
		case r == '\r' || r == '\n':
			asciiClass[c] = clS | clNL
		case unicode.IsSpace(r):
			asciiClass[c] = clS
		}
	}
}

// classAt returns the class of the rune at s[i] and its size in bytes. s is valid UTF-8.
func classAt(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return goClass16(r), n
}

// goClass is the class of a non-ASCII rune by Go's Unicode tables.
func goClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clL
	case unicode.IsNumber(r):
		return clN
	case unicode.IsSpace(r):
		return clS
	}
	return clOther
}

type classRange struct {
	lo, hi rune
	c      uint8
}

// goClass16 is the class of a non-ASCII rune as Oniguruma's Unicode 16.0 data has it: Go's tables
// (Unicode 15.0) corrected by classOverrides, which only touches characters Go leaves unassigned.
func goClass16(r rune) uint8 {
	c := goClass(r)
	if c != clOther {
		return c
	}
	lo, hi := 0, len(classOverrides)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if classOverrides[m].hi < r {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(classOverrides) && classOverrides[lo].lo <= r {
		return classOverrides[lo].c
	}
	return clOther
}

// runWhile returns the end of the run of runes from i whose class has a bit of mask set.
func runWhile(s string, i int, mask uint8) int {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiClass[c]&mask == 0 {
				return i
			}
			i++
			continue
		}
		cl, n := classAt(s, i)
		if cl&mask == 0 {
			return i
		}
		i += n
	}
	return i
}

// runOther returns the end of the run of runes from i that are neither \s, \p{L} nor \p{N}.
func runOther(s string, i int) int {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiClass[c] != clOther {
				return i
			}
			i++
			continue
		}
		cl, n := classAt(s, i)
		if cl != clOther {
			return i
		}
		i += n
	}
	return i
}

// foldIs reports whether the rune at s[i] matches the ASCII lowercase letter lc case-insensitively
// (Unicode simple case folding, as Oniguruma's (?i) applies it) and returns its size.
func foldIs(s string, i int, lc byte) (bool, int) {
	if i >= len(s) {
		return false, 0
	}
	c := s[i]
	if c < utf8.RuneSelf {
		return c|0x20 == lc, 1
	}
	// The only non-ASCII runes that fold to the letters of the contractions: U+017F LATIN SMALL
	// LETTER LONG S folds to 's' (and U+212A KELVIN SIGN to 'k', which no contraction has).
	if lc == 's' && strings.HasPrefix(s[i:], "\u017F") {
		return true, 2
	}
	return false, 0
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at s[i] (an apostrophe), case-insensitively when
// fold is set. It returns the end of the match or -1.
func contraction(s string, i int, fold bool) int {
	j := i + 1
	if j >= len(s) {
		return -1
	}
	if !fold {
		switch s[j] {
		case 's', 't', 'm', 'd':
			return j + 1
		case 'r', 'v':
			if j+1 < len(s) && s[j+1] == 'e' {
				return j + 2
			}
		case 'l':
			if j+1 < len(s) && s[j+1] == 'l' {
				return j + 2
			}
		}
		return -1
	}
	for _, lc := range [...]byte{'s', 't', 'm', 'd'} {
		if ok, n := foldIs(s, j, lc); ok {
			return j + n
		}
	}
	for _, p := range [...][2]byte{{'r', 'e'}, {'v', 'e'}, {'l', 'l'}} {
		if ok, n := foldIs(s, j, p[0]); ok {
			if ok2, n2 := foldIs(s, j+n, p[1]); ok2 {
				return j + n + n2
			}
			return -1
		}
	}
	return -1
}

// whitespaceTail resolves the whitespace alternatives at s[i] (a whitespace rune):
// `\s*[\r\n]+` when nl, then `\s+(?!\S)`, then `\s+`.
func whitespaceTail(s string, i int, nl bool) int {
	j := i
	lastNL := -1
	lastStart := i
	for j < len(s) {
		cl, n := classAt(s, j)
		if cl&clS == 0 {
			break
		}
		if cl&clNL != 0 {
			lastNL = j
		}
		lastStart = j
		j += n
	}
	if nl && lastNL >= 0 {
		// \s* backtracks to the last [\r\n]; [\r\n]+ then takes it (the rune after it is not one).
		return lastNL + 1
	}
	if j == len(s) || lastStart == i {
		// At the end of input the lookahead holds; a single whitespace rune before \S is `\s+`.
		return j
	}
	// \s+(?!\S): leave the last whitespace rune to go with what follows.
	return lastStart
}

// scanLlama matches the Qwen (maxDigits 1) or Llama-3 (maxDigits 3) pattern at s[i] and returns
// the end of the match; the pattern matches at every position of a non-empty string.
func scanLlama(s string, i int, maxDigits int) int {
	c0, n0 := classAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if e := contraction(s, i, true); e >= 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0 == clL {
		return runWhile(s, i+n0, clL)
	}
	if c0&(clN|clNL) == 0 && i+n0 < len(s) {
		if c1, n1 := classAt(s, i+n0); c1 == clL {
			return runWhile(s, i+n0+n1, clL)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c0 == clN {
		j := i + n0
		for k := 1; k < maxDigits && j < len(s); k++ {
			c, n := classAt(s, j)
			if c != clN {
				break
			}
			j += n
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		if c1, _ := classAt(s, i+1); c1 == clOther {
			j = i + 1
		}
	}
	if j > i || c0 == clOther {
		j = runOther(s, j)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c0 is whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+
	return whitespaceTail(s, i, true)
}

// scanGPT2 matches the GPT-2 pattern at s[i].
func scanGPT2(s string, i int) int {
	if s[i] == '\'' {
		if e := contraction(s, i, false); e >= 0 {
			return e
		}
	}
	c0, n0 := classAt(s, i)
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		// ` ?X+` for X in \p{L}, \p{N}, [^\s\p{L}\p{N}]: the space goes with what follows.
		c1, n1 := classAt(s, i+1)
		switch c1 {
		case clL, clN:
			return runWhile(s, i+1+n1, c1)
		case clOther:
			return runOther(s, i+1+n1)
		}
		_ = j
	}
	switch c0 {
	case clL, clN:
		return runWhile(s, i+n0, c0)
	case clOther:
		return runOther(s, i+n0)
	}
	return whitespaceTail(s, i, false)
}

// A matcher finds the leftmost match at or after i: [start, end), or start < 0 for none.
type matcher interface {
	find(s string, i int) (start, end int)
}

type llamaMatcher struct{ maxDigits int }

func (m llamaMatcher) find(s string, i int) (int, int) {
	if i >= len(s) {
		return -1, -1
	}
	return i, scanLlama(s, i, m.maxDigits)
}

type gpt2Matcher struct{}

func (gpt2Matcher) find(s string, i int) (int, int) {
	if i >= len(s) {
		return -1, -1
	}
	return i, scanGPT2(s, i)
}

type literalMatcher struct{ lit string }

func (m literalMatcher) find(s string, i int) (int, int) {
	if m.lit == "" || i >= len(s) {
		return -1, -1
	}
	k := strings.Index(s[i:], m.lit)
	if k < 0 {
		return -1, -1
	}
	return i + k, i + k + len(m.lit)
}

// matcherForRegex returns the scanner for a known regex pattern, or nil.
func matcherForRegex(p string) matcher {
	switch p {
	case patternQwen:
		return llamaMatcher{maxDigits: 1}
	case patternLlama3:
		return llamaMatcher{maxDigits: 3}
	case patternGPT2:
		return gpt2Matcher{}
	}
	return nil
}

// Split behaviours (tokenizers SplitDelimiterBehavior).
const (
	splitIsolated = iota
	splitRemoved
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]int{
	"Isolated":           splitIsolated,
	"Removed":            splitRemoved,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

type span struct {
	start, end int
	match      bool
}

// splitSpans cuts s into pieces by m's matches the way tokenizers' NormalizedString::split does
// for the given behaviour, appending the non-empty pieces to dst.
func splitSpans(dst []string, s string, m matcher, behavior int, invert bool) []string {
	if len(s) == 0 {
		return dst
	}
	var spans []span
	i := 0
	for i < len(s) {
		st, en := m.find(s, i)
		if st < 0 {
			break
		}
		if en == st { // empty match: skip a rune
			_, n := utf8.DecodeRuneInString(s[st:])
			i = st + n
			continue
		}
		if st > i {
			spans = append(spans, span{i, st, false})
		}
		spans = append(spans, span{st, en, true})
		i = en
	}
	if i < len(s) {
		spans = append(spans, span{i, len(s), false})
	}
	if invert {
		for k := range spans {
			spans[k].match = !spans[k].match
		}
	}
	switch behavior {
	case splitIsolated:
		for _, sp := range spans {
			dst = append(dst, s[sp.start:sp.end])
		}
		return dst
	case splitRemoved:
		for _, sp := range spans {
			if !sp.match {
				dst = append(dst, s[sp.start:sp.end])
			}
		}
		return dst
	}
	// The merging behaviours, folded exactly as tokenizers does.
	var out []span
	prev := false
	switch behavior {
	case splitContiguous:
		for _, sp := range spans {
			if sp.match == prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
	case splitMergedWithPrevious:
		for _, sp := range spans {
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
	case splitMergedWithNext:
		for k := len(spans) - 1; k >= 0; k-- {
			sp := spans[k]
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
		for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
			out[a], out[b] = out[b], out[a]
		}
	}
	for _, sp := range out {
		dst = append(dst, s[sp.start:sp.end])
	}
	return dst
}
