package tokenizer

import (
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"
)

// mergeTable is an open-addressing hash table from a packed pair of token ids to the packed
// (rank, merged id) of the merge rule for that pair.
type mergeTable struct {
	keys  []uint64
	vals  []uint64
	shift uint
	n     int
}

const emptyKey = math.MaxUint64

const noMerge = math.MaxUint64

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newMergeTable(n int) *mergeTable {
	size := 16
	bits := uint(4)
	for size < n*2 {
		size <<= 1
		bits++
	}
	t := &mergeTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: 64 - bits}
	for i := range t.keys {
		t.keys[i] = emptyKey
	}
	return t
}

func (t *mergeTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put sets the merge for key k; a later rule for the same pair replaces an earlier one, as when
// tokenizers collects its merges into a map.
func (t *mergeTable) put(k, v uint64) {
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		if t.keys[i] == k {
			t.vals[i] = v
			return
		}
		if t.keys[i] == emptyKey {
			t.keys[i] = k
			t.vals[i] = v
			t.n++
			return
		}
	}
}

// get returns rank<<32|newID for the pair (a, b), or noMerge.
func (t *mergeTable) get(a, b int32) uint64 {
	k := pairKey(a, b)
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		kk := t.keys[i]
		if kk == k {
			return t.vals[i]
		}
		if kk == emptyKey {
			return noMerge
		}
	}
}

// bpeModel is a byte-level BPE model.
type bpeModel struct {
	merges       *mergeTable
	byteID       [256]int32 // id of the single-byte token of each byte, -1 if none
	bytesToID    map[string]int32
	ignoreMerges bool
	unkID        int32 // -1 when there is no unk token
	fuseUnk      bool
	cache        wordCache // slots nil: no cache (benchmarks of the uncached path)
}

// longWord is the length above which merging uses a heap instead of linear scans.
const longWord = 96

// encodeWord appends the ids of one pre-tokenized piece (raw bytes) to out.
func (m *bpeModel) encodeWord(out []int32, piece string) []int32 {
	if len(piece) == 1 {
		if id := m.byteID[piece[0]]; id >= 0 {
			return append(out, id)
		}
	}
	if m.ignoreMerges {
		if id, ok := m.bytesToID[piece]; ok {
			return append(out, id)
		}
	}
	cacheable := m.cache.slots != nil && len(piece) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(piece); ok {
			return append(out, ids...)
		}
	}
	start := len(out)
	out = m.merge(out, piece)
	if cacheable {
		ids := make([]int32, len(out)-start)
		copy(ids, out[start:])
		m.cache.put(piece, ids)
	}
	return out
}

// initialSymbols appends the single-byte ids of piece, applying unk handling for bytes the
// vocabulary lacks (tokenizers drops them when there is no unk token).
func (m *bpeModel) initialSymbols(syms []int32, piece string) []int32 {
	prevUnk := false
	for i := 0; i < len(piece); i++ {
		id := m.byteID[piece[i]]
		if id >= 0 {
			syms = append(syms, id)
			prevUnk = false
			continue
		}
		if m.unkID >= 0 {
			if !(m.fuseUnk && prevUnk) {
				syms = append(syms, m.unkID)
			}
			prevUnk = true
		}
	}
	return syms
}

// merge applies the merge rules to piece and appends the resulting ids to out: repeatedly the
// pair of lowest rank, leftmost first, as tokenizers' Word::merge_all does.
func (m *bpeModel) merge(out []int32, piece string) []int32 {
	start := len(out)
	out = m.initialSymbols(out, piece)
	syms := out[start:]
	if len(syms) < 2 {
		return out
	}
	if len(syms) > longWord {
		n := m.mergeHeap(syms)
		return out[:start+n]
	}
	var pairBuf [longWord]uint64
	pr := pairBuf[:len(syms)-1]
	for k := range pr {
		pr[k] = m.merges.get(syms[k], syms[k+1])
	}
	for len(pr) > 0 {
		best := 0
		bv := pr[0]
		for k := 1; k < len(pr); k++ {
			if pr[k] < bv {
				bv, best = pr[k], k
			}
		}
		if bv == noMerge {
			break
		}
		syms[best] = int32(uint32(bv))
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		if best+1 < len(pr) {
			copy(pr[best+1:], pr[best+2:])
		}
		pr = pr[:len(pr)-1]
		if best < len(pr) {
			pr[best] = m.merges.get(syms[best], syms[best+1])
		}
		if best > 0 {
			pr[best-1] = m.merges.get(syms[best-1], syms[best])
		}
	}
	return out[:start+len(syms)]
}

