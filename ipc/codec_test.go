package ipc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

func sampleRequest() *GenerateRequest {
	return &GenerateRequest{
		RID: "req-7f3a", Owner: 3, OwnerEpoch: 0x1234_5678_9abc_def0, InputIDs: []int32{1, 2, 3, -4, math.MaxInt32},
		Sampling: Sampling{Temperature: 0.7, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.1,
			FrequencyPenalty: -0.5, PresencePenalty: 0.25, TopK: 40, Seed: 1 << 60, HasSeed: true,
			LogitBiasIDs: []int32{5, 9}, LogitBiasValues: []float32{-100, 2.5}},
		MaxNewTokens: 128, MinNewTokens: 2, StopTokenIDs: []int32{151643, 151645},
		StopStrings: []string{"\n\n", "</s>", ""}, IgnoreEOS: true, SkipSpecialTokens: true,
		Stream: true, NoText: false, StreamInterval: 4, Logprobs: true,
		Grammar:    Grammar{Kind: GrammarJSONSchema, Spec: `{"type":"object"}`},
		RoutedRank: -1, ArrivalUnixNano: 1_700_000_000_123_456_789, TopLogprobs: 5, PromptLogprobs: true, RequestID: "client-req-1",
	}
}

func sampleLoad(workers int) Load {
	l := Load{Running: 12, Waiting: 3, KVTokensUsed: 40960, KVTokensCapacity: 1 << 20, WaitingTokens: 777,
		Preemptions: 5, PrefixHitTokens: 4096, Steps: 91011, SpecDrafts: 300, SpecDraftTokens: 1200, SpecAccepted: 700, WaitingByPriority: []PriorityCount{{-3, 1}, {0, 2}}, WaitingOtherPriority: 4,
		Go: sampleGoStats()}
	for w := range workers {
		l.Received = append(l.Received, uint64(1000+w))
		l.ReceivedTokens = append(l.ReceivedTokens, uint64(90000+w))
	}
	return l
}

func sampleGoStats() GoStats {
	return GoStats{Goroutines: 17, GOMAXPROCS: 8, HeapAllocBytes: 3 << 20, HeapInuseBytes: 4 << 20, SysBytes: 12 << 20,
		HeapGoalBytes: 8 << 20, GCCycles: 42, GCPauseSeconds: 0.0125, GoVersion: "go1.26.0"}
}

func sampleItem(i int) TokenItem {
	it := TokenItem{
		RID: fmt.Sprintf("rid-%06d", i), Owner: uint32(i % 4), NewIDs: []int32{int32(i), int32(i + 1)},
		PromptTokens: 100, CachedTokens: 64, CompletionTokens: int32(i%50 + 2), MatchedStopToken: -1,
	}
	if i%3 == 0 {
		it.Logprobs = []float32{-0.25, float32(-i)}
		it.TopLogprobIDs, it.TopLogprobs = []int32{int32(i), 3, int32(i + 1), 4}, []float32{-0.25, -2, float32(-i), -3}
		it.PromptLogprobs, it.PromptTopLogprobIDs, it.PromptTopLogprobs = []float32{-1.5}, []int32{7}, []float32{-0.5}
	}
	if i%7 == 0 {
		it.Finished, it.FinishReason = true, FinishStop
		it.MatchedStop = "###"
	}
	if i%11 == 0 {
		it.Finished, it.FinishReason, it.Error = true, FinishError, "kv cache exhausted"
		if i%22 == 0 {
			it.Error, it.ErrorKind = "prompt token 1 is 99999, outside the vocabulary [0, 8192)", ErrorInvalid
		}
	}
	if i%7 == 0 && i%11 != 0 {
		it.Embedding = []float32{0.5, float32(-i), 3}
	}
	if it.Finished {
		it.QueueNanos, it.PrefillNanos, it.DecodeNanos, it.Preemptions = int64(i)*1000, 2_000_000, int64(i)<<32, int32(i%3)
		if i%2 == 0 {
			it.SpecDrafts, it.SpecDraftTokens, it.SpecAccepted = int32(i), int32(4*i), []int32{int32(i), int32(i / 2), 1}
		}
	}
	if i%5 == 1 {
		it.RequestID = fmt.Sprintf("req-%d", i)
	}
	if i%5 == 1 {
		it.SkipSpecialTokens, it.StopStrings = true, []string{"</s>", "\n\nUser:"}
	}
	it.NoText = i%13 == 4
	return it
}

