//go:build cgo

package runner

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/scheduler"
)

// decodedBatch is one KV event message as a subscriber decodes it with vmihailenco/msgpack,
// knowing only vLLM's format: [ts, [event...], dp_rank], each event an array whose first
// element names its type.
type decodedBatch struct {
	topic  string
	seq    uint64
	ts     float64
	rank   int64
	events [][]any
}

func decodeKVMessage(t *testing.T, topic string, seqb, payload []byte) decodedBatch {
	t.Helper()
	if len(seqb) != 8 {
		t.Fatalf("sequence frame of %d bytes", len(seqb))
	}
	var raw []any
	if err := msgpack.Unmarshal(payload, &raw); err != nil {
		t.Fatalf("msgpack: %v", err)
	}
	if len(raw) != 3 {
		t.Fatalf("EventBatch of %d fields: %v", len(raw), raw)
	}
	d := decodedBatch{topic: topic, seq: binary.BigEndian.Uint64(seqb), ts: raw[0].(float64), rank: toInt(t, raw[2])}
	for _, e := range raw[1].([]any) {
		d.events = append(d.events, e.([]any))
	}
	return d
}

// waitFinished reads the rank's output batches until n requests have finished.
func waitFinished(t *testing.T, in ipc.Receiver, n int) {
	t.Helper()
	var tb ipc.TokenBatch
	for deadline := time.Now().Add(20 * time.Second); n > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests did not finish", n)
		}
		frame, err := in.Recv(100 * time.Millisecond)
		if err != nil {
			continue
		}
		if err := tb.Decode(frame); err != nil {
			t.Fatal(err)
		}
		for _, it := range tb.Items {
			if it.Finished {
				if it.FinishReason == ipc.FinishError {
					t.Fatalf("%s failed: %s", it.RID, it.Error)
				}
				n--
			}
		}
	}
}

func toInt(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	}
	t.Fatalf("%v (%T) is not an integer", v, v)
	return 0
}

func toUints(t *testing.T, v any) []uint64 {
	t.Helper()
	var out []uint64
	for _, x := range v.([]any) {
		out = append(out, uint64(toInt(t, x)))
	}
	return out
}

// apply plays a decoded batch onto blocks (hash -> tokens), checking each event's shape.
func apply(t *testing.T, blocks map[uint64][]int32, d decodedBatch, bs int) (stored, removed int) {
	t.Helper()
	for _, e := range d.events {
		switch e[0] {
		case "BlockStored":
			if len(e) != 8 || e[5] != nil || e[6] != "GPU" || e[7] != nil {
				t.Fatalf("BlockStored %v: want 8 fields, lora_id nil, medium GPU, lora_name nil", e)
			}
			hashes := toUints(t, e[1])
			var toks []int32
			for _, x := range e[3].([]any) {
				toks = append(toks, int32(toInt(t, x)))
			}
			if toInt(t, e[4]) != int64(bs) || len(toks) != bs*len(hashes) {
				t.Fatalf("BlockStored: block size %v, %d tokens for %d hashes", e[4], len(toks), len(hashes))
			}
			for i, h := range hashes {
				blocks[h] = toks[i*bs : (i+1)*bs]
				stored++
			}
		case "BlockRemoved":
			if len(e) != 3 || e[2] != "GPU" {
				t.Fatalf("BlockRemoved %v: want 3 fields, medium GPU", e)
			}
			for _, h := range toUints(t, e[1]) {
				if _, ok := blocks[h]; !ok {
					t.Fatalf("removed block %d was not stored", h)
				}
				delete(blocks, h)
				removed++
			}
		case "AllBlocksCleared":
			clear(blocks)
		default:
			t.Fatalf("unknown event %v", e)
		}
	}
	return stored, removed
}

