package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Layout: every frame is [WireVersion][MsgType][body]. Fixed-width fields are little-endian;
// slices and strings are a uint32 count followed by their elements; bools are packed into
// flag bytes whose unused bits must be zero. The encoding is canonical: a frame that decodes
// re-encodes to the same bytes.

// ErrMalformed wraps every decoding failure.
var ErrMalformed = errors.New("ipc: malformed frame")

const headerLen = 2

// Encode returns m's frame in a new buffer.
func Encode(m Message) []byte { return m.Append(nil) }

// PeekType checks the frame header and returns its message type.
func PeekType(frame []byte) (MsgType, error) {
	if len(frame) < headerLen {
		return 0, fmt.Errorf("%w: %d-byte frame has no header", ErrMalformed, len(frame))
	}
	if frame[0] != WireVersion {
		return 0, fmt.Errorf("%w: wire version %d, want %d", ErrMalformed, frame[0], WireVersion)
	}
	t := MsgType(frame[1])
	switch t {
	case MsgGenerateRequest, MsgAbort, MsgTokenBatch, MsgTextBatch, MsgHoldQuery:
		return t, nil
	}
	return 0, fmt.Errorf("%w: unknown message type %d", ErrMalformed, frame[1])
}

// Decode decodes any frame into a newly allocated message: *GenerateRequest, *Abort, *HoldQuery,
// *TokenBatch or *TextBatch. Hot loops should call the typed Decode methods on reused values.
func Decode(frame []byte) (Message, error) {
	t, err := PeekType(frame)
	if err != nil {
		return nil, err
	}
	var m Message
	switch t {
	case MsgGenerateRequest:
		m = new(GenerateRequest)
	case MsgAbort:
		m = new(Abort)
	case MsgHoldQuery:
		m = new(HoldQuery)
	case MsgTokenBatch:
		m = new(TokenBatch)
	case MsgTextBatch:
		m = new(TextBatch)
	}
	if err := m.Decode(frame); err != nil {
		return nil, err
	}
	return m, nil
}

// ---- sizes of the primitives; each message's size sits beside its Append (so Append grows
// dst once, and a new field is counted where it is written) ----

func sizeStr(s string) int     { return 4 + len(s) }
func sizeI32s(s []int32) int   { return 4 + 4*len(s) }
func sizeF32s(s []float32) int { return 4 + 4*len(s) }

func sizeStrs(s []string) int {
	n := 4
	for _, x := range s {
		n += sizeStr(x)
	}
	return n
}

// ---- encoding primitives ----

func appendLen(dst []byte, n int) []byte {
	if uint64(n) > math.MaxUint32 {
		panic(fmt.Sprintf("ipc: length %d does not fit the wire format", n))
	}
	return binary.LittleEndian.AppendUint32(dst, uint32(n))
}

func appendU32(dst []byte, v uint32) []byte  { return binary.LittleEndian.AppendUint32(dst, v) }
func appendI32(dst []byte, v int32) []byte   { return binary.LittleEndian.AppendUint32(dst, uint32(v)) }
func appendU64(dst []byte, v uint64) []byte  { return binary.LittleEndian.AppendUint64(dst, v) }
func appendI64(dst []byte, v int64) []byte   { return binary.LittleEndian.AppendUint64(dst, uint64(v)) }
func appendF32(dst []byte, v float32) []byte { return appendU32(dst, math.Float32bits(v)) }

func appendStr(dst []byte, s string) []byte {
	return append(appendLen(dst, len(s)), s...)
}

func appendI32s(dst []byte, s []int32) []byte {
	dst = appendLen(dst, len(s))
	off := len(dst)
	dst = slices.Grow(dst, 4*len(s))[:off+4*len(s)]
	b := dst[off:]
	for i, v := range s {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return dst
}

func appendF32s(dst []byte, s []float32) []byte {
	dst = appendLen(dst, len(s))
	off := len(dst)
	dst = slices.Grow(dst, 4*len(s))[:off+4*len(s)]
	b := dst[off:]
	for i, v := range s {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return dst
}

func appendU64s(dst []byte, s []uint64) []byte {
	dst = appendLen(dst, len(s))
	for _, v := range s {
		dst = appendU64(dst, v)
	}
	return dst
}

func appendStrs(dst []byte, s []string) []byte {
	dst = appendLen(dst, len(s))
	for _, x := range s {
		dst = appendStr(dst, x)
	}
	return dst
}

func flag(b bool, bit uint8) uint8 {
	if b {
		return bit
	}
	return 0
}

// ---- decoding primitives ----

// reader is a bounds-checked cursor over a frame. The first failure sticks: it moves the
// cursor to the end so later reads fail their bounds checks and return zero values, and the
// caller checks err once at the end.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or oversized %s at byte %d of %d", ErrMalformed, what, r.off, len(r.b))
	}
	r.off = len(r.b)
}

