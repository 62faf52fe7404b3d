//go:build cgo

package e2e

import (
	"crypto/sha256"
	"encoding/binary"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	zmq "github.com/pebbe/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// vllmChain is vLLM's sha256_cbor block hashes of ids' full blocks of 16, as int block hashes,
// computed with another CBOR library than the engine's.
func vllmChain(t *testing.T, ids []int, seed string) []uint64 {
	t.Helper()
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	sum := func(v any) [32]byte {
		b, err := em.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	parent := sum(seed)
	var out []uint64
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1))
	for i := 0; i+16 <= len(ids); i += 16 {
		parent = sum([]any{parent[:], ids[i : i+16], nil})
		out = append(out, new(big.Int).And(new(big.Int).SetBytes(parent[:]), mask).Uint64())
	}
	return out
}

// TestKVEventsFromRanks runs two schedulerd ranks with --kv-events-endpoint, subscribes to both
// as an indexer would, and checks that each prompt's blocks are announced by the rank that ran
// it, with vLLM's block hashes for its tokens and the rank's number in every batch.
func TestKVEventsFromRanks(t *testing.T) {
	dir, err := os.MkdirTemp("", "kvev-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ep := "ipc://" + filepath.Join(dir, "kv")
	e := startEngine(t, engineOpts{dpSize: 2, schedArgs: []string{"--kv-events-endpoint", ep, "--kv-events-topic", "kv@test@pico",
		"--kv-events-hash-seed", "12345"}})
	sub, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, rep := range []string{ep, ep + "-dp1"} { // rank r adds -dpR to an ipc path
		if err := sub.Connect(rep); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.SetSubscribe("kv@"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the SUB joins before anything is published

	prompts := map[int][]int{}
	for r := range 2 {
		p := make([]int, 48)
		for i := range p {
			p[i] = 300 + 17*i + 1000*r
		}
		prompts[r] = p
		code, body := e.post("/generate", map[string]any{"input_ids": p, "routed_dp_rank": r,
			"sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0}})
		if code != 200 {
			t.Fatalf("rank %d: /generate %d %s", r, code, body)
		}
	}

	stored := map[int][]uint64{} // rank -> hashes announced
	if err := sub.SetRcvtimeo(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	lastSeq := map[int]int64{0: -1, 1: -1}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		msg, err := sub.RecvMessageBytes(0)
		if err != nil {
			if len(stored[0]) >= 3 && len(stored[1]) >= 3 {
				break
			}
			continue
		}
		if len(msg) != 3 || string(msg[0]) != "kv@test@pico" || len(msg[1]) != 8 {
			t.Fatalf("message %q", msg)
		}
		var batch []any
		if err := msgpack.Unmarshal(msg[2], &batch); err != nil || len(batch) != 3 {
			t.Fatalf("EventBatch %v: %v", batch, err)
		}
		rank := int(toU64(t, batch[2]))
		seq := int64(binary.BigEndian.Uint64(msg[1]))
		if lastSeq[rank] >= 0 && seq != lastSeq[rank]+1 {
			t.Fatalf("rank %d: sequence %d after %d", rank, seq, lastSeq[rank])
		}
		lastSeq[rank] = seq
		for _, ev := range batch[1].([]any) {
			f := ev.([]any)
			if f[0] == "BlockStored" {
				for _, h := range f[1].([]any) {
					stored[rank] = append(stored[rank], toU64(t, h))
				}
			}
		}
	}
	for r, p := range prompts {
		for i, h := range vllmChain(t, p, "12345") {
			if !slices.Contains(stored[r], h) {
				t.Errorf("rank %d did not announce block %d of its prompt (hash %d); it announced %v", r, i, h, stored[r])
			}
			if slices.Contains(stored[1-r], h) {
				t.Errorf("rank %d announced block %d of rank %d's prompt", 1-r, i, r)
			}
		}
	}
}

func toU64(t *testing.T, v any) uint64 {
	t.Helper()
	switch x := v.(type) {
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
	case uint64:
		return x
	}
	t.Fatalf("%v (%T) is not an integer", v, v)
	return 0
}
