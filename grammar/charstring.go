package grammar

import (
	"encoding/binary"
	"slices"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// charTail is the multi-byte part of a char set (see tailPart) as rules,
// one per group of first bytes, and the call nodes returning to each target.
type charTail struct {
	groups []tailGroup
	calls  map[int32]int32 // target -> its first call node (one per group, consecutive)
}

// tailGroup is a set of first bytes of the char tail that lead into the
// same rule.
type tailGroup struct {
	ranges [][2]byte
	rule   int32
}

// freeString emits a JSON string (quotes included) with any content, using
// the reference body automaton so the per-Compiler string tables apply.
func (b *builder) freeString() fragment {
	in, out := b.node(), b.node()
	b.edge(in, '"', '"', b.freeBody(out))
	return fragment{in, out}
}

// charString emits a JSON string whose decoded value is accepted by d.
// States that accept and loop on every char become a tagged free-string
// body, so their masks come from the per-Compiler string tables.
func (b *builder) charString(d *chardfa.DFA) fragment {
	in, out := b.node(), b.node()
	ns := make([]int32, len(d.Trans))
	free := make([]bool, len(d.Trans))
	memo2 := map[runKey]int32{}
	pr := plainRuns(d)
	tot := totalStates(d)
	for i := range ns {
		if d.Accept[i] && coversAllTo(d.Trans[i], int32(i)) {
			f := b.freeBody(out)
			ns[i], free[i] = f, true
			continue
		}
		ns[i] = b.node()
		b.g.nodes[ns[i]].total = tot[i]
		if cl := loopClass(d.Trans[i], int32(i)); popcount2(cl) >= 8 {
			b.g.nodes[ns[i]].loop, b.g.nodes[ns[i]].run = b.classID(cl), unboundedRem
		} else if pr[i] >= 2 {
			b.g.nodes[ns[i]].loop, b.g.nodes[ns[i]].run = b.classID(plainASCII), pr[i]
		} else if cl := runClass(d.Trans[i]); popcount2(cl) >= 8 {
			if r := runLen(d, int32(i), cl, map[int32]bool{}, memo2); r > 0 {
				b.g.nodes[ns[i]].loop, b.g.nodes[ns[i]].run = b.classID(cl), r
			}
		}
		if d.Counted {
			rem := int32(unboundedRem)
			if d.MaxLen >= 0 {
				rem = int32(d.MaxLen - i)
			}
			b.g.nodes[ns[i]].charsLeft = rem
		}
	}
	b.edge(in, '"', '"', ns[0])
	memo := map[string]int32{}
	pend := map[int32]uint64{}
	for i, tr := range d.Trans {
		if free[i] {
			continue
		}
		if d.Accept[i] {
			b.edge(ns[i], '"', '"', out)
		}
		to := nonASCIITo(tr)
		if len(d.Trans) >= tailStates && !(to >= 0 && free[to]) {
			// Literal chars get edges here; the chars written with more
			// than one byte call the grammar's shared rules for them, per
			// target (a few nodes per state instead of dozens).
			for _, t := range tr {
				b.plainEdges(ns[i], t.Lo, t.Hi, ns[t.To])
			}
			for _, tp := range tailParts(tr) {
				b.addCharTail(ns[i], tp.chars, ns[tp.to])
			}
			continue
		}
		for _, t := range tr {
			if to >= 0 && free[to] && t.To == to && t.Hi >= 0x80 {
				if t.Lo < 0x80 {
					b.charRange(ns[i], t.Lo, 0x7F, ns[t.To], memo, pend)
				}
				continue
			}
			b.charRange(ns[i], t.Lo, t.Hi, ns[t.To], memo, pend)
		}
		for _, t := range tr { // in transition order, so node numbering is stable
			if esc, ok := pend[ns[t.To]]; ok {
				b.edge(ns[i], '\\', '\\', b.escNode(ns[t.To], esc, memo))
				delete(pend, ns[t.To])
			}
		}
		if to >= 0 && free[to] {
			// Every non-ASCII char leads into a free body: enter it at the
			// substate after the lead byte, so states inside the char are
			// tagged and masks take the string-table path.
			q := b.freeQ[ns[to]]
			for c := 0xC2; c <= 0xF4; {
				// one edge per run of lead bytes entering the same substate
				sq, e := bodyStep(bodyNormal, byte(c)), c
				for e < 0xF4 && bodyStep(bodyNormal, byte(e+1)) == sq {
					e++
				}
				b.edge(ns[i], byte(c), byte(e), q[sq])
				c = e + 1
			}
		}
	}
	return fragment{in, out}
}

// freeBody builds the reference string-body automaton closing into out and
// returns its normal-substate node.
func (b *builder) freeBody(out int32) int32 {
	var q [numBodyStates]int32
	for i := range q {
		q[i] = b.node()
		b.g.nodes[q[i]].bodyState = int8(i)
	}
	if b.freeQ == nil {
		b.freeQ = map[int32][numBodyStates]int32{}
	}
	b.freeQ[q[bodyNormal]] = q
	for _, e := range freeBodyEdges {
		to := out
		if e.to != bodyClosed {
			to = q[e.to]
		}
		b.edge(q[e.from], e.lo, e.hi, to)
	}
	return q[bodyNormal]
}

// suffix returns a node from which the byte-range sequence seq leads to c;
// nodes are shared per (c, seq) so wide char ranges stay small.
func (b *builder) suffix(c int32, seq [][2]byte, memo map[string]int32) int32 {
	if len(seq) == 0 {
		return c
	}
	key := make([]byte, 0, 4+2*len(seq))
	key = append(key, byte(c), byte(c>>8), byte(c>>16), byte(c>>24))
	for _, r := range seq {
		key = append(key, r[0], r[1])
	}
	if n, ok := memo[string(key)]; ok {
		return n
	}
	n := b.node()
	b.edge(n, seq[0][0], seq[0][1], b.suffix(c, seq[1:], memo))
	memo[string(key)] = n
	return n
}

// charRange adds paths from a to c spelling each char of [lo,hi] in a JSON
// string: literally where allowed, and with its escape forms. The escape
// forms go through escNode, one node per target and set of escaped chars;
// with pend set they are collected there instead (per target), so that a
// state whose several ranges lead to c gets one '\\' edge, not one per
// escape form and range.
func (b *builder) charRange(a int32, lo, hi rune, c int32, memo map[string]int32, pend map[int32]uint64) {
	var esc uint64 // bit r: control char r; escBitQuote etc.
	if lo <= 0x1F {
		for r := lo; r <= min(hi, 0x1F); r++ {
			esc |= 1 << uint(r)
		}
	}
	lit := func(l, h rune) {
		chardfa.UTF8Ranges(l, h, func(seq [][2]byte) {
			b.edge(a, seq[0][0], seq[0][1], b.suffix(c, seq[1:], memo))
		})
	}
	l := max(lo, 0x20)
	for _, sp := range []rune{'"', '/', '\\'} {
		if l <= sp && sp <= hi {
			lit(l, sp-1)
			switch sp {
			case '"':
				esc |= escBitQuote
			case '\\':
				esc |= escBitBackslash
			case '/':
				esc |= escBitSlash
				lit('/', '/')
			}
			l = sp + 1
		}
	}
	lit(l, hi)
	switch {
	case esc == 0:
	case pend != nil:
		pend[c] |= esc
	default:
		b.edge(a, '\\', '\\', b.escNode(c, esc, memo))
	}
}

// shortEscapes are the one-letter escapes, by escNode bit.
var shortEscapes = []struct {
	bit uint
	ch  byte
}{{'\b', 'b'}, {'\t', 't'}, {'\n', 'n'}, {'\f', 'f'}, {'\r', 'r'}, {32, '"'}, {33, '\\'}, {34, '/'}}

const (
	escBitQuote     = 1 << 32
	escBitBackslash = 1 << 33
	escBitSlash     = 1 << 34
)

// escNode returns the node after a '\\' from which the escape forms of the
// chars in esc lead to c: the short escapes (\n \r \t \b \f \" \\ \/) and
// \u00XX for control chars, hex digits in either case. Nodes are shared per
// (c, esc).
func (b *builder) escNode(c int32, esc uint64, memo map[string]int32) int32 {
	key := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32([]byte{'e'}, uint32(c)), esc)
	if n, ok := memo[string(key)]; ok {
		return n
	}
	e := b.node()
	memo[string(key)] = e
	for _, sh := range shortEscapes {
		if esc&(1<<sh.bit) != 0 {
			b.edge(e, sh.ch, sh.ch, c)
		}
	}
	ctl := esc & (1<<32 - 1)
	if ctl == 0 {
		return e
	}
	u0 := b.node()
	b.edge(e, 'u', 'u', b.suffix(u0, [][2]byte{{'0', '0'}, {'0', '0'}}, memo))
	for hi := 0; hi < 2; hi++ {
		half := ctl >> (16 * hi) & 0xFFFF
		if half == 0 {
			continue
		}
		h := b.node()
		b.edge(u0, '0'+byte(hi), '0'+byte(hi), h)
		// last hex digit: runs of set bits as byte ranges, both cases for a-f
		for d := 0; d < 16; {
			if half&(1<<d) == 0 {
				d++
				continue
			}
			e := d
			for e < 15 && half&(1<<(e+1)) != 0 && e+1 != 10 {
				e++
			}
			if d < 10 {
				b.edge(h, '0'+byte(d), '0'+byte(e), c)
			} else {
				b.edge(h, 'a'+byte(d-10), 'a'+byte(e-10), c)
				b.edge(h, 'A'+byte(d-10), 'A'+byte(e-10), c)
			}
			d = e + 1
		}
	}
	return e
}