// bad records a semantic error (a bad enum or flag value) like fail does.
func (r *reader) bad(err error) {
	if r.err == nil {
		r.err = err
	}
	r.off = len(r.b)
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.remaining() {
		r.fail(what)
		return nil
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s
}

// The fixed-width reads are written to inline: one bounds check on the fast path.

func (r *reader) u8(what string) uint8 {
	if r.off < len(r.b) {
		v := r.b[r.off]
		r.off++
		return v
	}
	r.fail(what)
	return 0
}

func (r *reader) u32(what string) uint32 {
	if r.off <= len(r.b)-4 {
		v := binary.LittleEndian.Uint32(r.b[r.off:])
		r.off += 4
		return v
	}
	r.fail(what)
	return 0
}

func (r *reader) i32(what string) int32   { return int32(r.u32(what)) }
func (r *reader) f32(what string) float32 { return math.Float32frombits(r.u32(what)) }

func (r *reader) u64(what string) uint64 {
	if r.off <= len(r.b)-8 {
		v := binary.LittleEndian.Uint64(r.b[r.off:])
		r.off += 8
		return v
	}
	r.fail(what)
	return 0
}

func (r *reader) i64(what string) int64 { return int64(r.u64(what)) }

// count reads an element count and checks that count elements of at least elemLen bytes each
// fit in what is left of the frame, so a lying prefix cannot cause a huge allocation.
func (r *reader) count(elemLen int, what string) int {
	n := r.u32(what)
	if r.err != nil {
		return 0
	}
	if uint64(n)*uint64(elemLen) > uint64(r.remaining()) {
		r.fail(what)
		return 0
	}
	return int(n)
}

// str reads a string, returning old unchanged (no allocation) when the bytes are equal:
// decoding into a reused batch keeps the rids of requests that are still running.
func (r *reader) str(old string, what string) string {
	n := r.count(1, what)
	b := r.take(n, what)
	if len(b) == 0 || string(b) == old {
		if len(b) == 0 {
			return ""
		}
		return old
	}
	return string(b)
}

func (r *reader) i32s(dst []int32, what string) []int32 {
	n := r.count(4, what)
	b := r.take(4*n, what)
	dst = slices.Grow(dst[:0], n)[:n]
	if b == nil {
		return dst[:0]
	}
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return dst
}

func (r *reader) f32s(dst []float32, what string) []float32 {
	n := r.count(4, what)
	b := r.take(4*n, what)
	dst = slices.Grow(dst[:0], n)[:n]
	if b == nil {
		return dst[:0]
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return dst
}

func (r *reader) u64s(dst []uint64, what string) []uint64 {
	n := r.count(8, what)
	b := r.take(8*n, what)
	dst = slices.Grow(dst[:0], n)[:n]
	if b == nil {
		return dst[:0]
	}
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return dst
}

// strs reads a string list into dst, keeping equal strings already in place.
func (r *reader) strs(dst []string, what string) []string {
	n := r.count(4, what)
	old := dst[:cap(dst)]
	dst = slices.Grow(dst[:0], n)[:n]
	for i := range dst {
		prev := ""
		if i < len(old) {
			prev = old[i]
		}
		dst[i] = r.str(prev, what)
	}
	return dst
}

func (r *reader) flags(allowed uint8, what string) uint8 {
	f := r.u8(what)
	if r.err == nil && f&^allowed != 0 {
		r.bad(fmt.Errorf("%w: %s has unknown bits %#x", ErrMalformed, what, f&^allowed))
	}
	return f
}

// header checks the version and type bytes.
func (r *reader) header(want MsgType) {
	t, err := PeekType(r.b)
	if err != nil {
		r.bad(err)
		return
	}
	if t != want {
		r.bad(fmt.Errorf("%w: frame holds a %v, want %v", ErrMalformed, t, want))
		return
	}
	r.off = headerLen
}

// done reports the sticky error, or trailing bytes.
func (r *reader) done(what MsgType) error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.b)-r.off)
	}
	if r.err != nil {
		return fmt.Errorf("decode %v: %w", what, r.err)
	}
	return nil
}

// ---- Sampling ----

const (
	sampHasSeed  uint8 = 1 << iota
	sampAllFlags       = sampHasSeed
)

