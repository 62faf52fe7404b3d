// Package chardfa compiles regular expressions (the ECMA-262 subset JSON
// Schema patterns use) into deterministic automata over Unicode code
// points, and combines them: intersection, complement, length bounds,
// exclusion of a set of names, multiples of an integer. The automata are
// what package grammar spells out byte by byte inside JSON strings.
//
// Constructs whose meaning differs between regex dialects in ways that
// could let an invalid string through (lookaround, backreferences, word
// boundaries, Unicode property classes, inline flags) are refused.
package chardfa

import (
	"fmt"
	"sort"
	"strconv"
	"unicode"
)

// MaxRune is the largest code point.
const MaxRune = 0x10FFFF

// Range is the code points lo..hi.
type Range struct{ Lo, Hi rune }

type rop uint8

const (
	rClass rop = iota
	rConcat
	rAlt
	rRepeat
	rEmpty
	rBOL
	rEOL
)

type rnode struct {
	op       rop
	ranges   []Range
	subs     []*rnode
	min, max int // max -1 = unbounded
}

type rparser struct {
	s   []rune
	pos int
	// wide: give \d \w \s '.' the widest meaning any common dialect
	// gives them (for a language that contains every dialect's, which
	// negation needs); inNeg flips it inside a negated class, whose
	// complement makes the narrow meaning the wide one
	wide, inNeg bool
}

// widening is whether escapes at the current position take wide meanings.
func (p *rparser) widening() bool { return p.wide != p.inNeg }

func regexErr(pat, msg string) error {
	return fmt.Errorf("regex %q: %s", pat, msg)
}

func parseRegex(pat string, wide bool) (*rnode, error) {
	p := &rparser{s: []rune(pat), wide: wide}
	n, err := p.alt()
	if err != nil {
		return nil, regexErr(pat, err.Error())
	}
	if p.pos != len(p.s) {
		return nil, regexErr(pat, "unbalanced ')'")
	}
	return n, nil
}

func (p *rparser) more() bool { return p.pos < len(p.s) }
func (p *rparser) peek() rune { return p.s[p.pos] }

func (p *rparser) alt() (*rnode, error) {
	var alts []*rnode
	for {
		c, err := p.concat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, c)
		if p.more() && p.peek() == '|' {
			p.pos++
			continue
		}
		break
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &rnode{op: rAlt, subs: alts}, nil
}

func (p *rparser) concat() (*rnode, error) {
	var items []*rnode
	for p.more() && p.peek() != '|' && p.peek() != ')' {
		a, err := p.atom()
		if err != nil {
			return nil, err
		}
		a, err = p.quant(a)
		if err != nil {
			return nil, err
		}
		items = append(items, a)
	}
	if len(items) == 1 {
		return items[0], nil
	}
	if len(items) == 0 {
		return &rnode{op: rEmpty}, nil
	}
	return &rnode{op: rConcat, subs: items}, nil
}

func (p *rparser) quant(a *rnode) (*rnode, error) {
	for p.more() {
		c := p.peek()
		min, max := 0, 0
		switch c {
		case '*':
			min, max = 0, -1
			p.pos++
		case '+':
			min, max = 1, -1
			p.pos++
		case '?':
			min, max = 0, 1
			p.pos++
		case '{':
			save := p.pos
			mn, mx, ok := p.braces()
			if !ok {
				p.pos = save
				return a, nil // a literal '{', as in Annex B
			}
			min, max = mn, mx
		default:
			return a, nil
		}
		if a.op == rBOL || a.op == rEOL {
			return nil, fmt.Errorf("quantified anchor")
		}
		if p.more() && p.peek() == '?' { // lazy: same language
			p.pos++
		}
		if max >= 0 && min > max {
			return nil, fmt.Errorf("bad repetition {%d,%d}", min, max)
		}
		if min > 1000 || max > 1000 {
			return nil, fmt.Errorf("repetition count too large")
		}
		a = &rnode{op: rRepeat, subs: []*rnode{a}, min: min, max: max}
	}
	return a, nil
}

func (p *rparser) braces() (int, int, bool) {
	p.pos++ // {
	num := func() (int, bool) {
		st := p.pos
		for p.more() && p.peek() >= '0' && p.peek() <= '9' {
			p.pos++
		}
		if st == p.pos {
			return 0, false
		}
		v, err := strconv.Atoi(string(p.s[st:p.pos]))
		return v, err == nil
	}
	mn, ok := num()
	if !ok {
		return 0, 0, false
	}
	mx := mn
	if p.more() && p.peek() == ',' {
		p.pos++
		if p.more() && p.peek() == '}' {
			mx = -1
		} else if mx, ok = num(); !ok {
			return 0, 0, false
		}
	}
	if !p.more() || p.peek() != '}' {
		return 0, 0, false
	}
	p.pos++
	return mn, mx, true
}

