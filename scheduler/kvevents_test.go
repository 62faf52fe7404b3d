package scheduler

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// vllmHash computes vLLM's sha256_cbor of v independently of kvhash.go: fxamacker/cbor's
// canonical encoding (as cbor2.dumps(v, canonical=True)) and SHA-256.
func vllmHash(t testing.TB, v any) [32]byte {
	t.Helper()
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := em.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// vllmBlock is hash_block_tokens(sha256_cbor, parent, toks, None): the CBOR of the Python tuple
// (parent bytes, tuple of ints, None).
func vllmBlock(t testing.TB, parent [32]byte, toks []int32) [32]byte {
	ints := make([]int64, len(toks))
	for i, x := range toks {
		ints[i] = int64(x)
	}
	return vllmHash(t, []any{parent[:], ints, nil})
}

// external is maybe_convert_block_hash: int.from_bytes(h, "big") & (2**64 - 1).
func external(h [32]byte) uint64 {
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1))
	return new(big.Int).And(new(big.Int).SetBytes(h[:]), mask).Uint64()
}

// TestKVHashMatchesVLLMScheme: a chain of blocks hashed by kvhash.go equals the same chain
// hashed with another CBOR library, token ids of every CBOR integer width included.
func TestKVHashMatchesVLLMScheme(t *testing.T) {
	blocks := [][]int32{
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		{23, 24, 255, 256, 65535, 65536, 1<<31 - 1, 400, 1234, 87, 2011, 305, 77, 1024, 9, 100000},
		{-1, -24, -25, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, // never a token id, but defined
	}
	for _, seed := range []string{"", "42", "a seed longer than twenty-three bytes"} {
		want := vllmHash(t, DefaultKVHashSeed)
		if seed != "" {
			want = vllmHash(t, seed)
		}
		cfgSeed := seed
		if cfgSeed == "" {
			cfgSeed = DefaultKVHashSeed
		}
		got := KVRootHash(cfgSeed)
		if got != want {
			t.Fatalf("seed %q: root %x, want %x", seed, got, want)
		}
		var buf []byte
		for i, toks := range blocks {
			want = vllmBlock(t, want, toks)
			got, buf = ChainKVHash(got, toks, buf)
			if got != want {
				t.Fatalf("seed %q block %d: %x, want %x", seed, i, got, want)
			}
			if got.External() != external(want) {
				t.Fatalf("seed %q block %d: external %d, want %d", seed, i, got.External(), external(want))
			}
		}
	}
}

// kvMirror is what a subscriber knows of a pool from its events alone.
type kvMirror struct {
	t               testing.TB
	root            [32]byte
	full            map[uint64][32]byte // every hash ever stored, to chain from
	blocks          map[uint64][]int32  // the blocks cached now
	stored, removed int
}

func newKVMirror(t testing.TB, seed string) *kvMirror {
	return &kvMirror{t: t, root: vllmHash(t, seed), full: map[uint64][32]byte{}, blocks: map[uint64][]int32{}}
}

// apply checks an event against an independent hash of its tokens and applies it.
func (m *kvMirror) apply(e KVEvent, bs int) {
	m.t.Helper()
	switch e.Kind {
	case KVBlockStored:
		if len(e.Tokens) != bs*len(e.Hashes) {
			m.t.Fatalf("stored %d blocks with %d tokens, block size %d", len(e.Hashes), len(e.Tokens), bs)
		}
		parent := m.root
		if e.HasParent {
			p, ok := m.full[e.Parent]
			if !ok {
				m.t.Fatalf("stored event's parent %d was never stored", e.Parent)
			}
			parent = p
		}
		for i, h := range e.Hashes {
			toks := e.Tokens[i*bs : (i+1)*bs]
			parent = vllmBlock(m.t, parent, toks)
			if external(parent) != h {
				m.t.Fatalf("stored block %d of %v: hash %d, want %d from its tokens and parent", i, e.Hashes, h, external(parent))
			}
			if _, dup := m.blocks[h]; dup {
				m.t.Fatalf("block %d stored twice without a removal", h)
			}
			m.full[h] = parent
			m.blocks[h] = slices.Clone(toks)
			m.stored++
		}
	case KVBlockRemoved:
		for _, h := range e.Hashes {
			if _, ok := m.blocks[h]; !ok {
				m.t.Fatalf("block %d removed but not cached", h)
			}
			delete(m.blocks, h)
			m.removed++
		}
	case KVAllBlocksCleared:
		clear(m.blocks)
	default:
		m.t.Fatalf("unknown event kind %d", e.Kind)
	}
}

// TestKVEventsTrackPool steps a small pool through requests that share prefixes (reuse) and
// do not fit together (evictions), and checks after every step that the events so far add up
// to exactly the blocks the pool caches.
func TestKVEventsTrackPool(t *testing.T) {
	const bs = 4
	s := newScheduler(t, newReplay(t, 512, 40, bs), Config{MaxRunning: 4, MaxPrefillTokens: 64, KVEvents: true})
	m := newKVMirror(t, DefaultKVHashSeed)
	results := map[string]*result{}
	shared := []int32{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	for round := range 6 {
		for j := range 5 {
			p := slices.Clone(shared)
			if j%2 == 1 {
				p = p[:6]
			}
			for k := range 3 + j + round {
				p = append(p, int32(100+round*7+j*31+k))
			}
			mustAdd(t, s, &Request{RID: fmt.Sprintf("r%d-%d", round, j), InputIDs: p, MaxNewTokens: 6 + j, IgnoreEOS: true, Sampling: greedy()})
		}
		for step := 0; s.HasWork(); step++ {
			if step == 500 {
				t.Fatal("requests did not finish")
			}
			out, err := s.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			collect(t, out, results)
			for _, e := range out.KVEvents {
				m.apply(e, bs)
			}
			if got := s.KVCachedBlocks(); !maps.EqualFunc(got, m.blocks, slices.Equal) {
				t.Fatalf("round %d step %d: pool caches %d blocks, events say %d", round, step, len(got), len(m.blocks))
			}
		}
	}
	if m.removed == 0 || s.Stats().PrefixHitTokens == 0 {
		t.Fatalf("the run needs evictions and prefix reuse: %d removed, %d prefix-hit tokens", m.removed, s.Stats().PrefixHitTokens)
	}
	t.Logf("%d blocks stored, %d removed, %d prefix-hit tokens", m.stored, m.removed, s.Stats().PrefixHitTokens)
}

// TestKVEventsOffByDefault: without Config.KVEvents a step carries no events.
func TestKVEventsOffByDefault(t *testing.T) {
	s := newScheduler(t, newReplay(t, 512, 40, 4), Config{MaxRunning: 4, MaxPrefillTokens: 64})
	mustAdd(t, s, &Request{RID: "a", InputIDs: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, MaxNewTokens: 4, Sampling: greedy()})
	for s.HasWork() {
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(out.KVEvents) > 0 {
			t.Fatalf("events without Config.KVEvents: %+v", out.KVEvents)
		}
	}
	if s.KVCachedBlocks() != nil {
		t.Fatal("KVCachedBlocks without Config.KVEvents")
	}
}