// sizeSampling is the encoded size of a Sampling: six floats, top_k, seed, the flags byte and
// the logit bias.
func sizeSampling(s *Sampling) int {
	return 6*4 + 4 + 8 + 1 + sizeI32s(s.LogitBiasIDs) + sizeF32s(s.LogitBiasValues)
}

func appendSampling(dst []byte, s *Sampling) []byte {
	dst = appendF32(dst, s.Temperature)
	dst = appendF32(dst, s.TopP)
	dst = appendF32(dst, s.MinP)
	dst = appendF32(dst, s.RepetitionPenalty)
	dst = appendF32(dst, s.FrequencyPenalty)
	dst = appendF32(dst, s.PresencePenalty)
	dst = appendI32(dst, s.TopK)
	dst = appendU64(dst, s.Seed)
	dst = append(dst, flag(s.HasSeed, sampHasSeed))
	dst = appendI32s(dst, s.LogitBiasIDs)
	return appendF32s(dst, s.LogitBiasValues)
}

func (r *reader) sampling(s *Sampling) {
	s.Temperature = r.f32("temperature")
	s.TopP = r.f32("top_p")
	s.MinP = r.f32("min_p")
	s.RepetitionPenalty = r.f32("repetition_penalty")
	s.FrequencyPenalty = r.f32("frequency_penalty")
	s.PresencePenalty = r.f32("presence_penalty")
	s.TopK = r.i32("top_k")
	s.Seed = r.u64("seed")
	f := r.flags(sampAllFlags, "sampling flags")
	s.HasSeed = f&sampHasSeed != 0
	s.LogitBiasIDs = r.i32s(s.LogitBiasIDs, "logit_bias ids")
	s.LogitBiasValues = r.f32s(s.LogitBiasValues, "logit_bias values")
	if r.err == nil && len(s.LogitBiasIDs) != len(s.LogitBiasValues) {
		r.bad(fmt.Errorf("%w: %d logit_bias ids but %d values", ErrMalformed, len(s.LogitBiasIDs), len(s.LogitBiasValues)))
	}
}

// ---- GenerateRequest ----

const (
	genIgnoreEOS uint8 = 1 << iota
	genSkipSpecialTokens
	genStream
	genNoText
	genLogprobs
	genPromptLogprobs
	genAllFlags = genIgnoreEOS | genSkipSpecialTokens | genStream | genNoText | genLogprobs | genPromptLogprobs
)

func (m *GenerateRequest) size() int {
	return headerLen + sizeStr(m.RID) + 4 + 8 + sizeI32s(m.InputIDs) + sizeSampling(&m.Sampling) + 2*4 +
		sizeI32s(m.StopTokenIDs) + sizeStrs(m.StopStrings) + 1 + 4 + 1 + sizeStr(m.Grammar.Spec) + 4 + 8 + 4 + sizeStr(m.RequestID) + 4 + 1
}

// Append implements Message.
func (m *GenerateRequest) Append(dst []byte) []byte {
	dst = slices.Grow(dst, m.size())
	dst = append(dst, WireVersion, byte(MsgGenerateRequest))
	dst = appendStr(dst, m.RID)
	dst = appendU32(dst, m.Owner)
	dst = appendU64(dst, m.OwnerEpoch)
	dst = appendI32s(dst, m.InputIDs)
	dst = appendSampling(dst, &m.Sampling)
	dst = appendI32(dst, m.MaxNewTokens)
	dst = appendI32(dst, m.MinNewTokens)
	dst = appendI32s(dst, m.StopTokenIDs)
	dst = appendStrs(dst, m.StopStrings)
	dst = append(dst, flag(m.IgnoreEOS, genIgnoreEOS)|flag(m.SkipSpecialTokens, genSkipSpecialTokens)|
		flag(m.Stream, genStream)|flag(m.NoText, genNoText)|flag(m.Logprobs, genLogprobs)|flag(m.PromptLogprobs, genPromptLogprobs))
	dst = appendI32(dst, m.StreamInterval)
	dst = append(dst, byte(m.Grammar.Kind))
	dst = appendStr(dst, m.Grammar.Spec)
	dst = appendI32(dst, m.RoutedRank)
	dst = appendI64(dst, m.ArrivalUnixNano)
	dst = appendI32(dst, m.TopLogprobs)
	dst = appendStr(dst, m.RequestID)
	dst = appendI32(dst, m.Priority)
	dst = append(dst, byte(m.Pooling))
	return dst
}