func (p *rparser) atom() (*rnode, error) {
	c := p.peek()
	p.pos++
	switch c {
	case '^':
		return &rnode{op: rBOL}, nil
	case '$':
		return &rnode{op: rEOL}, nil
	case '.':
		if p.wide {
			return &rnode{op: rClass, ranges: negate([]Range{{'\n', '\n'}})}, nil
		}
		return &rnode{op: rClass, ranges: negate([]Range{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})}, nil
	case '(':
		if p.more() && p.peek() == '?' {
			p.pos++
			if !p.more() {
				return nil, fmt.Errorf("bad group")
			}
			switch p.peek() {
			case ':':
				p.pos++
			case '<':
				if p.pos+1 < len(p.s) && (p.s[p.pos+1] == '=' || p.s[p.pos+1] == '!') {
					return nil, fmt.Errorf("lookbehind is not supported")
				}
				for p.more() && p.peek() != '>' {
					p.pos++
				}
				if !p.more() {
					return nil, fmt.Errorf("bad group name")
				}
				p.pos++
			case 'P':
				for p.more() && p.peek() != '>' {
					p.pos++
				}
				if !p.more() {
					return nil, fmt.Errorf("bad group name")
				}
				p.pos++
			case '=', '!':
				return nil, fmt.Errorf("lookahead is not supported")
			default:
				return nil, fmt.Errorf("inline flags are not supported")
			}
		}
		n, err := p.alt()
		if err != nil {
			return nil, err
		}
		if !p.more() || p.peek() != ')' {
			return nil, fmt.Errorf("missing ')'")
		}
		p.pos++
		return n, nil
	case ')':
		return nil, fmt.Errorf("unbalanced ')'")
	case '[':
		return p.class()
	case '\\':
		rs, err := p.escape(false)
		if err != nil {
			return nil, err
		}
		return &rnode{op: rClass, ranges: rs}, nil
	case '*', '+', '?':
		return nil, fmt.Errorf("nothing to repeat")
	}
	return &rnode{op: rClass, ranges: []Range{{c, c}}}, nil
}

var (
	digitRanges = []Range{{'0', '9'}}
	wordRanges  = []Range{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	// \s matches only what every common dialect calls space; \S excludes
	// everything any dialect calls space, so neither over-accepts.
	spaceNarrow = []Range{{'\t', '\r'}, {' ', ' '}}
	spaceWide   = []Range{{'\t', '\r'}, {0x1c, ' '}, {0x85, 0x85}, {0xa0, 0xa0}, {0x1680, 0x1680}, {0x2000, 0x200a}, {0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000}, {0xfeff, 0xfeff}}
	// digitWide and wordWide hold everything any common dialect's \d and
	// \w match (Python's: Unicode digits; letters, numbers and _; marks and
	// connector punctuation added), each table range taken whole (a
	// superset where a table strides)
	digitWide = normRanges(append(tableRanges(unicode.N), digitRanges...))
	wordWide  = normRanges(append(append(append(append(tableRanges(unicode.L), tableRanges(unicode.N)...), tableRanges(unicode.M)...), tableRanges(unicode.Pc)...), wordRanges...))
)

// tableRanges is a superset of t's code points as ranges (strided ranges taken whole).
func tableRanges(t *unicode.RangeTable) []Range {
	var rs []Range
	for _, r := range t.R16 {
		rs = append(rs, Range{rune(r.Lo), rune(r.Hi)})
	}
	for _, r := range t.R32 {
		rs = append(rs, Range{rune(r.Lo), rune(r.Hi)})
	}
	return rs
}

// escape parses after a backslash; inClass selects class-context meanings.
func (p *rparser) escape(inClass bool) ([]Range, error) {
	if !p.more() {
		return nil, fmt.Errorf("trailing backslash")
	}
	c := p.peek()
	p.pos++
	one := func(r rune) ([]Range, error) { return []Range{{r, r}}, nil }
	wide := p.widening()
	switch c {
	case 'd':
		if wide {
			return digitWide, nil
		}
		return digitRanges, nil
	case 'D':
		if wide {
			return negate(digitRanges), nil
		}
		// Some dialects' \d covers all Unicode digits; stay ASCII-only outside them.
		return negate(append([]Range{{'0', '9'}}, Range{0x80, MaxRune})), nil
	case 'w':
		if wide {
			return wordWide, nil
		}
		return wordRanges, nil
	case 'W':
		if wide {
			return negate(wordRanges), nil
		}
		return negate(append(append([]Range{}, wordRanges...), Range{0x80, MaxRune})), nil
	case 's':
		if wide {
			return spaceWide, nil
		}
		return spaceNarrow, nil
	case 'S':
		if wide {
			return negate(spaceNarrow), nil
		}
		return negate(spaceWide), nil
	case 'n':
		return one('\n')
	case 'r':
		return one('\r')
	case 't':
		return one('\t')
	case 'f':
		return one('\f')
	case 'v':
		return one('\v')
	case '0':
		if p.more() && p.peek() >= '0' && p.peek() <= '9' {
			return nil, fmt.Errorf("octal escapes are not supported")
		}
		return one(0)
	case 'b':
		if inClass {
			return one('\b')
		}
		return nil, fmt.Errorf("word boundary is not supported")
	case 'B':
		return nil, fmt.Errorf("word boundary is not supported")
	case 'x':
		return p.hexEsc(2)
	case 'u':
		if p.more() && p.peek() == '{' {
			return nil, fmt.Errorf(`\u{...} is not supported`)
		}
		return p.hexEsc(4)
	case 'p', 'P':
		return nil, fmt.Errorf("unicode property classes are not supported")
	case 'c', 'k':
		return nil, fmt.Errorf(`\%c is not supported`, c)
	}
	if c >= '1' && c <= '9' {
		return nil, fmt.Errorf("backreferences are not supported")
	}
	if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return nil, fmt.Errorf(`unknown escape \%c`, c)
	}
	return one(c)
}

