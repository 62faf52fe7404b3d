package grammar

import (
	"bytes"
	"slices"
	"sort"
	"sync"
)

// Vocab is what the matcher needs from a tokenizer; *tokenizer.Tokenizer satisfies it.
type Vocab interface {
	VocabSize() int
	TokenBytes(id int32) []byte
	IsSpecial(id int32) bool
}

// trie is a token trie flattened in preorder: node i has byte b[i] at depth
// d[i] (root children have depth 0), its subtree ends before end[i], and tok[i]
// is the token whose bytes end there (-1 if none). A walk that finds node i
// dead skips straight to end[i], which is what makes masks cheap.
type trie struct {
	b    []byte
	d    []uint16
	end  []int32
	tok  []int32
	dups map[int32][]int32 // node -> further tokens with identical bytes
	maxD int
	// plain[i]: every byte below node i is a plain string char (one that
	// keeps a free string body in bodyNormal); the tokens of i's subtree are
	// order[pos[i]:pos[end[i]]] (pos has one extra entry for the end).
	plain []bool
	order []int32
	pos   []int32
	// h[i]: how many bytes the deepest token below node i has after b[i]
	h []uint16
	// cons[i]: every token in i's subtree spells chars of a constrained
	// string body (constrainedCost ok)
	cons []bool
}

func buildTrie(ids []int32, bytesOf func(int32) []byte) *trie {
	sort.Slice(ids, func(i, j int) bool {
		c := bytes.Compare(bytesOf(ids[i]), bytesOf(ids[j]))
		if c != 0 {
			return c < 0
		}
		return ids[i] < ids[j]
	})
	t := &trie{dups: map[int32][]int32{}}
	var path []int32 // node index per depth on the current path
	var prev []byte
	for _, id := range ids {
		bs := bytesOf(id)
		if len(bs) == 0 {
			continue
		}
		lcp := 0
		for lcp < len(prev) && lcp < len(bs) && prev[lcp] == bs[lcp] {
			lcp++
		}
		if lcp == len(bs) && lcp == len(prev) {
			n := path[len(path)-1]
			t.dups[n] = append(t.dups[n], id)
			continue
		}
		for len(path) > lcp {
			n := path[len(path)-1]
			t.end[n] = int32(len(t.b))
			path = path[:len(path)-1]
		}
		for k := lcp; k < len(bs); k++ {
			t.b = append(t.b, bs[k])
			t.d = append(t.d, uint16(k))
			t.end = append(t.end, 0)
			t.tok = append(t.tok, -1)
			path = append(path, int32(len(t.b)-1))
		}
		t.tok[path[len(path)-1]] = id
		if len(bs) > t.maxD {
			t.maxD = len(bs)
		}
		prev = bs
	}
	for _, n := range path {
		t.end[n] = int32(len(t.b))
	}
	n := int32(len(t.b))
	t.pos = make([]int32, n+1)
	for i := int32(0); i < n; i++ {
		t.pos[i] = int32(len(t.order))
		if t.tok[i] >= 0 {
			t.order = append(t.order, t.tok[i])
			t.order = append(t.order, t.dups[i]...)
		}
	}
	t.pos[n] = int32(len(t.order))
	t.plain = make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		ok := true
		for c := i + 1; c < t.end[i]; c = t.end[c] {
			if !t.plain[c] || bodyStep(bodyNormal, t.b[c]) != bodyNormal {
				ok = false
				break
			}
		}
		t.plain[i] = ok
	}
	t.h = make([]uint16, n)
	t.cons = make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		ok := true
		if id := t.tok[i]; id >= 0 {
			_, ok = constrainedCost(bytesOf(id))
		}
		for c := i + 1; c < t.end[i]; c = t.end[c] {
			t.h[i] = max(t.h[i], t.h[c]+1)
			ok = ok && t.cons[c]
		}
		t.cons[i] = ok
	}
	return t
}

// strTables are the grammar-independent parts of masks for states inside a
// free string: tokens that stay inside the string body, and a trie of the
// tokens that close it (those are checked against what follows the string).
type strTables struct {
	in    []uint64
	close *trie
}

// vocabTables are built once per Compiler and shared by all its grammars.
type vocabTables struct {
	// scratch token lists of mask walks, shared by the grammars of this
	// vocabulary (each would otherwise grow its own to ~the vocabulary)
	toksPool sync.Pool

	n      int
	words  int
	toks   [][]byte
	maxLen int // the longest token's bytes
	trie   *trie
	eos    []int32
	eosSet map[int32]bool
	str    [numBodyStates]strTables
	// By first byte c: the root child of trie and of str[bodyNormal].close
	// (-1 none), the tokens of str[bodyNormal].in starting with c, and the
	// string-body substate c leads to from bodyNormal (-1 dead or closing).
	rootKid, closeKid [256]int32
	inFirst           [256][]int32
	firstQ            [256]int8
	// cnt[n]: tokens that stay inside a constrained string body (the char
	// language of builder.charRange over all chars) spelling at most n
	// chars, a trailing partial char counted as one; the last entry holds
	// them all.
	cnt [][]uint64

	classMu  sync.Mutex
	classSub map[[2]uint64][]uint64 // see classSubtrees
}