// Decode implements Message.
func (m *GenerateRequest) Decode(frame []byte) error {
	r := reader{b: frame}
	r.header(MsgGenerateRequest)
	m.RID = r.str(m.RID, "rid")
	m.Owner = r.u32("owner")
	m.OwnerEpoch = r.u64("owner_epoch")
	m.InputIDs = r.i32s(m.InputIDs, "input_ids")
	r.sampling(&m.Sampling)
	m.MaxNewTokens = r.i32("max_new_tokens")
	m.MinNewTokens = r.i32("min_new_tokens")
	m.StopTokenIDs = r.i32s(m.StopTokenIDs, "stop_token_ids")
	m.StopStrings = r.strs(m.StopStrings, "stop_strings")
	f := r.flags(genAllFlags, "request flags")
	m.IgnoreEOS = f&genIgnoreEOS != 0
	m.SkipSpecialTokens = f&genSkipSpecialTokens != 0
	m.Stream = f&genStream != 0
	m.NoText = f&genNoText != 0
	m.Logprobs = f&genLogprobs != 0
	m.PromptLogprobs = f&genPromptLogprobs != 0
	m.StreamInterval = r.i32("stream_interval")
	m.Grammar.Kind = GrammarKind(r.u8("grammar kind"))
	if r.err == nil && m.Grammar.Kind > maxGrammarKind {
		r.bad(fmt.Errorf("%w: unknown grammar kind %d", ErrMalformed, m.Grammar.Kind))
	}
	m.Grammar.Spec = r.str(m.Grammar.Spec, "grammar spec")
	m.RoutedRank = r.i32("routed_rank")
	m.ArrivalUnixNano = r.i64("arrival")
	m.TopLogprobs = r.i32("top_logprobs")
	m.RequestID = r.str(m.RequestID, "request_id")
	m.Priority = r.i32("priority")
	m.Pooling = Pooling(r.u8("pooling"))
	if r.err == nil && m.Pooling > maxPooling {
		r.bad(fmt.Errorf("%w: unknown pooling %d", ErrMalformed, m.Pooling))
	}
	return r.done(MsgGenerateRequest)
}

// ---- Abort ----

func (m *Abort) size() int { return headerLen + sizeStr(m.RID) + 4 + 8 + sizeStr(m.Reason) }

// Append implements Message.
func (m *Abort) Append(dst []byte) []byte {
	dst = slices.Grow(dst, m.size())
	dst = append(dst, WireVersion, byte(MsgAbort))
	dst = appendStr(dst, m.RID)
	dst = appendU32(dst, m.Owner)
	dst = appendU64(dst, m.OwnerEpoch)
	return appendStr(dst, m.Reason)
}

// Decode implements Message.
func (m *Abort) Decode(frame []byte) error {
	r := reader{b: frame}
	r.header(MsgAbort)
	m.RID = r.str(m.RID, "rid")
	m.Owner = r.u32("owner")
	m.OwnerEpoch = r.u64("owner_epoch")
	m.Reason = r.str(m.Reason, "reason")
	return r.done(MsgAbort)
}

// ---- HoldQuery ----

func (m *HoldQuery) size() int { return headerLen + 4 + sizeStrs(m.RIDs) }

// Append implements Message.
func (m *HoldQuery) Append(dst []byte) []byte {
	dst = slices.Grow(dst, m.size())
	dst = append(dst, WireVersion, byte(MsgHoldQuery))
	dst = appendU32(dst, m.Owner)
	return appendStrs(dst, m.RIDs)
}

// Decode implements Message.
func (m *HoldQuery) Decode(frame []byte) error {
	r := reader{b: frame}
	r.header(MsgHoldQuery)
	m.Owner = r.u32("owner")
	m.RIDs = r.strs(m.RIDs, "rids")
	return r.done(MsgHoldQuery)
}

// ---- Load and items ----

func sizeLoad(l *Load) int {
	return loadFixedLen + 4 + 8*len(l.Received) + 4 + 8*len(l.ReceivedTokens) + 4 + 12*len(l.WaitingByPriority) + sizeGoStats(&l.Go)
}

// loadFixedLen is the encoded size of a Load's fixed-width fields.
const loadFixedLen = 13 * 8

// goStatsFixedLen is the encoded size of a GoStats' fixed-width fields.
const goStatsFixedLen = 8 * 8

func sizeGoStats(g *GoStats) int { return goStatsFixedLen + sizeStr(g.GoVersion) }

