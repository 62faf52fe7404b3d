package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// tokenTrie finds added tokens in text, leftmost first and longest at that position (like the
// aho-corasick LeftmostLongest matcher tokenizers uses).
type tokenTrie struct {
	nodes []trieNode
	first [256]bool // bytes that can start a token
	toks  []*addedToken
}

type trieNode struct {
	edges []trieEdge
	tok   int32 // index into toks, -1 if no token ends here
}

type trieEdge struct {
	b    byte
	next int32
}

func newTokenTrie() *tokenTrie {
	return &tokenTrie{nodes: []trieNode{{tok: -1}}}
}

func (t *tokenTrie) empty() bool { return len(t.toks) == 0 }

// child is node n's child by byte b, -1 if it has none.
func (t *tokenTrie) child(n int32, b byte) int32 {
	for _, e := range t.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	return -1
}

func (t *tokenTrie) add(tok *addedToken) {
	if tok.Content == "" {
		return
	}
	n := int32(0)
	for i := 0; i < len(tok.Content); i++ {
		b := tok.Content[i]
		nx := t.child(n, b)
		if nx < 0 {
			nx = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{tok: -1})
			t.nodes[n].edges = append(t.nodes[n].edges, trieEdge{b, nx})
		}
		n = nx
	}
	if t.nodes[n].tok < 0 { // the first of duplicate contents wins
		t.nodes[n].tok = int32(len(t.toks))
		t.toks = append(t.toks, tok)
	}
	t.first[tok.Content[0]] = true
}

// longestAt returns the longest token starting at s[i] and its end.
func (t *tokenTrie) longestAt(s string, i int) (*addedToken, int) {
	n := int32(0)
	var best *addedToken
	end := -1
	for j := i; j < len(s); j++ {
		nx := t.child(n, s[j])
		if nx < 0 {
			break
		}
		n = nx
		if k := t.nodes[n].tok; k >= 0 {
			best, end = t.toks[k], j+1
		}
	}
	return best, end
}

// split calls text(seg) for each stretch of s between added tokens and tok(id) for each added
// token found, in order, with the single_word / lstrip / rstrip rules of tokenizers'
// AddedVocabulary::find_matches.
func (t *tokenTrie) split(s string, text func(string), tok func(int32)) {
	if t.empty() {
		text(s)
		return
	}
	segStart := 0 // start of the text not yet emitted
	i := 0
	for i < len(s) {
		if !t.first[s[i]] {
			i++
			continue
		}
		at, end := t.longestAt(s, i)
		if at == nil {
			i++
			continue
		}
		start := i
		i = end // matching goes on after this match, taken or not
		if at.SingleWord {
			if start > 0 && endsWithWordChar(s[:start]) || end < len(s) && startsWithWordChar(s[end:]) {
				continue
			}
		}
		if at.LStrip {
			k := start
			for k > segStart {
				r, n := utf8.DecodeLastRuneInString(s[segStart:k])
				if !unicode.IsSpace(r) {
					break
				}
				k -= n
			}
			start = k
		}
		if at.RStrip {
			for end < len(s) {
				r, n := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += n
			}
			i = end
		}
		if start > segStart {
			text(s[segStart:start])
		}
		tok(at.ID)
		segStart = end
	}
	if segStart < len(s) {
		text(s[segStart:])
	}
}

// isWordChar is \w of Rust's regex crate, which tokenizers uses for single_word:
// [\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}].
func isWordChar(r rune) bool {
	if r < 0x80 {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.In(r, unicode.Nl, unicode.Other_Alphabetic, unicode.M, unicode.Nd, unicode.Pc) ||
		r == 0x200C || r == 0x200D || goClass16(r) == clL // letters new in Unicode 16
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordChar(r)
}
