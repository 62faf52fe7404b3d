package ipc

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// KV-cache events in vLLM's wire format (vllm/distributed/kv_events.py), so that indexers built
// for vLLM (llm-d's KV-cache manager, Dynamo's KV router) consume a rank's events unchanged.
//
// Each batch goes out on a PUB socket as three frames: the topic, the sequence number (8 bytes,
// big-endian, from 0, one per batch) and the msgpack payload. The payload is msgspec's
// array-like encoding of vLLM's structs:
//
//	EventBatch       [ts float64, [event...], data_parallel_rank]
//	BlockStored      ["BlockStored", [hash...], parent|nil, [token...], block_size, lora_id=nil, medium="GPU", lora_name=nil]
//	BlockRemoved     ["BlockRemoved", [hash...], medium="GPU"]
//	AllBlocksCleared ["AllBlocksCleared"]
//
// Hashes are unsigned 64-bit integers (vLLM's default, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES).
// A subscriber that missed sequence numbers asks the replay (ROUTER) socket with one frame
// holding the first sequence number it wants (8 bytes, big-endian, behind the REQ/DEALER empty
// delimiter); it gets [seq, payload] for every batch still buffered from there, then
// [-1 as 8 bytes, empty].

// KVEventKind says what a KVEvent reports.
type KVEventKind uint8

// The event kinds, named as vLLM's.
const (
	KVBlockStored KVEventKind = iota + 1
	KVBlockRemoved
	KVAllBlocksCleared
)

// KVMedium is the medium vLLM names for blocks in device memory.
const KVMedium = "GPU"

// KVEvent is one event of a batch.
type KVEvent struct {
	Kind KVEventKind
	// Hashes are the blocks stored (prefix order) or removed.
	Hashes []uint64
	// Parent is the hash of the block before the first stored one, when HasParent.
	Parent    uint64
	HasParent bool
	// Tokens are the stored blocks' token ids, BlockSize per hash.
	Tokens    []int32
	BlockSize int
}

// KVEventBatch is what one step of one rank changed in its prefix cache.
type KVEventBatch struct {
	// Time is when the step ended, in seconds since the Unix epoch.
	Time float64
	// Events are in the order they happened.
	Events []KVEvent
	// DPRank is the data-parallel rank whose cache this is.
	DPRank int
}

// AppendMsgpack appends the batch's msgpack encoding (vLLM's EventBatch) to dst.
func (b *KVEventBatch) AppendMsgpack(dst []byte) []byte {
	dst = append(dst, 0x93) // fixarray 3
	dst = binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(b.Time))
	dst = mpArrayHead(dst, len(b.Events))
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case KVBlockStored:
			dst = append(dst, 0x98) // fixarray 8
			dst = mpString(dst, "BlockStored")
			dst = mpHashes(dst, e.Hashes)
			if e.HasParent {
				dst = mpUint(dst, e.Parent)
			} else {
				dst = append(dst, 0xc0)
			}
			dst = mpArrayHead(dst, len(e.Tokens))
			for _, t := range e.Tokens {
				dst = mpInt(dst, int64(t))
			}
			dst = mpInt(dst, int64(e.BlockSize))
			dst = append(dst, 0xc0) // lora_id
			dst = mpString(dst, KVMedium)
			dst = append(dst, 0xc0) // lora_name
		case KVBlockRemoved:
			dst = append(dst, 0x93)
			dst = mpString(dst, "BlockRemoved")
			dst = mpHashes(dst, e.Hashes)
			dst = mpString(dst, KVMedium)
		default:
			dst = append(dst, 0x91)
			dst = mpString(dst, "AllBlocksCleared")
		}
	}
	return mpInt(dst, int64(b.DPRank))
}

func mpHashes(dst []byte, hs []uint64) []byte {
	dst = mpArrayHead(dst, len(hs))
	for _, h := range hs {
		dst = mpUint(dst, h)
	}
	return dst
}

func mpArrayHead(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func mpString(dst []byte, s string) []byte {
	// Only the fixed names above go through here: all shorter than 32 bytes.
	return append(append(dst, 0xa0|byte(len(s))), s...)
}

// mpUint appends n in msgpack's shortest unsigned form, as msgspec writes Python ints.
func mpUint(dst []byte, n uint64) []byte {
	switch {
	case n < 128:
		return append(dst, byte(n))
	case n <= math.MaxUint8:
		return append(dst, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), n)
}

func mpInt(dst []byte, n int64) []byte {
	switch {
	case n >= 0:
		return mpUint(dst, uint64(n))
	case n >= -32:
		return append(dst, byte(n))
	case n >= math.MinInt8:
		return append(dst, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(n))
}

// KVEventsEndpointForRank is the endpoint rank r publishes on when every rank is given the
// same one, as vLLM offsets it: a tcp port plus r; an ipc path with "-dpR" appended (rank 0
// keeps the endpoint as given).
func KVEventsEndpointForRank(endpoint string, r int) (string, error) {
	network, addr, err := splitEndpoint(endpoint)
	if err != nil {
		return "", err
	}
	if r == 0 {
		return endpoint, nil
	}
	if network == "unix" {
		return endpoint + "-dp" + strconv.Itoa(r), nil
	}
	i := strings.LastIndexByte(addr, ':')
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil || port == 0 {
		return "", fmt.Errorf("ipc: KV events endpoint %q: a port number is needed to give rank %d its own (port + rank)", endpoint, r)
	}
	if port+r > math.MaxUint16 {
		return "", fmt.Errorf("ipc: KV events endpoint %q: port %d + rank %d is past 65535", endpoint, port, r)
	}
	return "tcp://" + addr[:i+1] + strconv.Itoa(port+r), nil
}

// KVEventsBinds reports whether a KV events socket binds endpoint (a wildcard host or an ipc
// path) or connects to it, as vLLM decides.
func KVEventsBinds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") || strings.HasPrefix(endpoint, "ipc://")
}