func appendGoStats(dst []byte, g *GoStats) []byte {
	dst = appendU64(dst, g.Goroutines)
	dst = appendU64(dst, g.GOMAXPROCS)
	dst = appendU64(dst, g.HeapAllocBytes)
	dst = appendU64(dst, g.HeapInuseBytes)
	dst = appendU64(dst, g.SysBytes)
	dst = appendU64(dst, g.HeapGoalBytes)
	dst = appendU64(dst, g.GCCycles)
	dst = appendU64(dst, math.Float64bits(g.GCPauseSeconds))
	return appendStr(dst, g.GoVersion)
}

func (r *reader) goStats(g *GoStats) {
	g.Goroutines = r.u64("go.goroutines")
	g.GOMAXPROCS = r.u64("go.gomaxprocs")
	g.HeapAllocBytes = r.u64("go.heap_alloc")
	g.HeapInuseBytes = r.u64("go.heap_inuse")
	g.SysBytes = r.u64("go.sys")
	g.HeapGoalBytes = r.u64("go.heap_goal")
	g.GCCycles = r.u64("go.gc_cycles")
	g.GCPauseSeconds = math.Float64frombits(r.u64("go.gc_pause"))
	g.GoVersion = r.str(g.GoVersion, "go.go_version")
	if len(g.GoVersion) > MaxGoVersionLen {
		r.bad(fmt.Errorf("%w: go.go_version is %d bytes, at most %d", ErrMalformed, len(g.GoVersion), MaxGoVersionLen))
	}
}

func appendLoad(dst []byte, l *Load) []byte {
	dst = appendI64(dst, l.Running)
	dst = appendI64(dst, l.Waiting)
	dst = appendI64(dst, l.KVTokensUsed)
	dst = appendI64(dst, l.KVTokensCapacity)
	dst = appendI64(dst, l.KVBlockSize)
	dst = appendI64(dst, l.WaitingTokens)
	dst = appendU64(dst, l.Preemptions)
	dst = appendU64(dst, l.PrefixHitTokens)
	dst = appendU64(dst, l.Steps)
	dst = appendU64(dst, l.SpecDrafts)
	dst = appendU64(dst, l.SpecDraftTokens)
	dst = appendU64(dst, l.SpecAccepted)
	dst = appendI64(dst, l.WaitingOtherPriority)
	dst = appendU64s(dst, l.Received)
	dst = appendU64s(dst, l.ReceivedTokens)
	dst = appendLen(dst, len(l.WaitingByPriority))
	for _, c := range l.WaitingByPriority {
		dst = appendI32(dst, c.Priority)
		dst = appendI64(dst, c.Count)
	}
	return appendGoStats(dst, &l.Go)
}

func (r *reader) load(l *Load) {
	l.Running = r.i64("load.running")
	l.Waiting = r.i64("load.waiting")
	l.KVTokensUsed = r.i64("load.kv_used")
	l.KVTokensCapacity = r.i64("load.kv_capacity")
	l.KVBlockSize = r.i64("load.kv_block_size")
	l.WaitingTokens = r.i64("load.waiting_tokens")
	l.Preemptions = r.u64("load.preemptions")
	l.PrefixHitTokens = r.u64("load.prefix_hit_tokens")
	l.Steps = r.u64("load.steps")
	l.SpecDrafts = r.u64("load.spec_drafts")
	l.SpecDraftTokens = r.u64("load.spec_draft_tokens")
	l.SpecAccepted = r.u64("load.spec_accepted")
	l.WaitingOtherPriority = r.i64("load.waiting_other_priority")
	l.Received = r.u64s(l.Received, "load.received")
	l.ReceivedTokens = r.u64s(l.ReceivedTokens, "load.received_tokens")
	n := r.count(12, "load.waiting_by_priority")
	if n > MaxPriorityCounts {
		r.bad(fmt.Errorf("%w: load.waiting_by_priority has %d entries, at most %d", ErrMalformed, n, MaxPriorityCounts))
		return
	}
	l.WaitingByPriority = l.WaitingByPriority[:0]
	for range n {
		p := r.i32("load.waiting_by_priority")
		l.WaitingByPriority = append(l.WaitingByPriority, PriorityCount{Priority: p, Count: r.i64("load.waiting_by_priority")})
	}
	r.goStats(&l.Go)
}

const (
	itemFinished uint8 = 1 << iota
	itemNoText
	itemSkipSpecialTokens
	// itemPlain says the item's optional tail (matched stop string, error, stop strings, top
	// and prompt logprobs, request id, embedding) is empty and left out: most items of a
	// decoding batch carry a rid, counts and one id, and the tail would be most of their bytes
	// and of the time spent encoding and decoding them, in schedulerd, detokd and the worker.
	itemPlain
	itemAllFlags = itemFinished | itemNoText | itemSkipSpecialTokens | itemPlain
)