// tailStates is the char-DFA size from which charString spells escapes and
// non-ASCII chars through shared rules (addCharTail): maxLength 4096 would
// otherwise be ~40 nodes per char. Smaller automata keep inline paths,
// whose masks are a little cheaper to compute (no call frames to step).
const tailStates = 512

// tailChars are the chars a JSON string writes with more than one byte:
// control chars, '"', '\\' and '/' (escaped; '/' may also be literal) and
// every non-ASCII char.
var tailChars = []chardfa.Range{{Lo: 0, Hi: 0x1F}, {Lo: '"', Hi: '"'}, {Lo: '/', Hi: '/'}, {Lo: '\\', Hi: '\\'}, {Lo: 0x80, Hi: chardfa.MaxRune}}

// tailPart is the part of a state's transitions on tailChars that leads
// to one state.
type tailPart struct {
	chars []chardfa.Range
	to    int32
}

// tailParts splits the transitions of tr on tailChars, clipped to them, by
// the state they lead to, in order of first appearance.
func tailParts(tr []chardfa.Edge) []tailPart {
	var parts []tailPart
	for _, t := range tr {
		for _, c := range tailChars {
			lo, hi := max(t.Lo, c.Lo), min(t.Hi, c.Hi)
			if lo > hi {
				continue
			}
			k := slices.IndexFunc(parts, func(p tailPart) bool { return p.to == t.To })
			if k < 0 {
				k = len(parts)
				parts = append(parts, tailPart{to: t.To})
			}
			parts[k].chars = append(parts[k].chars, chardfa.Range{Lo: lo, Hi: hi})
		}
	}
	return parts
}