func (p *rparser) hexEsc(n int) ([]Range, error) {
	if p.pos+n > len(p.s) {
		return nil, fmt.Errorf("short hex escape")
	}
	v, err := strconv.ParseUint(string(p.s[p.pos:p.pos+n]), 16, 32)
	if err != nil {
		return nil, fmt.Errorf("bad hex escape")
	}
	p.pos += n
	r := rune(v)
	if r >= 0xD800 && r <= 0xDFFF {
		return nil, fmt.Errorf("surrogate escapes are not supported")
	}
	return []Range{{r, r}}, nil
}

func (p *rparser) class() (*rnode, error) {
	neg := false
	if p.more() && p.peek() == '^' {
		neg = true
		p.pos++
	}
	p.inNeg = neg
	defer func() { p.inNeg = false }()
	var rs []Range
	first := true
	for {
		if !p.more() {
			return nil, fmt.Errorf("missing ']'")
		}
		c := p.peek()
		if c == ']' && !first {
			p.pos++
			break
		}
		if c == ']' && first { // "[]" matches nothing in ECMA; "[^]" everything
			p.pos++
			break
		}
		first = false
		lo, set, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if set != nil {
			rs = append(rs, set...)
			continue
		}
		if p.pos+1 < len(p.s) && p.peek() == '-' && p.s[p.pos+1] != ']' {
			p.pos++
			hi, set2, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if set2 != nil {
				return nil, fmt.Errorf("bad class range")
			}
			if hi < lo {
				return nil, fmt.Errorf("bad class range")
			}
			rs = append(rs, Range{lo, hi})
			continue
		}
		rs = append(rs, Range{lo, lo})
	}
	rs = normRanges(rs)
	if neg {
		rs = negate(rs)
	}
	return &rnode{op: rClass, ranges: rs}, nil
}

func (p *rparser) classAtom() (rune, []Range, error) {
	c := p.peek()
	p.pos++
	if c == '[' && p.more() && (p.peek() == ':' || p.peek() == '=' || p.peek() == '.') {
		return 0, nil, fmt.Errorf("POSIX classes are not supported")
	}
	if c != '\\' {
		return c, nil, nil
	}
	if p.more() && p.peek() == '-' {
		p.pos++
		return '-', nil, nil
	}
	rs, err := p.escape(true)
	if err != nil {
		return 0, nil, err
	}
	if len(rs) == 1 && rs[0].Lo == rs[0].Hi {
		return rs[0].Lo, nil, nil
	}
	return 0, rs, nil
}

func normRanges(rs []Range) []Range {
	rs = append([]Range(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Lo < rs[j].Lo })
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi+1 {
			if r.Hi > out[n-1].Hi {
				out[n-1].Hi = r.Hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// negate complements within the encodable code points (no surrogates).
func negate(rs []Range) []Range {
	rs = normRanges(append(append([]Range(nil), rs...), Range{0xD800, 0xDFFF}))
	var out []Range
	next := rune(0)
	for _, r := range rs {
		if r.Lo > next {
			out = append(out, Range{next, r.Lo - 1})
		}
		if r.Hi+1 > next {
			next = r.Hi + 1
		}
	}
	if next <= MaxRune {
		out = append(out, Range{next, MaxRune})
	}
	return out
}

var AnyChar = negate(nil)

// AppendAny appends transitions to `to` on every char of [lo,hi] (surrogates excluded).
func AppendAny(out []Edge, lo, hi rune, to int32) []Edge {
	for _, r := range AnyChar {
		l, h := max(lo, r.Lo), min(hi, r.Hi)
		if l <= h {
			out = append(out, Edge{l, h, to})
		}
	}
	return out
}

// Negate returns the code points (surrogates aside) not in rs.
func Negate(rs []Range) []Range { return negate(rs) }
