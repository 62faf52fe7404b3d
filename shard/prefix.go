package shard

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// The cache_aware method's record of which rank was sent which prompt prefix. A prompt is cut
// into chunks of PrefixChunk tokens; chunk i is keyed by a hash chained over chunks 0..i, so
// one key names a whole prefix. Each key maps to the set of ranks it was dispatched to. The
// record is this dispatcher's own (what it sent where), bounded in memory: two generations of
// at most half the capacity each, the older dropped when the newer fills, and a key found in
// the older moved to the newer, so prefixes in use stay and cold ones age out (roughly LRU).

// PrefixChunk is the granularity, in tokens, of the cache_aware prefix record.
const PrefixChunk = 16

// defaultPrefixKeys bounds the record: 1<<20 keys of 16 tokens cover 16M prompt tokens, more
// than the KV caches of a few ranks hold, in ~40 MiB.
const defaultPrefixKeys = 1 << 20

// WithPrefixKeys bounds the cache_aware record to about n prefix chunks (n >= 2).
func WithPrefixKeys(n int) Option { return func(x *Dispatcher) { x.prefixKeys = max(n, 2) } }

// WithCacheAwareBound sets how much more loaded (requests running, waiting and pending) than
// the least-loaded rank the rank holding the longest prefix may be and still be picked: abs
// requests or frac of the least load, whichever is more. Defaults: 1 and 0.15 (bench/dpbench's
// multi-turn trace: within 3% of the sticky oracle's prefix hits, max/min running <= 1.5).
func WithCacheAwareBound(abs, frac float64) Option {
	return func(x *Dispatcher) { x.boundAbs, x.boundFrac = max(abs, 0), max(frac, 0) }
}

// prefixIndex maps prefix keys to bit sets of ranks. Its Dispatcher's mutex guards it.
type prefixIndex struct {
	seed      maphash.Seed
	cur, prev map[uint64][]uint64 // generations: key -> rank bit set (words of 64 ranks)
	half      int                 // keys per generation
	words     int                 // bit-set words per key
}

func newPrefixIndex(keys, ranks int) *prefixIndex {
	return &prefixIndex{seed: maphash.MakeSeed(), cur: map[uint64][]uint64{}, half: keys / 2, words: (ranks + 63) / 64}
}

// keys appends the chained keys of ids' full chunks to dst.
func (x *prefixIndex) keys(dst []uint64, ids []int32) []uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	for i := 0; i+PrefixChunk <= len(ids); i += PrefixChunk {
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&ids[i])), 4*PrefixChunk))
		dst = append(dst, h.Sum64()) // the hash goes on over every chunk so far
	}
	return dst
}

// get returns key's rank set (nil when unknown), moving it to the current generation.
func (x *prefixIndex) get(k uint64) []uint64 {
	if s, ok := x.cur[k]; ok {
		return s
	}
	s, ok := x.prev[k]
	if !ok {
		return nil
	}
	delete(x.prev, k)
	x.put(k, s)
	return s
}

func (x *prefixIndex) put(k uint64, s []uint64) {
	if len(x.cur) >= x.half {
		x.prev, x.cur = x.cur, make(map[uint64][]uint64, x.half)
	}
	x.cur[k] = s
}

// matches fills m[r] with the number of leading keys rank r was sent.
func (x *prefixIndex) matches(keys []uint64, m []int) {
	clear(m)
	var alive []uint64 // ranks that matched every key so far
	for i, k := range keys {
		s := x.get(k)
		if s == nil {
			return
		}
		if i == 0 {
			alive = append(alive, s...)
		} else {
			any := false
			for w := range alive {
				alive[w] &= s[w]
				any = any || alive[w] != 0
			}
			if !any {
				return
			}
		}
		for w, word := range alive {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &^= 1 << b
				m[w*64+b] = i + 1
			}
		}
	}
}

// record notes that rank r was sent a prompt with these keys.
func (x *prefixIndex) record(keys []uint64, r int) {
	for _, k := range keys {
		s := x.get(k)
		if s == nil {
			s = make([]uint64, x.words)
			x.put(k, s)
		}
		s[r/64] |= 1 << (r % 64)
	}
}

// forget drops rank r from every key (it restarted with an empty cache).
func (x *prefixIndex) forget(r int) {
	for _, g := range []map[uint64][]uint64{x.cur, x.prev} {
		for _, s := range g {
			s[r/64] &^= 1 << (r % 64)
		}
	}
}

// pickCacheAwareLocked picks the rank that was sent the longest prefix of the prompt with
// these keys, unless its load exceeds the least-loaded rank's by more than the bound; then
// (and when no rank has a prefix) the least-loaded rank, as shortest_queue.
func (d *Dispatcher) pickCacheAwareLocked(keys []uint64) int {
	least := d.pickLeastLoadedLocked() // fills d.up and d.score
	if least < 0 || len(keys) == 0 {
		return least
	}
	d.prefix.matches(keys, d.match)
	best, minScore := -1, d.score[least]
	for r := range d.ranks {
		if !d.up[r] {
			continue
		}
		minScore = min(minScore, d.score[r])
		if d.match[r] > 0 && (best < 0 || d.match[r] > d.match[best] ||
			d.match[r] == d.match[best] && d.score[r] < d.score[best]) {
			best = r
		}
	}
	if best < 0 || d.score[best] > minScore+max(d.boundAbs, d.boundFrac*minScore) {
		return least
	}
	return best
}