func sampleTokenBatch(items int) *TokenBatch {
	b := &TokenBatch{Rank: 2, Seq: 99, Load: sampleLoad(4)}
	for i := range items {
		b.Items = append(b.Items, sampleItem(i))
	}
	return b
}

func sampleTextBatch(items int) *TextBatch {
	b := &TextBatch{Loads: []RankLoad{{Rank: 0, Seq: 5, Load: sampleLoad(2)}, {Rank: 1, Seq: 8, Load: sampleLoad(0)}}, Detok: sampleGoStats()}
	for i := range items {
		b.Items = append(b.Items, TextItem{TokenItem: sampleItem(i), Text: fmt.Sprintf(" tok%d ✓", i)})
	}
	return b
}

func sampleMessages() []Message {
	return []Message{
		sampleRequest(),
		&GenerateRequest{RoutedRank: -1},
		&GenerateRequest{RID: "emb", InputIDs: []int32{1, 2, 3}, RoutedRank: -1, NoText: true, Pooling: PoolingMean},
		&Abort{RID: "req-1", Owner: 1, OwnerEpoch: 99, Reason: "client disconnected"},
		&Abort{},
		&HoldQuery{Owner: 3, RIDs: []string{"0-a1", "0-b22", ""}},
		&HoldQuery{},
		sampleTokenBatch(0), // heartbeat
		sampleTokenBatch(25),
		&TokenBatch{},
		sampleTextBatch(0),
		sampleTextBatch(25),
		&TextBatch{},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		frame := Encode(m)
		if frame[0] != WireVersion || MsgType(frame[1]) != m.Type() {
			t.Fatalf("%v: header % x", m.Type(), frame[:2])
		}
		got, err := Decode(frame)
		if err != nil {
			t.Fatalf("%v: decode: %v", m.Type(), err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%v: round trip mismatch\n got %+v\nwant %+v", m.Type(), got, m)
		}
		if again := Encode(got); !bytes.Equal(again, frame) {
			t.Fatalf("%v: re-encoding differs", m.Type())
		}
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("keep")
	frame := sampleRequest().Append(prefix)
	if !bytes.Equal(frame[:4], []byte("keep")) || !bytes.Equal(frame[4:], Encode(sampleRequest())) {
		t.Fatal("Append did not append after the existing bytes")
	}
}

// TestDecodeReuse decodes different batches into one value: the result must equal a fresh
// decode each time (no stale fields leak), and steady-state decoding must not allocate.
func TestDecodeReuse(t *testing.T) {
	var b TokenBatch
	for _, n := range []int{30, 5, 0, 40, 12} {
		want := sampleTokenBatch(n)
		if err := b.Decode(Encode(want)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(Encode(&b), Encode(want)) {
			t.Fatalf("reused decode of %d items differs from the original", n)
		}
	}
	frame := Encode(sampleTokenBatch(64))
	if err := b.Decode(frame); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(20, func() { _ = b.Decode(frame) }); allocs != 0 {
		t.Fatalf("steady-state TokenBatch.Decode allocates %.0f times, want 0", allocs)
	}

	var tb TextBatch
	for _, n := range []int{7, 0, 9} {
		want := sampleTextBatch(n)
		if err := tb.Decode(Encode(want)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(Encode(&tb), Encode(want)) {
			t.Fatalf("reused TextBatch decode of %d items differs", n)
		}
	}
	var r GenerateRequest
	for _, m := range []*GenerateRequest{sampleRequest(), {RID: "x", StopStrings: []string{"a"}}, sampleRequest()} {
		if err := r.Decode(Encode(m)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(Encode(&r), Encode(m)) {
			t.Fatal("reused GenerateRequest decode differs")
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Encode(sampleTokenBatch(3))
	withByte := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	// A count of 2^32-1 items in the TokenBatch (after header, rank, seq, load).
	lying := bytes.Clone(good)
	itemsAt := headerLen + 4 + 8 + sizeLoad(&sampleTokenBatch(0).Load)
	binary.LittleEndian.PutUint32(lying[itemsAt:], math.MaxUint32)

	badReason := Encode(&TokenBatch{Items: []TokenItem{{FinishReason: maxFinishReason + 1}}})
	badFlags := Encode(&TokenBatch{Items: []TokenItem{{}}})
	badFlags[len(badFlags)-4-2] = 0x80 // the item flag byte: a plain item ends with it, its finish reason and its stop token
	badGrammar := Encode(&GenerateRequest{Grammar: Grammar{Kind: maxGrammarKind + 1}})
	badErrorKind := Encode(&TokenBatch{Items: []TokenItem{{Finished: true, FinishReason: FinishError, Error: "x", ErrorKind: maxErrorKind + 1}}})

	finished := func(it TokenItem) []byte {
		it.Finished, it.FinishReason = true, FinishLength
		return Encode(&TokenBatch{Items: []TokenItem{it}})
	}
	cases := map[string][]byte{
		"negative drafts":       finished(TokenItem{SpecDrafts: -1}),
		"negative draft tokens": finished(TokenItem{SpecDraftTokens: math.MinInt32}),
		"negative accepted":     finished(TokenItem{SpecDrafts: 2, SpecAccepted: []int32{2, -1}}),
		"too many positions":    finished(TokenItem{SpecAccepted: make([]int32, MaxSpecPositions+1)}),
		"empty":                 nil,
		"one byte":              {WireVersion},
		"bad version":           withByte(0, WireVersion+1),
		"unknown type":          withByte(1, 200),
		"zero type":             withByte(1, 0),
		"truncated":             good[:len(good)-1],
		"trailing":              append(bytes.Clone(good), 0),
		"lying count":           lying,
		"finish reason":         badReason,
		"item flags":            badFlags,
		"grammar kind":          badGrammar,
		"error kind":            badErrorKind,
		"wrong type used":       Encode(&Abort{RID: "x"}),
	}
	for name, frame := range cases {
		var b TokenBatch
		err := b.Decode(frame)
		if name == "grammar kind" {
			err = new(GenerateRequest).Decode(frame)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	// The speculation cases fail for their counts alone: the same items in range decode.
	var ok TokenBatch
	if err := ok.Decode(finished(TokenItem{SpecDrafts: 2, SpecDraftTokens: 9, SpecAccepted: make([]int32, MaxSpecPositions)})); err != nil {
		t.Errorf("speculation counts in range: %v", err)
	}
	if _, err := Decode([]byte{WireVersion, 99}); !errors.Is(err, ErrMalformed) {
		t.Errorf("Decode of unknown type: %v", err)
	}
}

// checkCanonical is the fuzz property: a frame either fails to decode or re-encodes to itself,
// and decoding into a value holding other data gives the same result.
func checkCanonical(t *testing.T, frame []byte, fresh, reused Message) {
	err := fresh.Decode(frame)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("decode error does not wrap ErrMalformed: %v", err)
		}
		return
	}
	if got := Encode(fresh); !bytes.Equal(got, frame) {
		t.Fatalf("re-encoding differs:\n in % x\nout % x", frame, got)
	}
	if err := reused.Decode(frame); err != nil {
		t.Fatalf("decode into a reused value failed: %v", err)
	}
	if got := Encode(reused); !bytes.Equal(got, frame) {
		t.Fatalf("decode into a reused value differs")
	}
}

func addSeeds(f *testing.F, want MsgType) {
	for _, m := range sampleMessages() {
		frame := Encode(m)
		f.Add(frame)
		if m.Type() == want {
			f.Add(frame[:len(frame)/2])
			f.Add(append(bytes.Clone(frame), 1))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{WireVersion, byte(want), 0xff, 0xff, 0xff, 0xff})
}

func FuzzDecodeGenerateRequest(f *testing.F) {
	addSeeds(f, MsgGenerateRequest)
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkCanonical(t, frame, new(GenerateRequest), sampleRequest())
	})
}

func FuzzDecodeAbort(f *testing.F) {
	addSeeds(f, MsgAbort)
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkCanonical(t, frame, new(Abort), &Abort{RID: "old", Owner: 9, Reason: "old"})
	})
}

func FuzzDecodeHoldQuery(f *testing.F) {
	addSeeds(f, MsgHoldQuery)
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkCanonical(t, frame, new(HoldQuery), &HoldQuery{Owner: 9, RIDs: []string{"old", "older"}})
	})
}

func FuzzDecodeTokenBatch(f *testing.F) {
	addSeeds(f, MsgTokenBatch)
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkCanonical(t, frame, new(TokenBatch), sampleTokenBatch(9))
	})
}