// plainItem reports whether it's optional tail is empty, so it goes out without it (itemPlain).
func plainItem(it *TokenItem) bool {
	return it.MatchedStop == "" && it.Error == "" && it.ErrorKind == 0 && len(it.StopStrings) == 0 &&
		len(it.TopLogprobIDs) == 0 && len(it.TopLogprobs) == 0 && len(it.PromptLogprobs) == 0 &&
		len(it.PromptTopLogprobIDs) == 0 && len(it.PromptTopLogprobs) == 0 && it.RequestID == "" && len(it.Embedding) == 0
}

func sizeTokenItem(it *TokenItem) int {
	head := sizeStr(it.RID) + 4 + sizeI32s(it.NewIDs) + sizeF32s(it.Logprobs) + 3*4 + 2 + 4
	if plainItem(it) {
		return head + itemTimesLen(it)
	}
	return head + sizeStr(it.MatchedStop) + sizeStr(it.Error) + 1 + sizeStrs(it.StopStrings) +
		sizeI32s(it.TopLogprobIDs) + sizeF32s(it.TopLogprobs) +
		sizeF32s(it.PromptLogprobs) + sizeI32s(it.PromptTopLogprobIDs) + sizeF32s(it.PromptTopLogprobs) +
		sizeStr(it.RequestID) + sizeF32s(it.Embedding) + itemTimesLen(it)
}

// itemTimesLen is the size of an item's times and speculation counts: only a finished item
// carries them.
func itemTimesLen(it *TokenItem) int {
	if it.Finished {
		return 3*8 + 4 + 2*4 + sizeI32s(it.SpecAccepted)
	}
	return 0
}

// minTokenItemLen is the encoded size of an empty plain TokenItem; it bounds item counts.
const minTokenItemLen = 4 + 4 + 4 + 4 + 3*4 + 2 + 4

func appendTokenItem(dst []byte, it *TokenItem) []byte {
	dst = appendStr(dst, it.RID)
	dst = appendU32(dst, it.Owner)
	dst = appendI32s(dst, it.NewIDs)
	dst = appendF32s(dst, it.Logprobs)
	dst = appendI32(dst, it.PromptTokens)
	dst = appendI32(dst, it.CachedTokens)
	dst = appendI32(dst, it.CompletionTokens)
	plain := plainItem(it)
	dst = append(dst, flag(it.Finished, itemFinished)|flag(it.NoText, itemNoText)|
		flag(it.SkipSpecialTokens, itemSkipSpecialTokens)|flag(plain, itemPlain), byte(it.FinishReason))
	dst = appendI32(dst, it.MatchedStopToken)
	if !plain {
		dst = appendStr(dst, it.MatchedStop)
		dst = appendStr(dst, it.Error)
		dst = append(dst, byte(it.ErrorKind))
		dst = appendStrs(dst, it.StopStrings)
		dst = appendI32s(dst, it.TopLogprobIDs)
		dst = appendF32s(dst, it.TopLogprobs)
		dst = appendF32s(dst, it.PromptLogprobs)
		dst = appendI32s(dst, it.PromptTopLogprobIDs)
		dst = appendF32s(dst, it.PromptTopLogprobs)
		dst = appendStr(dst, it.RequestID)
		dst = appendF32s(dst, it.Embedding)
	}
	if it.Finished {
		dst = appendI64(dst, it.QueueNanos)
		dst = appendI64(dst, it.PrefillNanos)
		dst = appendI64(dst, it.DecodeNanos)
		dst = appendI32(dst, it.Preemptions)
		dst = appendI32(dst, it.SpecDrafts)
		dst = appendI32(dst, it.SpecDraftTokens)
		dst = appendI32s(dst, it.SpecAccepted)
	}
	return dst
}