// TestKVEventsOverZMQ runs a rank with a small KV cache and KV events on real sockets, sends
// it requests that share prefixes and evict each other, and checks that the stream a
// subscriber decodes (with an independent msgpack decoder) adds up to exactly the blocks the
// scheduler's pool holds at the end, that sequence numbers have no gap, and that the replay
// socket resends the same messages.
func TestKVEventsOverZMQ(t *testing.T) {
	const bs, rank = 16, 3
	dir, err := ipc.TempRunDir("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pubEP, replayEP := ipc.Endpoint(dir, "kv-events"), ipc.Endpoint(dir, "kv-replay")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := ipc.NewKVEventPublisher(ipc.KVPublisherConfig{Endpoint: pubEP, ReplayEndpoint: replayEP, Topic: "kv@pod@pico", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SetSubscribe("kv@"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(pubEP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a PUB drops what it sends before the SUB has joined

	rb, err := replay.New(replay.Options{VocabSize: vocab, NumBlocks: 28, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	sched, err := scheduler.New(rb, scheduler.Config{MaxRunning: 8, MaxPrefillTokens: 512, MaxModelLen: 4096, Rank: rank, KVEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := ipc.Default()
	in, err := tr.Pull(ipc.WorkerEndpoint(dir, 0), true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Rank: rank, RunDir: dir, NumWorkers: 1, Transport: tr, Direct: true, Heartbeat: time.Second, Log: quiet,
		KVEvents: pub, KVBlockSize: bs}, sched)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tr.Push(ipc.SchedulerEndpoint(dir, rank), false, ipc.WithSendTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{t: t, r: r, in: in, out: out}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()

	// Multi-turn conversations: each turn's prompt is the previous turn's plus more, so turns
	// reuse their history's blocks; 4 conversations of ~100 tokens do not fit 28 blocks of 16
	// together, so older blocks are evicted.
	for turn := range 4 {
		for c := range 4 {
			p := make([]int32, 0, 160)
			for k := range 40 + 20*turn {
				p = append(p, int32(100+c*997+k*13)%vocab)
			}
			rid := fmt.Sprintf("c%d-t%d", c, turn)
			g.submit(&ipc.GenerateRequest{RID: rid, InputIDs: p, MaxNewTokens: 24, IgnoreEOS: true, RoutedRank: -1})
		}
		waitFinished(t, in, 4)
	}
	cancel()
	<-done
	r.Close()
	in.Close()
	out.Close()
	time.Sleep(100 * time.Millisecond) // the publisher's goroutine sends what the last step queued
	sent := pub.Sent()
	defer pub.Close()
	if pub.Dropped() != 0 {
		t.Fatalf("%d batches dropped", pub.Dropped())
	}

	blocks := map[uint64][]int32{}
	var live []decodedBatch
	stored, removed := 0, 0
	for uint64(len(live)) < sent {
		if err := sub.SetRcvtimeo(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		msg, err := sub.RecvMessageBytes(0)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(live), sent, err)
		}
		if len(msg) != 3 {
			t.Fatalf("message of %d frames", len(msg))
		}
		d := decodeKVMessage(t, string(msg[0]), msg[1], msg[2])
		if d.topic != "kv@pod@pico" || d.seq != uint64(len(live)) || d.rank != rank || d.ts < float64(time.Now().Add(-time.Minute).Unix()) {
			t.Fatalf("message %d: topic %q seq %d rank %d ts %v", len(live), d.topic, d.seq, d.rank, d.ts)
		}
		s, rm := apply(t, blocks, d, bs)
		stored, removed = stored+s, removed+rm
		live = append(live, d)
	}
	if len(live) == 0 || live[0].events[0][0] != "AllBlocksCleared" {
		t.Fatal("the first batch does not announce an empty cache")
	}
	if want := sched.KVCachedBlocks(); !maps.EqualFunc(blocks, want, slices.Equal) {
		t.Fatalf("events add up to %d blocks, the pool caches %d", len(blocks), len(want))
	}
	if removed == 0 || sched.Stats().PrefixHitTokens == 0 {
		t.Fatalf("the run needs evictions and prefix reuse: %d removed, %d prefix-hit tokens", removed, sched.Stats().PrefixHitTokens)
	}

	// A subscriber that missed everything from batch 1 on asks the replay socket.
	dealer, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	defer dealer.Close()
	if err = dealer.Connect(replayEP); err == nil {
		err = dealer.SetRcvtimeo(5 * time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	var from [8]byte
	binary.BigEndian.PutUint64(from[:], 1)
	if _, err := dealer.SendMessage("", from[:]); err != nil {
		t.Fatal(err)
	}
	for i := 1; ; i++ {
		msg, err := dealer.RecvMessageBytes(0)
		if err != nil {
			t.Fatalf("replay message %d: %v", i, err)
		}
		if len(msg) != 3 || len(msg[0]) != 0 {
			t.Fatalf("replay message %d: %d frames", i, len(msg))
		}
		if binary.BigEndian.Uint64(msg[1]) == ^uint64(0) {
			if len(msg[2]) != 0 || i != len(live) {
				t.Fatalf("replay ended after %d messages, want %d", i-1, len(live)-1)
			}
			break
		}
		d := decodeKVMessage(t, "kv@pod@pico", msg[1], msg[2])
		if d.seq != uint64(i) || !slices.EqualFunc(d.events, live[i].events, func(a, b []any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
			t.Fatalf("replayed batch %d differs from the live one", d.seq)
		}
	}
	t.Logf("%d batches: %d blocks stored, %d removed, %d cached at the end, %d prefix-hit tokens", sent, stored, removed, len(blocks), sched.Stats().PrefixHitTokens)
}
