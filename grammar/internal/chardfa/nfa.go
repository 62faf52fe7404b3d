package chardfa

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// A regex becomes a code-point NFA (Thompson construction) and then a DFA
// by subset construction.

type cedge struct {
	lo, hi rune
	to     int32
}

type cnfa struct {
	edges [][]cedge
	eps   [][]int32
	// closure's scratch: visit stamps (seen[s] == gen: visited) and stack
	seen  []uint32
	gen   uint32
	stack []int32
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
			n.edges[in] = append(n.edges[in], cedge{rg.Lo, rg.Hi, out})
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

func (n *cnfa) closure(set []int32) []int32 {
	// seen[s] == n.gen marks s visited in this call: one slice for every
	// closure of a determinization instead of a map per call
	if len(n.seen) < len(n.eps) {
		n.seen = make([]uint32, len(n.eps))
	}
	n.gen++
	var out []int32
	stack := append(n.stack[:0], set...)
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.seen[s] == n.gen {
			continue
		}
		n.seen[s] = n.gen
		out = append(out, s)
		stack = append(stack, n.eps[s]...)
	}
	n.stack = stack
	slices.Sort(out)
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

func (n *cnfa) determinize(start, final int32) (*DFA, error) {
	d := &DFA{}
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
		d.Trans = append(d.Trans, nil)
		acc := false
		for _, x := range s {
			if x == final {
				acc = true
			}
		}
		d.Accept = append(d.Accept, acc)
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
			tr := d.Trans[i]
			if m := len(tr); m > 0 && tr[m-1].To == t && tr[m-1].Hi+1 == lo {
				tr[m-1].Hi = hi
			} else {
				tr = append(tr, Edge{lo, hi, t})
			}
			d.Trans[i] = tr
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
	m map[string]*DFA
}

const regexCacheMax = 4096

// Regex returns the DFA of pat: anchored, or matching anywhere in the
// string when search is set (JSON Schema pattern semantics).
func Regex(pat string, search bool) (*DFA, error) { return regex(pat, search, false) }

// RegexWide is Regex with the widest meaning any common dialect gives \d,
// \w, \s, '.' and a final '$' (Python's Unicode classes, '$' before a final
// newline): a language containing every dialect's, whose complement is
// therefore a sound "does not match the pattern" (Regex's narrow meanings
// make its language contained in every dialect's, sound for "matches").
func RegexWide(pat string, search bool) (*DFA, error) { return regex(pat, search, true) }

func regex(pat string, search, wide bool) (*DFA, error) {
	key := "a" + pat
	if search {
		key = "s" + pat
	}
	if wide {
		key = "w" + key
	}
	regexCache.Lock()
	d, ok := regexCache.m[key]
	regexCache.Unlock()
	if ok {
		return d, nil
	}
	d, err := buildRegexDFA(pat, search, wide)
	if err != nil {
		return nil, err
	}
	if len(d.Trans) > 4096 {
		return d, nil // too large to keep around
	}
	regexCache.Lock()
	if regexCache.m == nil || len(regexCache.m) >= regexCacheMax {
		regexCache.m = map[string]*DFA{}
	}
	regexCache.m[key] = d
	regexCache.Unlock()
	return d, nil
}

func buildRegexDFA(pat string, search, wide bool) (*DFA, error) {
	r, err := parseRegex(pat, wide)
	if err != nil {
		return nil, err
	}
	var branches []*rnode
	if r.op == rAlt {
		branches = r.subs
	} else {
		branches = []*rnode{r}
	}
	anyStar := &rnode{op: rRepeat, subs: []*rnode{{op: rClass, ranges: AnyChar}}, min: 0, max: -1}
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
			if wide { // Python's '$' also matches before a final newline
				items = append(items, &rnode{op: rRepeat, subs: []*rnode{{op: rClass, ranges: []Range{{'\n', '\n'}}}}, min: 0, max: 1})
			}
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

// Intersect builds the product DFA.