func FuzzDecodeTextBatch(f *testing.F) {
	addSeeds(f, MsgTextBatch)
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkCanonical(t, frame, new(TextBatch), sampleTextBatch(9))
	})
}

func FuzzDecode(f *testing.F) {
	addSeeds(f, MsgTokenBatch)
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			return
		}
		if got := Encode(m); !bytes.Equal(got, frame) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// benchBatch is a decode-step-sized batch: 4,096 running requests, one new token each.
func benchBatch() *TokenBatch {
	b := &TokenBatch{Rank: 1, Seq: 1234, Load: sampleLoad(8)}
	for i := range 4096 {
		b.Items = append(b.Items, TokenItem{
			RID: fmt.Sprintf("chatcmpl-%016x", i*7919), Owner: uint32(i % 8), NewIDs: []int32{int32(i*31) % 151_000},
			PromptTokens: 512, CachedTokens: 256, CompletionTokens: int32(i % 300), MatchedStopToken: -1,
		})
	}
	return b
}

func BenchmarkTokenBatch4096(b *testing.B) {
	src := benchBatch()
	b.Run("codec", func(b *testing.B) {
		var buf []byte
		var dst TokenBatch
		b.ReportAllocs()
		for b.Loop() {
			buf = src.Append(buf[:0])
			if err := dst.Decode(buf); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(buf)), "frame-bytes")
	})
	b.Run("codec-encode", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = src.Append(buf[:0])
		}
	})
	b.Run("codec-decode", func(b *testing.B) {
		frame := Encode(src)
		var dst TokenBatch
		b.ReportAllocs()
		for b.Loop() {
			if err := dst.Decode(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		var n int
		b.ReportAllocs()
		for b.Loop() {
			buf, err := json.Marshal(src)
			if err != nil {
				b.Fatal(err)
			}
			var dst TokenBatch
			if err := json.Unmarshal(buf, &dst); err != nil {
				b.Fatal(err)
			}
			n = len(buf)
		}
		b.ReportMetric(float64(n), "frame-bytes")
	})
}

// TestWireGolden pins the byte layout: if this fails, the wire format changed and
// WireVersion must be bumped.
func TestWireGolden(t *testing.T) {
	cases := []struct {
		m    Message
		want string
	}{
		{&Abort{RID: "r1", Owner: 2, OwnerEpoch: 5, Reason: "x"}, "1002" + "02000000" + "7231" + "02000000" + "0500000000000000" + "01000000" + "78"},
		{&HoldQuery{Owner: 2, RIDs: []string{"r1", "s"}}, "1005" + "02000000" + "02000000" + "02000000" + "7231" + "01000000" + "73"},
		{&GenerateRequest{RID: "g", Owner: 1, OwnerEpoch: 3, InputIDs: []int32{7},
			Sampling: Sampling{Temperature: 1, TopP: 0.5, MinP: 0, RepetitionPenalty: 2, FrequencyPenalty: -1, PresencePenalty: 0,
				TopK: 3, Seed: 9, HasSeed: true},
			MaxNewTokens: 4, MinNewTokens: 1, StopTokenIDs: []int32{2}, StopStrings: []string{"s"}, Stream: true, NoText: true,
			StreamInterval: 5, Grammar: Grammar{Kind: GrammarRegex, Spec: "a"}, RoutedRank: -1, ArrivalUnixNano: 6, RequestID: "q", Priority: -2, Pooling: PoolingLast},
			"1001" + "01000000" + "67" + "01000000" + "0300000000000000" + "01000000" + "07000000" +
				"0000803f" + "0000003f" + "00000000" + "00000040" + "000080bf" + "00000000" + "03000000" + "0900000000000000" + "01" + "00000000" + "00000000" +
				"04000000" + "01000000" + "01000000" + "02000000" + "01000000" + "01000000" + "73" +
				"0c" + "05000000" + "03" + "01000000" + "61" + "ffffffff" + "0600000000000000" + "00000000" + "01000000" + "71" + "feffffff" + "01"},
		{&TokenBatch{Rank: 1, Seq: 2, Load: Load{Running: 3, KVBlockSize: 16, Received: []uint64{4}, Preemptions: 7, PrefixHitTokens: 8,
			Steps: 10, SpecDrafts: 11, SpecDraftTokens: 12, SpecAccepted: 13, WaitingByPriority: []PriorityCount{{Priority: -1, Count: 2}}, WaitingOtherPriority: 9,
			Go: GoStats{Goroutines: 5, GOMAXPROCS: 2, HeapAllocBytes: 1, HeapInuseBytes: 3, SysBytes: 4, HeapGoalBytes: 6, GCCycles: 7, GCPauseSeconds: 0.5, GoVersion: "go"}},
			Items: []TokenItem{{RID: "a", NewIDs: []int32{-1}, Finished: true, FinishReason: FinishLength, MatchedStopToken: -1,
				SkipSpecialTokens: true, StopStrings: []string{"z"}, RequestID: "q", QueueNanos: 1, PrefillNanos: 2, DecodeNanos: 3, Preemptions: 4, Embedding: []float32{1},
				SpecDrafts: 5, SpecDraftTokens: 6, SpecAccepted: []int32{3, 1}}}},
			"1003" + "01000000" + "0200000000000000" +
				"0300000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" + "1000000000000000" + "0000000000000000" +
				"0700000000000000" + "0800000000000000" + // preemptions, prefix hit tokens
				"0a00000000000000" + "0b00000000000000" + "0c00000000000000" + "0d00000000000000" + // steps, drafts, draft tokens, accepted
				"0900000000000000" +
				"01000000" + "0400000000000000" + "00000000" +
				"01000000" + "ffffffff" + "0200000000000000" + // waiting by priority: -1 x2
				"0500000000000000" + "0200000000000000" + "0100000000000000" + "0300000000000000" + // go: goroutines, gomaxprocs, heap alloc, inuse
				"0400000000000000" + "0600000000000000" + "0700000000000000" + "000000000000e03f" + "02000000" + "676f" + // sys, goal, gc cycles, pause 0.5 s, "go"
				"01000000" + // one item
				"01000000" + "61" + "00000000" + "01000000" + "ffffffff" + "00000000" +
				"00000000" + "00000000" + "00000000" + "05" + "02" + "ffffffff" + "00000000" + "00000000" + "00" + // no error, kind internal
				"01000000" + "01000000" + "7a" + "00000000" + "00000000" + "00000000" + "00000000" + "00000000" + "01000000" + "71" + "01000000" + "0000803f" +
				"0100000000000000" + "0200000000000000" + "0300000000000000" + "04000000" +
				"05000000" + "06000000" + "02000000" + "03000000" + "01000000"}, // speculation: 5 drafts, 6 tokens, accepted [3 1]
		// A plain item (no optional tail) leaves the tail out and says so (flag 0x08).
		{&TokenBatch{Rank: 1, Seq: 2, Items: []TokenItem{{RID: "a", Owner: 1, NewIDs: []int32{7}, PromptTokens: 3, CompletionTokens: 1, MatchedStopToken: -1}}},
			"1003" + "01000000" + "0200000000000000" +
				"0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" +
				"0000000000000000" + "0000000000000000" +
				"0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" +
				"0000000000000000" +
				"00000000" + "00000000" +
				"00000000" +
				"0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" +
				"0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" + "00000000" +
				"01000000" + // one item
				"01000000" + "61" + "01000000" + "01000000" + "07000000" + "00000000" +
				"03000000" + "00000000" + "01000000" + "08" + "00" + "ffffffff"},
	}
	for _, c := range cases {
		if got := fmt.Sprintf("%x", Encode(c.m)); got != c.want {
			t.Errorf("%v encodes as\n%s\nwant\n%s", c.m.Type(), got, c.want)
		}
	}
}

// TestSizes: every message's size (computed beside its Append) is exactly the frame's length,
// so Append grows its buffer once and a field added to Append without its size shows here.
func TestSizes(t *testing.T) {
	for _, m := range sampleMessages() {
		var want int
		switch m := m.(type) {
		case *GenerateRequest:
			want = m.size()
		case *Abort:
			want = m.size()
		case *HoldQuery:
			want = m.size()
		case *TokenBatch:
			want = m.size()
		case *TextBatch:
			want = m.size()
		}
		if got := len(Encode(m)); got != want {
			t.Errorf("%v: size() = %d, frame is %d bytes", m.Type(), want, got)
		}
	}
}

// TestPlainItemReusesBuffers checks that a plain item (no optional tail on the wire) decoded
// into a batch whose item had a tail leaves every tail field empty, that an item with a tail
// still carries it, and that a plain item's frame leaves the tail out.
func TestPlainItemReusesBuffers(t *testing.T) {
	full := TokenItem{RID: "a", NewIDs: []int32{1}, Logprobs: []float32{-1}, CompletionTokens: 1, MatchedStopToken: -1,
		StopStrings: []string{"s"}, TopLogprobIDs: []int32{1, 2}, TopLogprobs: []float32{-1, -2}, PromptLogprobs: []float32{-3},
		PromptTopLogprobIDs: []int32{4}, PromptTopLogprobs: []float32{-4}, RequestID: "q", Embedding: []float32{5}}
	plain := TokenItem{RID: "a", NewIDs: []int32{2}, CompletionTokens: 2, MatchedStopToken: -1}
	done := TokenItem{RID: "a", NewIDs: []int32{3}, CompletionTokens: 3, MatchedStopToken: 9, Finished: true, FinishReason: FinishStop,
		QueueNanos: 1, PrefillNanos: 2, DecodeNanos: 3, SpecDrafts: 1, SpecDraftTokens: 2, SpecAccepted: []int32{1}}
	var b TokenBatch
	for _, want := range []TokenItem{full, plain, full, done} {
		if err := b.Decode(Encode(&TokenBatch{Items: []TokenItem{want}})); err != nil {
			t.Fatal(err)
		}
		got := b.Items[0]
		norm := func(it TokenItem) string { return fmt.Sprintf("%+v", it) }
		// Empty slices compare as nil in the %+v form.
		if norm(got) != norm(want) {
			t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
		}
	}
	if p, f := len(Encode(&TokenBatch{Items: []TokenItem{plain}})), len(Encode(&TokenBatch{Items: []TokenItem{{RID: "a", NewIDs: []int32{2}, CompletionTokens: 2, MatchedStopToken: -1, RequestID: "q"}}})); f-p < 40 {
		// The tail is 11 fields of at least 4 bytes but for the error kind's 1, and "q".
		t.Fatalf("a plain item takes %d bytes, one with a request id %d: the tail was not left out", p, f)
	}
}