// mergeHeap is merge for long pieces: a min-heap of candidate merges ordered by (rank, position)
// over a linked list of symbols, like tokenizers' Word::merge_all. It rewrites syms in place and
// returns the number of symbols left.
func (m *bpeModel) mergeHeap(syms []int32) int {
	n := len(syms)
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := range syms {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
		alive[i] = true
	}
	next[n-1] = -1
	type cand struct {
		rank uint32
		pos  int32
		id   int32
	}
	less := func(a, b cand) bool {
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.pos < b.pos
	}
	h := make([]cand, 0, n)
	push := func(c cand) {
		h = append(h, c)
		i := len(h) - 1
		for i > 0 {
			p := (i - 1) / 2
			if !less(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() cand {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		i := 0
		for {
			l := 2*i + 1
			if l >= len(h) {
				break
			}
			s := l
			if r := l + 1; r < len(h) && less(h[r], h[l]) {
				s = r
			}
			if !less(h[s], h[i]) {
				break
			}
			h[i], h[s] = h[s], h[i]
			i = s
		}
		return top
	}
	for i := 0; i+1 < n; i++ {
		if v := m.merges.get(syms[i], syms[i+1]); v != noMerge {
			push(cand{uint32(v >> 32), int32(i), int32(uint32(v))})
		}
	}
	for len(h) > 0 {
		c := pop()
		p := c.pos
		if !alive[p] || next[p] < 0 {
			continue
		}
		q := next[p]
		v := m.merges.get(syms[p], syms[q])
		if v == noMerge || int32(uint32(v)) != c.id {
			continue // stale
		}
		syms[p] = c.id
		alive[q] = false
		next[p] = next[q]
		if next[q] >= 0 {
			prev[next[q]] = p
		}
		if pp := prev[p]; pp >= 0 {
			if v := m.merges.get(syms[pp], syms[p]); v != noMerge {
				push(cand{uint32(v >> 32), pp, int32(uint32(v))})
			}
		}
		if nn := next[p]; nn >= 0 {
			if v := m.merges.get(syms[p], syms[nn]); v != noMerge {
				push(cand{uint32(v >> 32), p, int32(uint32(v))})
			}
		}
	}
	k := 0
	for i := int32(0); i >= 0; i = next[i] {
		syms[k] = syms[i]
		k++
	}
	return k
}

// The word cache maps a piece to its ids: a direct-mapped table of atomically swapped entries,
// so lookups take no lock and a colliding word simply replaces the one in its slot.
const (
	cacheSlots    = 1 << 16
	maxCachedWord = 128
)

var cacheSeed = maphash.MakeSeed()

type cacheEntry struct {
	key string
	ids []int32
}

type wordCache struct {
	slots []atomic.Pointer[cacheEntry]
}

// The table is 2-way set associative: a word lives in one of the two slots of its set.
func (c *wordCache) set(k string) (*atomic.Pointer[cacheEntry], *atomic.Pointer[cacheEntry], uint64) {
	h := maphash.String(cacheSeed, k)
	i := h & (cacheSlots - 2)
	return &c.slots[i], &c.slots[i+1], h
}

func (c *wordCache) get(k string) ([]int32, bool) {
	a, b, _ := c.set(k)
	if e := a.Load(); e != nil && e.key == k {
		return e.ids, true
	}
	if e := b.Load(); e != nil && e.key == k {
		return e.ids, true
	}
	return nil, false
}

func (c *wordCache) put(k string, v []int32) {
	a, b, h := c.set(k)
	e := &cacheEntry{key: strings.Clone(k), ids: v}
	switch {
	case a.Load() == nil:
		a.Store(e)
	case b.Load() == nil:
		b.Store(e)
	case h>>63 == 0:
		a.Store(e)
	default:
		b.Store(e)
	}
}
