package chardfa

import (
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

type Edge struct {
	Lo, Hi rune
	To     int32
}

// DFA is a complete-ish character DFA: missing ranges go to the dead state.
type DFA struct {
	Trans  [][]Edge
	Accept []bool
	// Counted: built by lengthDFA alone (state i = i chars read, any char
	// allowed), up to maxLen chars (-1 unbounded)
	Counted bool
	MaxLen  int
	// Total: every state defines every char (the exclusion automata of
	// open object keys), so any char sequence stays alive from any state
	Total bool
}

func Intersect(a, b *DFA) (*DFA, error) {
	d := &DFA{}
	idx := map[[2]int32]int32{}
	var pairs [][2]int32
	add := func(p [2]int32) int32 {
		if i, ok := idx[p]; ok {
			return i
		}
		i := int32(len(pairs))
		idx[p] = i
		pairs = append(pairs, p)
		d.Trans = append(d.Trans, nil)
		d.Accept = append(d.Accept, a.Accept[p[0]] && b.Accept[p[1]])
		return i
	}
	add([2]int32{0, 0})
	for i := 0; i < len(pairs); i++ {
		if len(pairs) > maxCharStates*4 {
			return nil, errTooLarge
		}
		ta, tb := a.Trans[pairs[i][0]], b.Trans[pairs[i][1]]
		x, y := 0, 0
		for x < len(ta) && y < len(tb) {
			lo := max(ta[x].Lo, tb[y].Lo)
			hi := min(ta[x].Hi, tb[y].Hi)
			if lo <= hi {
				t := add([2]int32{ta[x].To, tb[y].To})
				d.Trans[i] = append(d.Trans[i], Edge{lo, hi, t})
			}
			if ta[x].Hi < tb[y].Hi {
				x++
			} else {
				y++
			}
		}
	}
	return d, nil
}

// Length accepts strings of min..max chars (max -1 = unbounded).
func Length(minL, maxL int) *DFA {
	top := maxL
	if maxL < 0 {
		top = minL
	}
	d := &DFA{Trans: make([][]Edge, top+1), Accept: make([]bool, top+1), Counted: true, MaxLen: maxL}
	for i := 0; i <= top; i++ {
		d.Accept[i] = i >= minL
		next := i + 1
		if i == top {
			if maxL >= 0 {
				continue
			}
			next = i
		}
		d.Trans[i] = AppendAny(d.Trans[i], 0, MaxRune, int32(next))
	}
	return d
}

// Exclude accepts every string except the given ones.
func Exclude(names []string) *DFA {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	d := &DFA{Total: true}
	// The trie of names, built from the sorted list: the names below a
	// trie node are a contiguous run sharing its prefix, split by their
	// next char. State 0 is the root; the sink (any string that left the
	// trie) is added last.
	var build func(run []string, depth int) int32
	build = func(run []string, depth int) int32 {
		st := int32(len(d.Trans))
		d.Trans = append(d.Trans, nil)
		d.Accept = append(d.Accept, true)
		if len(run[0]) == depth {
			d.Accept[st] = false // a name ends here
			run = run[1:]
		}
		var tr []Edge
		for len(run) > 0 {
			r, n := utf8.DecodeRuneInString(run[0][depth:])
			j := 1
			for j < len(run) && strings.HasPrefix(run[j][depth:], run[0][depth:depth+n]) {
				j++
			}
			tr = append(tr, Edge{r, r, build(run[:j], depth+n)})
			run = run[j:]
		}
		d.Trans[st] = tr
		return st
	}
	if len(names) > 0 {
		build(names, 0)
	} else {
		d.Trans, d.Accept = [][]Edge{nil}, []bool{true}
	}
	sink := int32(len(d.Trans))
	for i, kids := range d.Trans {
		var tr []Edge
		prev := rune(0)
		for _, k := range kids {
			if k.Lo > prev {
				tr = AppendAny(tr, prev, k.Lo-1, sink)
			}
			tr = append(tr, k)
			prev = k.Lo + 1
		}
		d.Trans[i] = AppendAny(tr, prev, MaxRune, sink)
	}
	d.Trans = append(d.Trans, AppendAny(nil, 0, MaxRune, sink))
	d.Accept = append(d.Accept, true)
	return d
}

// UTF8Ranges calls emit with byte-range sequences covering exactly [lo,hi].
func UTF8Ranges(lo, hi rune, emit func(seq [][2]byte)) {
	if lo > hi {
		return
	}
	if lo <= 0xDFFF && hi >= 0xD800 { // skip surrogates
		UTF8Ranges(lo, 0xD7FF, emit)
		UTF8Ranges(0xE000, hi, emit)
		return
	}
	for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			UTF8Ranges(lo, b, emit)
			UTF8Ranges(b+1, hi, emit)
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
				UTF8Ranges(lo, lo|m, emit)
				UTF8Ranges((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				UTF8Ranges(lo, (hi&^m)-1, emit)
				UTF8Ranges(hi&^m, hi, emit)
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

// Matches reports whether d accepts s.
func (d *DFA) Matches(s string) bool {
	st := int32(0)
	for _, r := range s {
		next := int32(-1)
		for _, t := range d.Trans[st] {
			if t.Lo <= r && r <= t.Hi {
				next = t.To
				break
			}
		}
		if next < 0 {
			return false
		}
		st = next
	}
	return d.Accept[st]
}

// Complement accepts exactly the strings d rejects.
func Complement(d *DFA) *DFA {
	n := len(d.Trans)
	c := &DFA{Trans: make([][]Edge, n+1), Accept: make([]bool, n+1)}
	sink := int32(n)
	for i := 0; i < n; i++ {
		c.Accept[i] = !d.Accept[i]
		var out []Edge
		prev := rune(0)
		for _, t := range d.Trans[i] {
			if t.Lo > prev {
				out = AppendAny(out, prev, t.Lo-1, sink)
			}
			out = append(out, t)
			prev = t.Hi + 1
		}
		out = AppendAny(out, prev, MaxRune, sink)
		c.Trans[i] = out
	}
	c.Accept[sink] = true
	c.Trans[sink] = AppendAny(nil, 0, MaxRune, sink)
	return c
}

// Empty reports whether d accepts nothing.
func (d *DFA) Empty() bool {
	seen := make([]bool, len(d.Trans))
	stack := []int32{0}
	seen[0] = true
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if d.Accept[s] {
			return false
		}
		for _, t := range d.Trans[s] {
			if !seen[t.To] {
				seen[t.To] = true
				stack = append(stack, t.To)
			}
		}
	}
	return true
}

// Multiples accepts optionally signed digit strings divisible by k.
func Multiples(k int) *DFA {
	d := &DFA{Trans: make([][]Edge, k+2), Accept: make([]bool, k+2)}
	// 0 = start, 1 = after '-', 2+r = remainder r
	d.Trans[0] = append(d.Trans[0], Edge{'-', '-', 1})
	for _, st := range []int{0, 1} {
		for dg := 0; dg <= 9; dg++ {
			d.Trans[st] = append(d.Trans[st], Edge{rune('0' + dg), rune('0' + dg), int32(2 + dg%k)})
		}
	}
	for r := 0; r < k; r++ {
		for dg := 0; dg <= 9; dg++ {
			d.Trans[2+r] = append(d.Trans[2+r], Edge{rune('0' + dg), rune('0' + dg), int32(2 + (10*r+dg)%k)})
		}
	}
	d.Accept[2] = true
	return d
}

// errTooLarge is Intersect's error when the product outgrows its budget.
var errTooLarge = errors.New("string constraints combine into too large an automaton")