// plainEdges adds the edges from a to c for the chars of [lo,hi] that a
// JSON string holds as one literal byte.
func (b *builder) plainEdges(a int32, lo, hi rune, c int32) {
	lo, hi = max(lo, 0x20), min(hi, 0x7F)
	for _, sp := range []rune{'"', '\\'} {
		if lo <= sp && sp <= hi {
			if lo < sp {
				b.edge(a, byte(lo), byte(sp-1), c)
			}
			lo = sp + 1
		}
	}
	if lo <= hi {
		b.edge(a, byte(lo), byte(hi), c)
	}
}

// addCharTail adds the paths from a to c spelling the chars of part (a
// subset of tailChars) in a JSON string: escapes and non-ASCII chars. They
// are built once per grammar and char set as rules, one per group of first
// bytes, and each target gets one call node per group, so a char state
// costs a handful of nodes and keeps a single configuration.
func (b *builder) addCharTail(a int32, part []chardfa.Range, c int32) {
	ct := b.lastTail
	if ct == nil || !slices.Equal(part, b.lastPart) {
		// consecutive states of a long string mostly share their char set
		kb := make([]byte, 0, 8*len(part))
		for _, r := range part {
			kb = binary.LittleEndian.AppendUint32(kb, uint32(r.Lo))
			kb = binary.LittleEndian.AppendUint32(kb, uint32(r.Hi))
		}
		if b.tails == nil {
			b.tails = map[string]*charTail{}
		}
		if ct = b.tails[string(kb)]; ct == nil {
			ct = b.buildTail(part)
			b.tails[string(kb)] = ct
		}
		b.lastTail, b.lastPart = ct, slices.Clone(part)
	}
	q0, ok := ct.calls[c]
	if !ok {
		// one call node per group, consecutive from q0
		q0 = int32(len(b.g.nodes))
		for _, tg := range ct.groups {
			q := b.node()
			b.g.nodes[q].call, b.g.nodes[q].ret = tg.rule, c
		}
		ct.calls[c] = q0
	}
	for k, tg := range ct.groups {
		for _, r := range tg.ranges {
			b.edge(a, r[0], r[1], q0+int32(k))
		}
	}
}

