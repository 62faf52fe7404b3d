package scheduler

import (
	"crypto/sha256"
	"encoding/binary"
)

// External block hashes follow vLLM's sha256_cbor prefix-caching scheme, so that an indexer
// that keys vLLM's blocks (llm-d's KV-cache indexer, Dynamo's KV router) keys ours the same:
//
//	hash(block i) = SHA-256(CBOR([hash(block i-1), [token ids...], extra_keys]))
//
// with hash(block -1) = SHA-256(CBOR(seed)) for the seed string (vLLM's PYTHONHASHSEED, else
// its fixed default), CBOR in canonical (shortest) form, and extra_keys null: this engine has
// no LoRA, multimodal inputs or cache salt. Events carry the hash as vLLM does by default
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): its last 8 bytes as a big-endian uint64.
//
// These hashes are computed only when KV events are on, beside the pool's own seeded maphash:
// the pool keeps matching on the latter, whose seed an attacker cannot know, so publishing
// 64-bit truncations of a hash anyone can compute never makes prefix-cache collisions easier.

// DefaultKVHashSeed is vLLM's default seed of the first block's parent hash for sha256.
const DefaultKVHashSeed = "vllm-none-hash"

// KVBlockHash is a full 32-byte block hash of the sha256_cbor scheme.
type KVBlockHash [32]byte

// External is the hash as KV events carry it: the low 64 bits, read big-endian.
func (h KVBlockHash) External() uint64 { return binary.BigEndian.Uint64(h[24:]) }

// KVRootHash is the parent hash of a sequence's first block for seed.
func KVRootHash(seed string) KVBlockHash {
	buf := cborHead(nil, 3, uint64(len(seed)))
	return sha256.Sum256(append(buf, seed...))
}

// ChainKVHash is the hash of the full block toks after the prefix whose last block hashed to
// parent (KVRootHash for the first block). buf is scratch space, returned for reuse.
func ChainKVHash(parent KVBlockHash, toks []int32, buf []byte) (KVBlockHash, []byte) {
	buf = append(buf[:0], 0x83) // array of 3
	buf = cborHead(buf, 2, 32)  // byte string of 32
	buf = append(buf, parent[:]...)
	buf = cborHead(buf, 4, uint64(len(toks)))
	for _, t := range toks {
		if t >= 0 {
			buf = cborHead(buf, 0, uint64(t))
		} else {
			buf = cborHead(buf, 1, uint64(-1-int64(t)))
		}
	}
	buf = append(buf, 0xf6) // extra_keys: null
	return sha256.Sum256(buf), buf
}

// cborHead appends the head of a CBOR item of major type major with argument n, in the
// shortest form, as canonical CBOR requires.
func cborHead(buf []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(buf, m|byte(n))
	case n <= 0xff:
		return append(buf, m|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(buf, m|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(buf, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(buf, m|27), n)
}
