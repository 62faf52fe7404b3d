package ipc

import (
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestKVEventBatchMsgpack decodes the encoding with an independent msgpack library and checks
// every field, integers of every width included.
func TestKVEventBatchMsgpack(t *testing.T) {
	toks := []int32{0, 127, 128, 255, 256, 65535, 65536, math.MaxInt32}
	for i := 0; len(toks) < 32; i++ {
		toks = append(toks, int32(i))
	}
	b := KVEventBatch{Time: 1764170000.25, DPRank: 300, Events: []KVEvent{
		{Kind: KVAllBlocksCleared},
		{Kind: KVBlockStored, Hashes: []uint64{1, math.MaxUint64}, Tokens: toks, BlockSize: 16},
		{Kind: KVBlockStored, Hashes: []uint64{1 << 40}, Parent: math.MaxUint64, HasParent: true, Tokens: toks[:16], BlockSize: 16},
		{Kind: KVBlockRemoved, Hashes: make([]uint64, 20)},
	}}
	var got []any
	if err := msgpack.Unmarshal(b.AppendMsgpack(nil), &got); err != nil {
		t.Fatal(err)
	}
	tokAny := make([]any, len(toks))
	for i, x := range toks {
		tokAny[i] = uint64(x)
	}
	zeros := make([]any, 20)
	for i := range zeros {
		zeros[i] = uint64(0)
	}
	want := []any{1764170000.25, []any{
		[]any{"AllBlocksCleared"},
		[]any{"BlockStored", []any{uint64(1), uint64(math.MaxUint64)}, nil, tokAny, uint64(16), nil, "GPU", nil},
		[]any{"BlockStored", []any{uint64(1 << 40)}, uint64(math.MaxUint64), tokAny[:16], uint64(16), nil, "GPU", nil},
		[]any{"BlockRemoved", zeros, "GPU"},
	}, uint64(300)}
	// vmihailenco decodes small positive ints as int8 or uint8..64 depending on the code:
	// normalise every integer to uint64 before comparing.
	if norm := normalise(got); !reflect.DeepEqual(norm, want) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", norm, want)
	}
}

func normalise(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalise(x[i])
		}
		return out
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	}
	return v
}

func TestKVEventsEndpointForRank(t *testing.T) {
	for _, c := range []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://*:5557", 3, "tcp://*:5560"},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
		{"ipc:///run/x/kv", 2, "ipc:///run/x/kv-dp2"},
		{"tcp://*:0", 1, ""},
		{"tcp://*:65535", 1, ""},
		{"udp://x:1", 0, ""},
	} {
		got, err := KVEventsEndpointForRank(c.ep, c.rank)
		if (err != nil) != (c.want == "") || got != c.want {
			t.Errorf("KVEventsEndpointForRank(%q, %d) = %q, %v; want %q", c.ep, c.rank, got, err, c.want)
		}
	}
}