func (b *builder) buildTail(part []chardfa.Range) *charTail {
	first, end := b.node(), b.node()
	b.g.nodes[end].final = true
	memo := map[string]int32{}
	for _, r := range part {
		b.charRange(first, r.Lo, r.Hi, end, memo, nil)
	}
	// group first bytes by the set of nodes they lead to (a literal '/'
	// leads to end: plainEdges writes it)
	var after [256][]int32
	for _, e := range b.takeEdges(first) {
		if e.to == end {
			continue
		}
		for x := int(e.lo); x <= int(e.hi); x++ {
			after[x] = append(after[x], e.to)
		}
	}
	ct := &charTail{calls: map[int32]int32{}}
	groups := map[string]int{}
	for x := 0; x < 256; x++ {
		if len(after[x]) == 0 {
			continue
		}
		slices.Sort(after[x])
		after[x] = slices.Compact(after[x])
		var kb []byte
		for _, n := range after[x] {
			kb = binary.LittleEndian.AppendUint32(kb, uint32(n))
		}
		k, ok := groups[string(kb)]
		if !ok {
			start := after[x][0]
			if len(after[x]) > 1 {
				start = b.node()
				for _, n := range after[x] {
					b.eps(start, n)
				}
			}
			k = len(ct.groups)
			groups[string(kb)] = k
			ct.groups = append(ct.groups, tailGroup{rule: int32(len(b.g.rules))})
			b.g.rules = append(b.g.rules, start)
		}
		tg := &ct.groups[k]
		if n := len(tg.ranges); n > 0 && int(tg.ranges[n-1][1]) == x-1 {
			tg.ranges[n-1][1] = byte(x)
		} else {
			tg.ranges = append(tg.ranges, [2]byte{byte(x), byte(x)})
		}
	}
	return ct
}

// rawChars emits the UTF-8 bytes of strings accepted by d (no JSON quoting).
func (b *builder) rawChars(d *chardfa.DFA) fragment {
	out := b.node()
	ns := make([]int32, len(d.Trans))
	for i := range ns {
		ns[i] = b.node()
	}
	for i, tr := range d.Trans {
		if d.Accept[i] {
			b.eps(ns[i], out)
		}
		for _, t := range tr {
			to := ns[t.To]
			chardfa.UTF8Ranges(t.Lo, t.Hi, func(seq [][2]byte) {
				cur := ns[i]
				for k, br := range seq {
					nx := to
					if k < len(seq)-1 {
						nx = b.node()
					}
					b.edge(cur, br[0], br[1], nx)
					cur = nx
				}
			})
		}
	}
	return fragment{ns[0], out}
}