func (r *reader) tokenItem(it *TokenItem) {
	it.RID = r.str(it.RID, "item.rid")
	it.Owner = r.u32("item.owner")
	it.NewIDs = r.i32s(it.NewIDs, "item.new_ids")
	it.Logprobs = r.f32s(it.Logprobs, "item.logprobs")
	// The fixed-size middle of an item is read as one block: one bounds check, not six.
	b := r.take(18, "item counters")
	if len(b) < 18 {
		return
	}
	it.PromptTokens = int32(binary.LittleEndian.Uint32(b))
	it.CachedTokens = int32(binary.LittleEndian.Uint32(b[4:]))
	it.CompletionTokens = int32(binary.LittleEndian.Uint32(b[8:]))
	f, reason := b[12], FinishReason(b[13])
	if f&^itemAllFlags != 0 {
		r.bad(fmt.Errorf("%w: item flags have unknown bits %#x", ErrMalformed, f&^itemAllFlags))
	}
	if reason > maxFinishReason {
		r.bad(fmt.Errorf("%w: unknown finish reason %d", ErrMalformed, reason))
	}
	it.Finished = f&itemFinished != 0
	it.NoText = f&itemNoText != 0
	it.SkipSpecialTokens = f&itemSkipSpecialTokens != 0
	it.FinishReason = reason
	it.MatchedStopToken = int32(binary.LittleEndian.Uint32(b[14:]))
	if f&itemPlain != 0 {
		// The optional tail was left out: every field of it is empty (storage kept for reuse).
		it.MatchedStop, it.Error, it.ErrorKind, it.RequestID = "", "", 0, ""
		it.StopStrings, it.TopLogprobIDs, it.TopLogprobs = it.StopStrings[:0], it.TopLogprobIDs[:0], it.TopLogprobs[:0]
		it.PromptLogprobs, it.PromptTopLogprobIDs, it.PromptTopLogprobs = it.PromptLogprobs[:0], it.PromptTopLogprobIDs[:0], it.PromptTopLogprobs[:0]
		it.Embedding = it.Embedding[:0]
	} else {
		r.itemTail(it)
	}
	it.QueueNanos, it.PrefillNanos, it.DecodeNanos, it.Preemptions = 0, 0, 0, 0
	it.SpecDrafts, it.SpecDraftTokens, it.SpecAccepted = 0, 0, it.SpecAccepted[:0]
	if it.Finished {
		it.QueueNanos = r.i64("item.queue_time")
		it.PrefillNanos = r.i64("item.prefill_time")
		it.DecodeNanos = r.i64("item.decode_time")
		it.Preemptions = r.i32("item.preemptions")
		r.specCounts(it)
	}
}

// itemTail reads the optional tail of an item that is not plain (itemPlain).
func (r *reader) itemTail(it *TokenItem) {
	it.MatchedStop = r.str(it.MatchedStop, "item.matched_stop")
	it.Error = r.str(it.Error, "item.error")
	it.ErrorKind = ErrorKind(r.u8("item.error_kind"))
	if r.err == nil && it.ErrorKind > maxErrorKind {
		r.bad(fmt.Errorf("%w: unknown error kind %d", ErrMalformed, it.ErrorKind))
	}
	it.StopStrings = r.strs(it.StopStrings, "item.stop_strings")
	it.TopLogprobIDs = r.i32s(it.TopLogprobIDs, "item.top_logprob_ids")
	it.TopLogprobs = r.f32s(it.TopLogprobs, "item.top_logprobs")
	if r.err == nil && len(it.TopLogprobIDs) != len(it.TopLogprobs) {
		r.bad(fmt.Errorf("%w: %d top logprob ids but %d values", ErrMalformed, len(it.TopLogprobIDs), len(it.TopLogprobs)))
	}
	it.PromptLogprobs = r.f32s(it.PromptLogprobs, "item.prompt_logprobs")
	it.PromptTopLogprobIDs = r.i32s(it.PromptTopLogprobIDs, "item.prompt_top_logprob_ids")
	it.PromptTopLogprobs = r.f32s(it.PromptTopLogprobs, "item.prompt_top_logprobs")
	if r.err == nil && len(it.PromptTopLogprobIDs) != len(it.PromptTopLogprobs) {
		r.bad(fmt.Errorf("%w: %d prompt top logprob ids but %d values", ErrMalformed, len(it.PromptTopLogprobIDs), len(it.PromptTopLogprobs)))
	}
	it.RequestID = r.str(it.RequestID, "item.request_id")
	it.Embedding = r.f32s(it.Embedding, "item.embedding")
}

// specCounts reads a finished item's speculation counts. They feed counters on /metrics, so a
// negative count (which would make a counter go down) or more positions than any draft has is
// malformed.
func (r *reader) specCounts(it *TokenItem) {
	it.SpecDrafts = r.i32("item.spec_drafts")
	it.SpecDraftTokens = r.i32("item.spec_draft_tokens")
	it.SpecAccepted = r.i32s(it.SpecAccepted, "item.spec_accepted")
	if r.err != nil {
		return
	}
	if len(it.SpecAccepted) > MaxSpecPositions {
		r.bad(fmt.Errorf("%w: item.spec_accepted has %d positions, at most %d", ErrMalformed, len(it.SpecAccepted), MaxSpecPositions))
		return
	}
	if it.SpecDrafts < 0 || it.SpecDraftTokens < 0 || slices.ContainsFunc(it.SpecAccepted, func(n int32) bool { return n < 0 }) {
		r.bad(fmt.Errorf("%w: negative speculation count (%d drafts, %d draft tokens, accepted %v)", ErrMalformed,
			it.SpecDrafts, it.SpecDraftTokens, it.SpecAccepted))
	}
}

