package scheduler

import (
	"hash/maphash"
	"slices"
	"unsafe"
)

// blockPool tracks the backend's KV blocks: which are free, which hold a cached prefix that a
// new request may reuse, and how many sequences reference each.
//
// A block is in exactly one of three states:
//   - in use: ref > 0, listed in the block tables of ref sequences;
//   - cached: ref == 0 but hashed, in the LRU list, reusable by a prefix match until evicted;
//   - free: ref == 0, not hashed, on the free stack.
//
// Only full blocks whose KV has been computed are hashed. The hash of block i of a sequence
// covers the hash of block i-1 and block i's token ids, so equal hashes mean equal prefixes; the
// pool also keeps each hashed block's parent hash and token ids and compares them on lookup, so
// a hash collision between different blocks can never share wrong KV.
type blockPool struct {
	size int // positions per block
	ref  []int32

	hashed []bool
	hash   []uint64
	parent []uint64
	tokens []int32 // size ids per block, valid while hashed
	byHash map[uint64]int32

	free []int32
	// The LRU list of cached blocks, oldest first, linked through prev and next (-1 ends).
	prev, next []int32
	head, tail int32
	cached     int

	seed maphash.Seed

	// ev records the pool's changes as KV events; nil when they are off.
	ev *kvEventLog
}

// kvEventLog is the pool's record of what it stored and evicted since the last Step, in vLLM's
// terms (see kvhash.go), and each registered block's external hash.
type kvEventLog struct {
	root KVBlockHash
	// ext is each block's sha256_cbor hash, set when it is registered (also when it stays
	// private as a duplicate, so that its successor can chain from it) and valid while it is
	// hashed or held by the sequence that registered it.
	ext     []KVBlockHash
	pending []KVEvent // since the last take, oldest first
	buf     []byte    // CBOR scratch
}

// enableEvents makes the pool record KV events, hashing with seed (DefaultKVHashSeed when empty).
func (p *blockPool) enableEvents(seed string) {
	if seed == "" {
		seed = DefaultKVHashSeed
	}
	p.ev = &kvEventLog{root: KVRootHash(seed), ext: make([]KVBlockHash, len(p.ref))}
}

// takeEvents returns the events recorded since the last call; the caller owns them.
func (p *blockPool) takeEvents() []KVEvent {
	if p.ev == nil || len(p.ev.pending) == 0 {
		return nil
	}
	ev := p.ev.pending
	p.ev.pending = nil
	return ev
}

// stored records that block b (external hash h, tokens toks) joined the cache after
// parentBlock (-1 for a sequence's first block). A block that continues the chain of the
// previous stored event joins it, as vLLM stores a request's new full blocks in one event.
func (l *kvEventLog) stored(h uint64, parentBlock int32, toks []int32) {
	if n := len(l.pending); n > 0 && parentBlock >= 0 {
		last := &l.pending[n-1]
		if last.Kind == KVBlockStored && last.Hashes[len(last.Hashes)-1] == l.ext[parentBlock].External() {
			last.Hashes = append(last.Hashes, h)
			last.Tokens = append(last.Tokens, toks...)
			return
		}
	}
	e := KVEvent{Kind: KVBlockStored, Hashes: []uint64{h}, Tokens: slices.Clone(toks)}
	if parentBlock >= 0 {
		e.Parent, e.HasParent = l.ext[parentBlock].External(), true
	}
	l.pending = append(l.pending, e)
}

// removed records that the block with external hash h left the cache.
func (l *kvEventLog) removed(h uint64) {
	if n := len(l.pending); n > 0 && l.pending[n-1].Kind == KVBlockRemoved {
		l.pending[n-1].Hashes = append(l.pending[n-1].Hashes, h)
		return
	}
	l.pending = append(l.pending, KVEvent{Kind: KVBlockRemoved, Hashes: []uint64{h}})
}

// cachedBlocks maps the external hash of every hashed block to its tokens.
func (p *blockPool) cachedBlocks() map[uint64][]int32 {
	if p.ev == nil {
		return nil
	}
	m := make(map[uint64][]int32, len(p.byHash))
	for _, b := range p.byHash {
		m[p.ev.ext[b].External()] = slices.Clone(p.tokens[int(b)*p.size : (int(b)+1)*p.size])
	}
	return m
}