const classCacheMax = 512

// classSubtrees returns the set of trie nodes below which every byte is in
// cl (ASCII bytes), cached per Compiler.
func (vt *vocabTables) classSubtrees(cl [2]uint64) []uint64 {
	vt.classMu.Lock()
	sub, ok := vt.classSub[cl]
	vt.classMu.Unlock()
	if ok {
		return sub
	}
	t := vt.trie
	n := int32(len(t.b))
	sub = make([]uint64, (n+63)/64)
	in := func(c byte) bool { return c < 0x80 && cl[c>>6]&(1<<(c&63)) != 0 }
	for i := n - 1; i >= 0; i-- {
		ok := true
		for c := i + 1; c < t.end[i]; c = t.end[c] {
			if !in(t.b[c]) || sub[c>>6]&(1<<(uint(c)&63)) == 0 {
				ok = false
				break
			}
		}
		if ok {
			sub[i>>6] |= 1 << (uint(i) & 63)
		}
	}
	vt.classMu.Lock()
	if vt.classSub == nil || len(vt.classSub) >= classCacheMax {
		vt.classSub = map[[2]uint64][]uint64{}
	}
	vt.classSub[cl] = sub
	vt.classMu.Unlock()
	return sub
}

func newVocabTables(v Vocab, eos []int32) *vocabTables {
	n := v.VocabSize()
	vt := &vocabTables{n: n, words: (n + 63) / 64, toks: make([][]byte, n), eos: append([]int32(nil), eos...), eosSet: map[int32]bool{}}
	for _, e := range eos {
		vt.eosSet[e] = true
	}
	ids := make([]int32, 0, n)
	for i := 0; i < n; i++ {
		id := int32(i)
		if v.IsSpecial(id) || vt.eosSet[id] {
			continue
		}
		b := v.TokenBytes(id)
		if len(b) == 0 {
			continue
		}
		vt.toks[i] = b
		vt.maxLen = max(vt.maxLen, len(b))
		ids = append(ids, id)
	}
	bytesOf := func(id int32) []byte { return vt.toks[id] }
	vt.trie = buildTrie(ids, bytesOf)
	for q := 0; q < numBodyStates; q++ {
		in := make([]uint64, vt.words)
		var closing []int32
		for _, id := range ids {
			s := q
			ok := true
			closed := false
			for _, c := range vt.toks[id] {
				s = bodyStep(s, c)
				if s == bodyDead {
					ok = false
					break
				}
				if s == bodyClosed {
					closed = true
					break
				}
			}
			switch {
			case !ok:
			case closed:
				closing = append(closing, id)
			default:
				in[id>>6] |= 1 << (uint(id) & 63)
			}
		}
		vt.str[q] = strTables{in: in, close: buildTrie(closing, bytesOf)}
	}
	for c := 0; c < 256; c++ {
		vt.rootKid[c], vt.closeKid[c] = -1, -1
		vt.firstQ[c] = int8(max(bodyStep(bodyNormal, byte(c)), -1))
	}
	for _, t := range []*trie{vt.trie, vt.str[bodyNormal].close} {
		kid := &vt.rootKid
		if t != vt.trie {
			kid = &vt.closeKid
		}
		for i := int32(0); i < int32(len(t.b)); i = t.end[i] {
			kid[t.b[i]] = i
		}
	}
	costs := map[int32]int{}
	maxCost := 0
	for _, id := range ids {
		if c, ok := constrainedCost(vt.toks[id]); ok {
			costs[id] = c
			maxCost = max(maxCost, c)
		}
	}
	byCost := make([][]int32, maxCost+1)
	for id, c := range costs {
		byCost[c] = append(byCost[c], id)
	}
	vt.cnt = make([][]uint64, maxCost+1)
	for n := range vt.cnt {
		if n == 0 {
			vt.cnt[n] = make([]uint64, vt.words)
		} else {
			vt.cnt[n] = slices.Clone(vt.cnt[n-1])
		}
		for _, id := range byCost[n] {
			vt.cnt[n][id>>6] |= 1 << (uint(id) & 63)
		}
	}
	in := vt.str[bodyNormal].in
	for _, id := range ids {
		if in[id>>6]&(1<<(uint(id)&63)) != 0 {
			c := vt.toks[id][0]
			vt.inFirst[c] = append(vt.inFirst[c], id)
		}
	}
	return vt
}
