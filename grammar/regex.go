package grammar

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Regular expressions (ECMA-262 syntax, as JSON Schema "pattern" uses) are
// compiled to character-level DFAs (edges are code point ranges). Constructs
// whose meaning differs between regex dialects in ways that could let an
// invalid string through (lookaround, backreferences, word boundaries,
// Unicode property classes, inline flags) are rejected at compile time.

const maxRune = 0x10FFFF

type rrange struct{ lo, hi rune }

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
	ranges   []rrange
	subs     []*rnode
	min, max int // max -1 = unbounded
}

type rparser struct {
	s   []rune
	pos int
}

func regexErr(pat, msg string) error {
	return &Error{Reason: fmt.Sprintf("regex %q: %s", pat, msg)}
}

func parseRegex(pat string) (*rnode, error) {
	p := &rparser{s: []rune(pat)}
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
		return &rnode{op: rClass, ranges: negate([]rrange{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})}, nil
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
	return &rnode{op: rClass, ranges: []rrange{{c, c}}}, nil
}

var (
	digitRanges = []rrange{{'0', '9'}}
	wordRanges  = []rrange{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	// \s matches only what every common dialect calls space; \S excludes
	// everything any dialect calls space, so neither over-accepts.
	spaceNarrow = []rrange{{'\t', '\r'}, {' ', ' '}}
	spaceWide   = []rrange{{'\t', '\r'}, {0x1c, ' '}, {0x85, 0x85}, {0xa0, 0xa0}, {0x1680, 0x1680}, {0x2000, 0x200a}, {0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000}, {0xfeff, 0xfeff}}
)

// escape parses after a backslash; inClass selects class-context meanings.
func (p *rparser) escape(inClass bool) ([]rrange, error) {
	if !p.more() {
		return nil, fmt.Errorf("trailing backslash")
	}
	c := p.peek()
	p.pos++
	one := func(r rune) ([]rrange, error) { return []rrange{{r, r}}, nil }
	switch c {
	case 'd':
		return digitRanges, nil
	case 'D':
		// Some dialects' \d covers all Unicode digits; stay ASCII-only outside them.
		return negate(append([]rrange{{'0', '9'}}, rrange{0x80, maxRune})), nil
	case 'w':
		return wordRanges, nil
	case 'W':
		return negate(append(append([]rrange{}, wordRanges...), rrange{0x80, maxRune})), nil
	case 's':
		return spaceNarrow, nil
	case 'S':
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

func (p *rparser) hexEsc(n int) ([]rrange, error) {
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
	return []rrange{{r, r}}, nil
}

func (p *rparser) class() (*rnode, error) {
	neg := false
	if p.more() && p.peek() == '^' {
		neg = true
		p.pos++
	}
	var rs []rrange
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
			rs = append(rs, rrange{lo, hi})
			continue
		}
		rs = append(rs, rrange{lo, lo})
	}
	rs = normRanges(rs)
	if neg {
		rs = negate(rs)
	}
	return &rnode{op: rClass, ranges: rs}, nil
}

func (p *rparser) classAtom() (rune, []rrange, error) {
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
	if len(rs) == 1 && rs[0].lo == rs[0].hi {
		return rs[0].lo, nil, nil
	}
	return 0, rs, nil
}

func normRanges(rs []rrange) []rrange {
	rs = append([]rrange(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	var out []rrange
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			if r.hi > out[n-1].hi {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// negate complements within the encodable code points (no surrogates).
func negate(rs []rrange) []rrange {
	rs = normRanges(append(append([]rrange(nil), rs...), rrange{0xD800, 0xDFFF}))
	var out []rrange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, rrange{next, r.lo - 1})
		}
		if r.hi+1 > next {
			next = r.hi + 1
		}
	}
	if next <= maxRune {
		out = append(out, rrange{next, maxRune})
	}
	return out
}

var anyChar = negate(nil)

// appendAny appends transitions to `to` on every char of [lo,hi] (surrogates excluded).
func appendAny(out []ctr, lo, hi rune, to int32) []ctr {
	for _, r := range anyChar {
		l, h := max(lo, r.lo), min(hi, r.hi)
		if l <= h {
			out = append(out, ctr{l, h, to})
		}
	}
	return out
}

// ---- character NFA / DFA ----

type cedge struct {
	lo, hi rune
	to     int32
}

type cnfa struct {
	edges [][]cedge
	eps   [][]int32
}

func (n *cnfa) add() int32 {
	n.edges = append(n.edges, nil)
	n.eps = append(n.eps, nil)
	return int32(len(n.edges) - 1)
}

const maxCharStates = 4000

// build adds r between fresh nodes and returns them.
func (n *cnfa) build(r *rnode, budget *int) (int32, int32, error) {
	*budget--
	if *budget < 0 || len(n.edges) > 20*maxCharStates {
		return 0, 0, fmt.Errorf("pattern too large")
	}
	in, out := n.add(), n.add()
	switch r.op {
	case rEmpty:
		n.eps[in] = append(n.eps[in], out)
	case rClass:
		for _, rg := range r.ranges {
			n.edges[in] = append(n.edges[in], cedge{rg.lo, rg.hi, out})
		}
	case rConcat:
		cur := in
		for _, s := range r.subs {
			a, b, err := n.build(s, budget)
			if err != nil {
				return 0, 0, err
			}
			n.eps[cur] = append(n.eps[cur], a)
			cur = b
		}
		n.eps[cur] = append(n.eps[cur], out)
	case rAlt:
		for _, s := range r.subs {
			a, b, err := n.build(s, budget)
			if err != nil {
				return 0, 0, err
			}
			n.eps[in] = append(n.eps[in], a)
			n.eps[b] = append(n.eps[b], out)
		}
	case rRepeat:
		cur := in
		for i := 0; i < r.min; i++ {
			a, b, err := n.build(r.subs[0], budget)
			if err != nil {
				return 0, 0, err
			}
			n.eps[cur] = append(n.eps[cur], a)
			cur = b
		}
		if r.max < 0 {
			a, b, err := n.build(r.subs[0], budget)
			if err != nil {
				return 0, 0, err
			}
			n.eps[cur] = append(n.eps[cur], a, out)
			n.eps[b] = append(n.eps[b], a, out)
		} else {
			for i := r.min; i < r.max; i++ {
				a, b, err := n.build(r.subs[0], budget)
				if err != nil {
					return 0, 0, err
				}
				n.eps[cur] = append(n.eps[cur], a, out)
				cur = b
			}
			n.eps[cur] = append(n.eps[cur], out)
		}
	default:
		return 0, 0, fmt.Errorf("anchor in an unsupported position")
	}
	return in, out, nil
}

type ctr struct {
	lo, hi rune
	to     int32
}

// cdfa is a complete-ish character DFA: missing ranges go to the dead state.
type cdfa struct {
	trans [][]ctr
	acc   []bool
	// counted: built by lengthDFA alone (state i = i chars read, any char
	// allowed), up to maxLen chars (-1 unbounded)
	counted bool
	maxLen  int
	// total: every state defines every char (the exclusion automata of
	// open object keys), so any char sequence stays alive from any state
	total bool
}

func (n *cnfa) closure(set []int32) []int32 {
	seen := map[int32]bool{}
	var out []int32
	var stack []int32
	stack = append(stack, set...)
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
		stack = append(stack, n.eps[s]...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func setKey(s []int32) string {
	var sb strings.Builder
	for _, x := range s {
		sb.WriteString(strconv.Itoa(int(x)))
		sb.WriteByte(',')
	}
	return sb.String()
}

func (n *cnfa) determinize(start, final int32) (*cdfa, error) {
	d := &cdfa{}
	idx := map[string]int32{}
	var sets [][]int32
	addSet := func(s []int32) int32 {
		k := setKey(s)
		if i, ok := idx[k]; ok {
			return i
		}
		i := int32(len(sets))
		idx[k] = i
		sets = append(sets, s)
		d.trans = append(d.trans, nil)
		acc := false
		for _, x := range s {
			if x == final {
				acc = true
			}
		}
		d.acc = append(d.acc, acc)
		return i
	}
	addSet(n.closure([]int32{start}))
	for i := 0; i < len(sets); i++ {
		if len(sets) > maxCharStates {
			return nil, fmt.Errorf("pattern automaton too large")
		}
		var pts []rune
		for _, s := range sets[i] {
			for _, e := range n.edges[s] {
				pts = append(pts, e.lo, e.hi+1)
			}
		}
		if len(pts) == 0 {
			continue
		}
		sort.Slice(pts, func(a, b int) bool { return pts[a] < pts[b] })
		pts = dedupRunes(pts)
		for k := 0; k+1 < len(pts); k++ {
			lo, hi := pts[k], pts[k+1]-1
			var tgt []int32
			for _, s := range sets[i] {
				for _, e := range n.edges[s] {
					if e.lo <= lo && hi <= e.hi {
						tgt = append(tgt, e.to)
					}
				}
			}
			if len(tgt) == 0 {
				continue
			}
			t := addSet(n.closure(tgt))
			tr := d.trans[i]
			if m := len(tr); m > 0 && tr[m-1].to == t && tr[m-1].hi+1 == lo {
				tr[m-1].hi = hi
			} else {
				tr = append(tr, ctr{lo, hi, t})
			}
			d.trans[i] = tr
		}
	}
	return d, nil
}

func dedupRunes(p []rune) []rune {
	out := p[:0]
	for i, x := range p {
		if i == 0 || x != p[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// regexDFA compiles a JSON Schema pattern (search semantics unless anchored).
// regexCache memoizes regexDFA across compiles (format regexes and common
// patterns recur in most schemas). The DFAs it hands out are shared, so
// nothing may modify a cdfa after it is built.
var regexCache struct {
	sync.Mutex
	m map[string]*cdfa
}

const regexCacheMax = 4096

// regexDFA returns the DFA of pat: anchored, or matching anywhere in the
// string when search is set (JSON Schema pattern semantics).
func regexDFA(pat string, search bool) (*cdfa, error) {
	key := "a" + pat
	if search {
		key = "s" + pat
	}
	regexCache.Lock()
	d, ok := regexCache.m[key]
	regexCache.Unlock()
	if ok {
		return d, nil
	}
	d, err := buildRegexDFA(pat, search)
	if err != nil {
		return nil, err
	}
	if len(d.trans) > 4096 {
		return d, nil // too large to keep around
	}
	regexCache.Lock()
	if regexCache.m == nil || len(regexCache.m) >= regexCacheMax {
		regexCache.m = map[string]*cdfa{}
	}
	regexCache.m[key] = d
	regexCache.Unlock()
	return d, nil
}

func buildRegexDFA(pat string, search bool) (*cdfa, error) {
	r, err := parseRegex(pat)
	if err != nil {
		return nil, err
	}
	var branches []*rnode
	if r.op == rAlt {
		branches = r.subs
	} else {
		branches = []*rnode{r}
	}
	anyStar := &rnode{op: rRepeat, subs: []*rnode{{op: rClass, ranges: anyChar}}, min: 0, max: -1}
	var alts []*rnode
	for _, b := range branches {
		var items []*rnode
		if b.op == rConcat {
			items = append(items, b.subs...)
		} else {
			items = []*rnode{b}
		}
		bol, eol := !search, !search
		if len(items) > 0 && items[0].op == rBOL {
			bol = true
			items = items[1:]
		}
		if len(items) > 0 && items[len(items)-1].op == rEOL {
			eol = true
			items = items[:len(items)-1]
		}
		var seq []*rnode
		if !bol {
			seq = append(seq, anyStar)
		}
		seq = append(seq, items...)
		if !eol {
			seq = append(seq, anyStar)
		}
		alts = append(alts, &rnode{op: rConcat, subs: seq})
	}
	n := &cnfa{}
	budget := 200000
	in, out, err := n.build(&rnode{op: rAlt, subs: alts}, &budget)
	if err != nil {
		return nil, regexErr(pat, err.Error())
	}
	d, err := n.determinize(in, out)
	if err != nil {
		return nil, regexErr(pat, err.Error())
	}
	return d, nil
}

// intersect builds the product DFA.
func intersect(a, b *cdfa) (*cdfa, error) {
	d := &cdfa{}
	idx := map[[2]int32]int32{}
	var pairs [][2]int32
	add := func(p [2]int32) int32 {
		if i, ok := idx[p]; ok {
			return i
		}
		i := int32(len(pairs))
		idx[p] = i
		pairs = append(pairs, p)
		d.trans = append(d.trans, nil)
		d.acc = append(d.acc, a.acc[p[0]] && b.acc[p[1]])
		return i
	}
	add([2]int32{0, 0})
	for i := 0; i < len(pairs); i++ {
		if len(pairs) > maxCharStates*4 {
			return nil, &Error{Reason: "string constraints combine into too large an automaton"}
		}
		ta, tb := a.trans[pairs[i][0]], b.trans[pairs[i][1]]
		x, y := 0, 0
		for x < len(ta) && y < len(tb) {
			lo := max(ta[x].lo, tb[y].lo)
			hi := min(ta[x].hi, tb[y].hi)
			if lo <= hi {
				t := add([2]int32{ta[x].to, tb[y].to})
				d.trans[i] = append(d.trans[i], ctr{lo, hi, t})
			}
			if ta[x].hi < tb[y].hi {
				x++
			} else {
				y++
			}
		}
	}
	return d, nil
}

// lengthDFA accepts strings of min..max chars (max -1 = unbounded).
func lengthDFA(minL, maxL int) *cdfa {
	top := maxL
	if maxL < 0 {
		top = minL
	}
	d := &cdfa{trans: make([][]ctr, top+1), acc: make([]bool, top+1), counted: true, maxLen: maxL}
	for i := 0; i <= top; i++ {
		d.acc[i] = i >= minL
		next := i + 1
		if i == top {
			if maxL >= 0 {
				continue
			}
			next = i
		}
		d.trans[i] = appendAny(d.trans[i], 0, maxRune, int32(next))
	}
	return d
}

// excludeDFA accepts every string except the given ones.
func excludeDFA(names []string) *cdfa {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	d := &cdfa{total: true}
	// The trie of names, built from the sorted list: the names below a
	// trie node are a contiguous run sharing its prefix, split by their
	// next char. State 0 is the root; the sink (any string that left the
	// trie) is added last.
	var build func(run []string, depth int) int32
	build = func(run []string, depth int) int32 {
		st := int32(len(d.trans))
		d.trans = append(d.trans, nil)
		d.acc = append(d.acc, true)
		if len(run[0]) == depth {
			d.acc[st] = false // a name ends here
			run = run[1:]
		}
		var tr []ctr
		for len(run) > 0 {
			r, n := utf8.DecodeRuneInString(run[0][depth:])
			j := 1
			for j < len(run) && strings.HasPrefix(run[j][depth:], run[0][depth:depth+n]) {
				j++
			}
			tr = append(tr, ctr{r, r, build(run[:j], depth+n)})
			run = run[j:]
		}
		d.trans[st] = tr
		return st
	}
	if len(names) > 0 {
		build(names, 0)
	} else {
		d.trans, d.acc = [][]ctr{nil}, []bool{true}
	}
	sink := int32(len(d.trans))
	for i, kids := range d.trans {
		var tr []ctr
		prev := rune(0)
		for _, k := range kids {
			if k.lo > prev {
				tr = appendAny(tr, prev, k.lo-1, sink)
			}
			tr = append(tr, k)
			prev = k.lo + 1
		}
		d.trans[i] = appendAny(tr, prev, maxRune, sink)
	}
	d.trans = append(d.trans, appendAny(nil, 0, maxRune, sink))
	d.acc = append(d.acc, true)
	return d
}

// utf8Seqs calls emit with byte-range sequences covering exactly [lo,hi].
func utf8Seqs(lo, hi rune, emit func(seq [][2]byte)) {
	if lo > hi {
		return
	}
	if lo <= 0xDFFF && hi >= 0xD800 { // skip surrogates
		utf8Seqs(lo, 0xD7FF, emit)
		utf8Seqs(0xE000, hi, emit)
		return
	}
	for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			utf8Seqs(lo, b, emit)
			utf8Seqs(b+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([][2]byte{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*uint(i)) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Seqs(lo, lo|m, emit)
				utf8Seqs((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Seqs(lo, (hi&^m)-1, emit)
				utf8Seqs(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([][2]byte, n)
	for i := 0; i < n; i++ {
		seq[i] = [2]byte{a[i], b[i]}
	}
	emit(seq)
}
