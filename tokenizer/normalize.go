package tokenizer

import (
	"sort"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Unicode normalization with the semantics of tokenizers' normalizers, which use the crate
// unicode-normalization-alignments: Unicode 9.0 data, and no Stream-Safe Text Format (x/text's
// norm inserts U+034F COMBINING GRAPHEME JOINER into runs of more than 30 non-starters; tokenizers
// does not). Text that x/text's quick check finds already normalized is returned as is (normal
// under Unicode 15 implies normal under 9.0 for these forms); anything else goes through the
// UAX #15 algorithm below, fed by x/text's per-character data, with the characters that became
// normalization-relevant after Unicode 9.0 (post9Norm) treated as unassigned: starters with no
// decomposition that compose with nothing.

type normForm struct {
	name    string
	compose bool      // NFC / NFKC
	compat  bool      // NFKC / NFKD
	quick   norm.Form // x/text form for the quick check
	decomp  norm.Form // x/text form whose per-character decomposition we use (NFD or NFKD)
}

var (
	formNFC  = normForm{"NFC", true, false, norm.NFC, norm.NFD}
	formNFD  = normForm{"NFD", false, false, norm.NFD, norm.NFD}
	formNFKC = normForm{"NFKC", true, true, norm.NFKC, norm.NFKD}
	formNFKD = normForm{"NFKD", false, true, norm.NFKD, norm.NFKD}
)

// apply normalizes s.
func (f normForm) apply(s string) string {
	if f.quick.QuickSpanString(s) == len(s) {
		return s
	}
	rs := make([]rune, 0, len(s))
	var buf [utf8.UTFMax]byte
	for _, r := range s {
		rs = f.decompose(rs, r, &buf)
	}
	canonicalOrder(rs)
	if f.compose {
		rs = composeRunes(rs)
	}
	return string(rs)
}

const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

func isPost9(r rune) bool {
	i := sort.Search(len(post9Norm), func(i int) bool { return post9Norm[i][1] >= r })
	return i < len(post9Norm) && post9Norm[i][0] <= r
}

// decompose appends the full decomposition of r.
func (f normForm) decompose(dst []rune, r rune, buf *[utf8.UTFMax]byte) []rune {
	if r < 0xC0 && !f.compat {
		return append(dst, r) // nothing below U+00C0 has a canonical decomposition
	}
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		return appendHangul(dst, r)
	}
	if isPost9(r) {
		return append(dst, r)
	}
	n := utf8.EncodeRune(buf[:], r)
	d := f.decomp.Properties(buf[:n]).Decomposition()
	if d == nil {
		return append(dst, r)
	}
	for len(d) > 0 {
		c, size := utf8.DecodeRune(d)
		d = d[size:]
		if c >= hangulSBase && c < hangulSBase+hangulSCount {
			dst = appendHangul(dst, c)
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

func appendHangul(dst []rune, r rune) []rune {
	s := r - hangulSBase
	l := hangulLBase + s/hangulNCount
	v := hangulVBase + (s%hangulNCount)/hangulTCount
	t := hangulTBase + s%hangulTCount
	dst = append(dst, l, v)
	if t != hangulTBase {
		dst = append(dst, t)
	}
	return dst
}

// ccc returns the canonical combining class of r as Unicode 9.0 has it.
func ccc(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	if isPost9(r) {
		return 0
	}
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	return norm.NFD.Properties(buf[:n]).CCC()
}

// canonicalOrder stably sorts each run of non-starters by combining class (no length limit).
func canonicalOrder(rs []rune) {
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		if j-i > 1 {
			run := rs[i:j]
			sort.SliceStable(run, func(a, b int) bool { return ccc(run[a]) < ccc(run[b]) })
		}
		i = j
	}
}

// composeRunes is the canonical composition algorithm of UAX #15 over decomposed, ordered runes.
func composeRunes(rs []rune) []rune {
	out := rs[:0]
	starter := -1
	var lastCC uint8
	for _, c := range rs {
		cc := ccc(c)
		if starter >= 0 {
			adjacent := len(out)-1 == starter
			if adjacent || lastCC != 0 && lastCC < cc {
				if comp, ok := composePair(out[starter], c); ok {
					out[starter] = comp
					continue
				}
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		out = append(out, c)
		lastCC = cc
	}
	return out
}

var (
	compOnce  sync.Once
	compPairs map[uint64]rune
)

// composePair returns the primary composite of a and b (Unicode 9.0), if any.
func composePair(a, b rune) (rune, bool) {
	// Hangul LV and LVT.
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + ((a-hangulLBase)*hangulVCount+(b-hangulVBase))*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 &&
		b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	compOnce.Do(buildCompositions)
	r, ok := compPairs[uint64(a)<<32|uint64(b)]
	return r, ok
}

// buildCompositions derives the primary composites from x/text: each character whose canonical
// decomposition is a pair that NFC composes back into it (composition exclusions, singletons and
// non-starter decompositions drop out), leaving out characters new since Unicode 9.0.
func buildCompositions() {
	compPairs = make(map[uint64]rune, 1024)
	var buf [utf8.UTFMax]byte
	for r := rune(0xC0); r < 0x30000; r++ {
		if r >= 0xD800 && r <= 0xDFFF || r >= hangulSBase && r < hangulSBase+hangulSCount || isPost9(r) {
			continue
		}
		n := utf8.EncodeRune(buf[:], r)
		d := norm.NFD.Properties(buf[:n]).Decomposition()
		if d == nil {
			continue
		}
		full := []rune(string(d))
		if len(full) < 2 {
			continue
		}
		last := full[len(full)-1]
		first := []rune(norm.NFC.String(string(full[:len(full)-1])))
		if len(first) != 1 {
			continue
		}
		if norm.NFC.String(string([]rune{first[0], last})) != string(r) {
			continue
		}
		compPairs[uint64(first[0])<<32|uint64(last)] = r
	}
}
