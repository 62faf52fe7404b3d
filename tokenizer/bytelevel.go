package tokenizer

import (
	"unicode/utf8"
)

// The GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable rune, so that a
// byte-level BPE vocabulary is a set of strings over 256 runes. Printable Latin-1 bytes stand for
// themselves; the others (controls, space, 0x7F-0xA0, 0xAD) are shifted to U+0100 and up.
var (
	byteToRune [256]rune
	runeToByte map[rune]byte
	// runeToByteSmall maps runes below 0x200 (the whole alphabet lies there) for the hot path;
	// -1 marks a rune outside the alphabet.
	runeToByteSmall [0x200]int16
)

func init() {
	for i := range runeToByteSmall {
		runeToByteSmall[i] = -1
	}
	runeToByte = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		var r rune
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			r = rune(b)
		} else {
			r = rune(256 + n)
			n++
		}
		byteToRune[b] = r
		runeToByte[r] = byte(b)
		runeToByteSmall[r] = int16(b)
	}
}

// byteLevelDecode maps a token string over the byte-level alphabet back to the bytes it stands
// for. ok is false when some rune lies outside the alphabet; then, like the tokenizers ByteLevel
// decoder, the token stands for its own UTF-8 bytes.
func byteLevelDecode(dst []byte, tok string) (out []byte, ok bool) {
	start := len(dst)
	for _, r := range tok {
		if r < 0 || r >= 0x200 || runeToByteSmall[r] < 0 {
			return append(dst[:start], tok...), false
		}
		dst = append(dst, byte(runeToByteSmall[r]))
	}
	return dst, true
}

// appendLossy appends b to dst as valid UTF-8, replacing each ill-formed sequence with U+FFFD the
// way Rust's String::from_utf8_lossy and Python's errors="replace" do: one replacement per
// maximal subpart of an ill-formed sequence (Unicode 3.9, "substitution of maximal subparts").
func appendLossy(dst []byte, b []byte) []byte {
	for len(b) > 0 {
		// Copy the longest valid prefix in one go.
		i := 0
		for i < len(b) {
			c := b[i]
			if c < utf8.RuneSelf {
				i++
				continue
			}
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			i += size
		}
		dst = append(dst, b[:i]...)
		if i == len(b) {
			break
		}
		n := maximalSubpart(b[i:])
		dst = append(dst, "\uFFFD"...)
		b = b[i+n:]
	}
	return dst
}

// lossyString converts b to a string, replacing ill-formed UTF-8 like appendLossy.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string(appendLossy(make([]byte, 0, len(b)+8), b))
}

// seqInfo returns, for a lead byte, the length of the sequence it starts and the allowed range of
// the second byte; n == 0 for a byte that cannot start a multi-byte sequence.
func seqInfo(c byte) (n int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// maximalSubpart returns the length of the maximal subpart of the ill-formed sequence starting at
// b[0]: the lead byte plus the continuation bytes that still fit the sequence it begins.
func maximalSubpart(b []byte) int {
	n, lo, hi := seqInfo(b[0])
	if n == 0 {
		return 1
	}
	k := 1
	for k < n && k < len(b) {
		c := b[k]
		if k == 1 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		k++
	}
	if k == n { // a complete, valid sequence: not ill-formed (callers never ask for this)
		return n
	}
	return k
}

// incompleteTail returns the index where a trailing, still-incomplete but so far well-formed UTF-8
// sequence begins, or len(b) when b does not end in one. Bytes before that index decode the same
// whatever follows; the tail must wait for more bytes.
func incompleteTail(b []byte) int {
	for k := len(b) - 1; k >= 0 && k >= len(b)-3; k-- {
		c := b[k]
		if c < 0x80 {
			return len(b)
		}
		if c < 0xC0 { // continuation byte: look further back for the lead
			continue
		}
		n, lo, hi := seqInfo(c)
		if n == 0 || len(b)-k >= n {
			return len(b)
		}
		for j := k + 1; j < len(b); j++ {
			d := b[j]
			if j == k+1 {
				if d < lo || d > hi {
					return len(b)
				}
			} else if d < 0x80 || d > 0xBF {
				return len(b)
			}
		}
		return k
	}
	return len(b)
}