func newBlockPool(numBlocks, size int) *blockPool {
	p := &blockPool{
		size:   size,
		ref:    make([]int32, numBlocks),
		hashed: make([]bool, numBlocks),
		hash:   make([]uint64, numBlocks),
		parent: make([]uint64, numBlocks),
		tokens: make([]int32, numBlocks*size),
		byHash: make(map[uint64]int32),
		free:   make([]int32, numBlocks),
		prev:   make([]int32, numBlocks),
		next:   make([]int32, numBlocks),
		head:   -1,
		tail:   -1,
		seed:   maphash.MakeSeed(),
	}
	// Pop order: block 0 first.
	for i := range p.free {
		p.free[i] = int32(numBlocks - 1 - i)
	}
	return p
}

// numBlocks is the size of the pool.
func (p *blockPool) numBlocks() int { return len(p.ref) }

// available counts the blocks an allocation can take: free ones and evictable cached ones.
func (p *blockPool) available() int { return len(p.free) + p.cached }

// inUse counts the blocks some sequence references.
func (p *blockPool) inUse() int { return len(p.ref) - p.available() }

// blockHash is the identity of a full block: its token ids after the prefix whose last block
// hashed to parent (0 for the first block).
func (p *blockPool) blockHash(parent uint64, toks []int32) uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	var buf [8]byte
	for i := range buf {
		buf[i] = byte(parent >> (8 * i))
	}
	h.Write(buf[:])
	if len(toks) > 0 {
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&toks[0])), 4*len(toks)))
	}
	return h.Sum64()
}

// alloc takes a free block, evicting the least recently used cached block when none is free.
// It reports false when every block is in use.
func (p *blockPool) alloc() (int32, bool) {
	var b int32
	switch {
	case len(p.free) > 0:
		b = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	case p.head >= 0:
		b = p.head
		p.unlink(b)
		if p.ev != nil && p.hashed[b] {
			p.ev.removed(p.ev.ext[b].External())
		}
		p.unhash(b)
	default:
		return -1, false
	}
	p.ref[b] = 1
	return b, true
}

// lookup returns the cached or in-use block holding exactly toks after the prefix hashed to
// parent, or -1.
func (p *blockPool) lookup(h, parent uint64, toks []int32) int32 {
	b, ok := p.byHash[h]
	if !ok || p.parent[b] != parent || !slices.Equal(p.tokens[int(b)*p.size:(int(b)+1)*p.size], toks) {
		return -1
	}
	return b
}

// acquire adds a reference to a hashed block found by lookup.
func (p *blockPool) acquire(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.ref[b]++
}

// release drops a reference; the last one makes the block cached (if hashed) or free.
func (p *blockPool) release(b int32) {
	p.ref[b]--
	switch {
	case p.ref[b] > 0:
	case p.hashed[b]:
		p.pushLRU(b)
	default:
		p.free = append(p.free, b)
	}
}

// register records that in-use block b now holds the full block toks after parent, so later
// prefix matches can share it. If another block already holds the same content, b stays private
// (it is freed, not cached, when released). parentBlock is the sequence's block before b (-1
// for its first), which KV events chain from.
func (p *blockPool) register(b, parentBlock int32, h, parent uint64, toks []int32) {
	if p.hashed[b] {
		return
	}
	var ext KVBlockHash
	if p.ev != nil {
		root := p.ev.root
		if parentBlock >= 0 {
			root = p.ev.ext[parentBlock]
		}
		ext, p.ev.buf = ChainKVHash(root, toks, p.ev.buf)
		p.ev.ext[b] = ext
	}
	if _, dup := p.byHash[h]; dup {
		return
	}
	p.hashed[b] = true
	p.hash[b] = h
	p.parent[b] = parent
	copy(p.tokens[int(b)*p.size:], toks)
	p.byHash[h] = b
	if p.ev != nil {
		p.ev.stored(ext.External(), parentBlock, toks)
	}
}

func (p *blockPool) unhash(b int32) {
	if p.hashed[b] {
		delete(p.byHash, p.hash[b])
		p.hashed[b] = false
	}
}

func (p *blockPool) pushLRU(b int32) {
	p.prev[b], p.next[b] = p.tail, -1
	if p.tail >= 0 {
		p.next[p.tail] = b
	} else {
		p.head = b
	}
	p.tail = b
	p.cached++
}

func (p *blockPool) unlink(b int32) {
	if p.prev[b] >= 0 {
		p.next[p.prev[b]] = p.next[b]
	} else {
		p.head = p.next[b]
	}
	if p.next[b] >= 0 {
		p.prev[p.next[b]] = p.prev[b]
	} else {
		p.tail = p.prev[b]
	}
	p.prev[b], p.next[b] = -1, -1
	p.cached--
}