// ---- TokenBatch ----

func (m *TokenBatch) size() int {
	n := headerLen + 4 + 8 + sizeLoad(&m.Load) + 4
	for i := range m.Items {
		n += sizeTokenItem(&m.Items[i])
	}
	return n
}

// Append implements Message.
func (m *TokenBatch) Append(dst []byte) []byte {
	dst = slices.Grow(dst, m.size())
	dst = append(dst, WireVersion, byte(MsgTokenBatch))
	dst = appendU32(dst, m.Rank)
	dst = appendU64(dst, m.Seq)
	dst = appendLoad(dst, &m.Load)
	dst = appendLen(dst, len(m.Items))
	for i := range m.Items {
		dst = appendTokenItem(dst, &m.Items[i])
	}
	return dst
}

// Decode implements Message. Items and their slices are reused; a rid equal to the one
// already in the same position is kept without allocating.
func (m *TokenBatch) Decode(frame []byte) error {
	r := reader{b: frame}
	r.header(MsgTokenBatch)
	m.Rank = r.u32("rank")
	m.Seq = r.u64("seq")
	r.load(&m.Load)
	n := r.count(minTokenItemLen, "items")
	m.Items = growItems(m.Items, n)
	for i := range m.Items {
		r.tokenItem(&m.Items[i])
		if r.err != nil {
			m.Items = m.Items[:0]
			break
		}
	}
	return r.done(MsgTokenBatch)
}

// growItems resizes s to n elements, keeping the old elements (and their buffers) for reuse.
func growItems[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	return append(s[:cap(s)], make([]T, n-cap(s))...)
}

// ---- TextBatch ----

const minRankLoadLen = 4 + 8 + loadFixedLen + 4 + 4 + 4 + goStatsFixedLen + 4

func (m *TextBatch) size() int {
	n := headerLen + 8 + 4 + 4 + sizeGoStats(&m.Detok)
	for i := range m.Loads {
		n += 4 + 8 + sizeLoad(&m.Loads[i].Load)
	}
	for i := range m.Items {
		n += sizeTokenItem(&m.Items[i].TokenItem) + sizeStr(m.Items[i].Text)
	}
	return n
}

// Append implements Message.
func (m *TextBatch) Append(dst []byte) []byte {
	dst = slices.Grow(dst, m.size())
	dst = append(dst, WireVersion, byte(MsgTextBatch))
	dst = appendU64(dst, m.Epoch)
	dst = appendLen(dst, len(m.Loads))
	for i := range m.Loads {
		l := &m.Loads[i]
		dst = appendU32(dst, l.Rank)
		dst = appendU64(dst, l.Seq)
		dst = appendLoad(dst, &l.Load)
	}
	dst = appendLen(dst, len(m.Items))
	for i := range m.Items {
		dst = appendTokenItem(dst, &m.Items[i].TokenItem)
		dst = appendStr(dst, m.Items[i].Text)
	}
	return appendGoStats(dst, &m.Detok)
}

// Decode implements Message, reusing slices like TokenBatch.Decode.
func (m *TextBatch) Decode(frame []byte) error {
	r := reader{b: frame}
	r.header(MsgTextBatch)
	m.Epoch = r.u64("epoch")
	nl := r.count(minRankLoadLen, "loads")
	m.Loads = growItems(m.Loads, nl)
	for i := range m.Loads {
		l := &m.Loads[i]
		l.Rank = r.u32("load.rank")
		l.Seq = r.u64("load.seq")
		r.load(&l.Load)
	}
	n := r.count(minTokenItemLen+4, "items")
	m.Items = growItems(m.Items, n)
	for i := range m.Items {
		r.tokenItem(&m.Items[i].TokenItem)
		m.Items[i].Text = r.str(m.Items[i].Text, "item.text")
		if r.err != nil {
			break
		}
	}
	r.goStats(&m.Detok)
	if r.err != nil {
		m.Loads, m.Items = m.Loads[:0], m.Items[:0]
	}
	return r.done(MsgTextBatch)
}

var (
	_ Message = (*GenerateRequest)(nil)
	_ Message = (*Abort)(nil)
	_ Message = (*HoldQuery)(nil)
	_ Message = (*TokenBatch)(nil)
	_ Message = (*TextBatch)(nil)
)
