package runner

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/detok"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/llmserve/llmserve/worker"
)

// filler sets every field it is given to a distinct non-zero value.
type filler struct{ n int }

func (f *filler) fill(t *testing.T, path string, v reflect.Value) {
	f.n++
	n := f.n
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue // the API's own bookkeeping (a compile deadline), never sent
			}
			f.fill(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(t, path, v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		f.fill(t, path, v.Index(0))
		f.fill(t, path, v.Index(1))
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(n) + 0.25)
	default:
		t.Fatalf("%s: the filler does not know kind %v", path, v.Kind())
	}
}

// leaves lists the paths of a struct's non-struct fields ("Sampling.TopP", "RID").
func leaves(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name := prefix + f.Name
		ft := f.Type
		if ft.Kind() == reflect.Struct {
			out = append(out, leaves(ft, name+".")...)
			continue
		}
		out = append(out, name)
	}
	return out
}

// TestRequestCrossesEveryHop fills every field of an API request with a distinct non-zero value,
// sends it api -> ipc -> bytes -> ipc -> the rank's request, and checks each field by name at
// the far end. A field that a hop forgets to copy arrives as zero and fails here; a field added
// to api.Request without a check here fails too.
func TestRequestCrossesEveryHop(t *testing.T) {
	var req api.Request
	var f filler
	f.fill(t, "Request", reflect.ValueOf(&req).Elem())
	req.GrammarKind = api.GrammarRegex // an enum: any valid non-zero kind
	req.Stream = true                  // non-streamed requests take MaxNewTokens as their interval
	req.Pooling = api.PoolingMean      // an enum too
	if req.MinNewTokens > req.MaxNewTokens {
		req.MinNewTokens, req.MaxNewTokens = req.MaxNewTokens, req.MinNewTokens // min <= max, still distinct
	}

	arrival := time.Unix(0, 1_700_000_000_123_456_789)
	m, err := worker.RequestToWire(&req, req.RID, 7, 0xfeed, arrival)
	if err != nil {
		t.Fatal(err)
	}
	var decoded ipc.GenerateRequest
	if err := decoded.Decode(m.Append(nil)); err != nil {
		t.Fatal(err)
	}
	in, err := requestFromWire(&decoded)
	if err != nil {
		t.Fatal(err)
	}
	s := &in.sched

	type pair struct{ got, want any }
	checks := map[string]pair{
		"RID":                        {s.RID, req.RID},
		"InputIDs":                   {s.InputIDs, req.InputIDs},
		"Sampling.Temperature":       {s.Sampling.Temperature, req.Sampling.Temperature},
		"Sampling.TopP":              {s.Sampling.TopP, req.Sampling.TopP},
		"Sampling.TopK":              {s.Sampling.TopK, req.Sampling.TopK},
		"Sampling.MinP":              {s.Sampling.MinP, req.Sampling.MinP},
		"Sampling.RepetitionPenalty": {s.Sampling.RepetitionPenalty, req.Sampling.RepetitionPenalty},
		"Sampling.FrequencyPenalty":  {s.Sampling.FrequencyPenalty, req.Sampling.FrequencyPenalty},
		"Sampling.PresencePenalty":   {s.Sampling.PresencePenalty, req.Sampling.PresencePenalty},
		"Sampling.Seed":              {deref(s.Sampling.Seed), *req.Sampling.Seed},
		"Sampling.LogitBias":         {s.Sampling.LogitBias, req.Sampling.LogitBias},
		"MaxNewTokens":               {s.MaxNewTokens, req.MaxNewTokens},
		"MinNewTokens":               {s.MinNewTokens, req.MinNewTokens},
		"StopStrings":                {in.out.stops, req.StopStrings},
		"StopTokenIDs":               {s.StopTokenIDs, req.StopTokenIDs},
		"IgnoreEOS":                  {s.IgnoreEOS, req.IgnoreEOS},
		"SkipSpecialTokens":          {in.out.skipSpecial, req.SkipSpecialTokens},
		"Stream":                     {in.out.stream, req.Stream},
		"StreamInterval":             {in.out.interval, req.StreamInterval},
		"Logprobs":                   {s.Logprobs, req.Logprobs},
		"TopLogprobs":                {s.TopLogprobs, req.TopLogprobs},
		"PromptLogprobs":             {s.PromptLogprobs, req.PromptLogprobs},
		"GrammarKind":                {in.grammar.Kind, req.GrammarKind},
		"GrammarSpec":                {in.grammar.Text, req.GrammarSpec},
		"RoutedRank":                 {in.routedRank, req.RoutedRank},
		"NoText":                     {in.out.noText, req.NoText},
		"RequestID":                  {in.out.requestID, req.RequestID},
		"Priority":                   {s.Priority, req.Priority},
		"Pooling":                    {s.Pooling.String(), req.Pooling.String()},
	}
	for _, name := range leaves(reflect.TypeOf(req), "") {
		c, ok := checks[name]
		if !ok {
			t.Errorf("api.Request.%s has no check here: add where it arrives at the rank", name)
			continue
		}
		delete(checks, name)
		if reflect.ValueOf(c.want).IsZero() {
			t.Errorf("%s: the filler left it zero", name)
		}
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s arrives as %v, sent %v", name, c.got, c.want)
		}
	}
	for name := range checks {
		t.Errorf("check for %s names no field of api.Request", name)
	}
	// The two values the worker adds on the way.
	if s.Owner != 7 || in.ownerEpoch != 0xfeed || !s.Arrival.Equal(arrival) {
		t.Errorf("owner %d epoch %#x arrival %v, want 7, 0xfeed and %v", s.Owner, in.ownerEpoch, s.Arrival, arrival)
	}
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// TestGrammarKindCrossing: each grammar kind (the API's kind is the grammar package's) reaches
// the rank as itself, through the wire's own kind of the same name; an unknown wire kind is
// refused, never cast.
func TestGrammarKindCrossing(t *testing.T) {
	for k := grammar.KindNone; k <= grammar.KindGBNF; k++ {
		m, err := worker.RequestToWire(&api.Request{GrammarKind: k, GrammarSpec: "x"}, "r", 0, 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got, err := grammarFromWire(m.Grammar)
		if err != nil || got.Kind != k || m.Grammar.Kind.String() != k.String() {
			t.Errorf("kind %v: wire %v, rank %v (%v)", k, m.Grammar.Kind, got.Kind, err)
		}
		direct, err := worker.GrammarSpec(k, "x")
		if err != nil || direct.Kind != k {
			t.Errorf("kind %v: the worker's own check compiles %v (%v)", k, direct.Kind, err)
		}
	}
	if _, err := worker.RequestToWire(&api.Request{GrammarKind: api.GrammarGBNF + 1}, "r", 0, 1, time.Now()); err == nil {
		t.Error("an unknown API grammar kind was converted")
	}
	if _, err := grammarFromWire(ipc.Grammar{Kind: ipc.GrammarGBNF + 1}); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("an unknown wire grammar kind: %v", err)
	}
}

// TestItemCrossesToTheWire: every field of a scheduler item reaches the wire item.
func TestItemCrossesToTheWire(t *testing.T) {
	var it scheduler.Item
	var f filler
	f.fill(t, "Item", reflect.ValueOf(&it).Elem())
	it.FinishReason, it.ErrKind = 3, scheduler.ErrorInvalid
	out := outputSettings{noText: true, skipSpecial: true, stops: []string{"x"}, requestID: "req-1"}
	w := itemToWire(&it, it.NewIDs, it.Logprobs, topLogprobs{it.TopLogprobIDs, it.TopLogprobs}, &out, true)
	checks := map[string][2]any{
		"RID": {w.RID, it.RID}, "Owner": {int(w.Owner), it.Owner}, "NewIDs": {w.NewIDs, it.NewIDs},
		"Logprobs": {w.Logprobs, it.Logprobs}, "TopLogprobIDs": {w.TopLogprobIDs, it.TopLogprobIDs},
		"TopLogprobs": {w.TopLogprobs, it.TopLogprobs}, "PromptLogprobs": {w.PromptLogprobs, it.PromptLogprobs},
		"PromptTopLogprobIDs": {w.PromptTopLogprobIDs, it.PromptTopLogprobIDs}, "PromptTopLogprobs": {w.PromptTopLogprobs, it.PromptTopLogprobs},
		"PromptTokens": {int(w.PromptTokens), it.PromptTokens},
		"CachedTokens": {int(w.CachedTokens), it.CachedTokens}, "CompletionTokens": {int(w.CompletionTokens), it.CompletionTokens},
		"Finished": {w.Finished, it.Finished}, "FinishReason": {w.FinishReason.String(), it.FinishReason.String()},
		"MatchedStopToken": {w.MatchedStopToken, it.MatchedStopToken}, "MatchedStop": {w.MatchedStop, it.MatchedStop},
		"Err": {w.Error, it.Err}, "ErrKind": {w.ErrorKind, ipc.ErrorInvalid}, "QueueTime": {w.QueueNanos, int64(it.QueueTime)},
		"PrefillTime": {w.PrefillNanos, int64(it.PrefillTime)}, "DecodeTime": {w.DecodeNanos, int64(it.DecodeTime)},
		"Preemptions": {int(w.Preemptions), it.Preemptions}, "Embedding": {w.Embedding, it.Embedding},
		"SpecDrafts": {int(w.SpecDrafts), it.SpecDrafts}, "SpecDraftTokens": {int(w.SpecDraftTokens), it.SpecDraftTokens},
		"SpecAccepted": {ints(w.SpecAccepted), it.SpecAccepted},
	}
	for _, name := range leaves(reflect.TypeOf(it), "") {
		c, ok := checks[name]
		if !ok {
			t.Errorf("scheduler.Item.%s has no check here", name)
			continue
		}
		if !reflect.DeepEqual(c[0], c[1]) {
			t.Errorf("%s arrives as %v, sent %v", name, c[0], c[1])
		}
	}
	if !w.NoText || !w.SkipSpecialTokens || !slices.Equal(w.StopStrings, out.stops) || w.RequestID != out.requestID {
		t.Errorf("output settings lost: %+v", w)
	}
}

// TestLoadToWire: the report adds what the receive goroutine queued to the scheduler's load and
// carries the scheduler's counters.
func TestLoadToWire(t *testing.T) {
	sl := scheduler.Load{Running: 2, Waiting: 3, KVTokensUsed: 64, KVTokensCapacity: 1024, WaitingTokens: 40,
		Stats:             scheduler.Stats{Steps: 9, Preemptions: 5, PrefixHitTokens: 48, Drafts: 3, DraftTokens: 11, AcceptedTokens: 7},
		WaitingByPriority: []scheduler.PriorityCount{{Priority: -1, Count: 2}, {Priority: 3, Count: 1}}, WaitingOtherPriority: 6}
	var l ipc.Load
	loadToWire(&l, &sl, 4, 100, []uint64{7, 8}, []uint64{70, 80})
	want := ipc.Load{Running: 2, Waiting: 7, KVTokensUsed: 64, KVTokensCapacity: 1024, WaitingTokens: 140,
		Received: []uint64{7, 8}, ReceivedTokens: []uint64{70, 80}, Preemptions: 5, PrefixHitTokens: 48,
		Steps: 9, SpecDrafts: 3, SpecDraftTokens: 11, SpecAccepted: 7,
		WaitingByPriority: []ipc.PriorityCount{{Priority: -1, Count: 2}, {Priority: 3, Count: 1}}, WaitingOtherPriority: 6}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("load %+v, want %+v", l, want)
	}
}

// TestItemCrossesEveryHop pins the return path field by field, as TestRequestCrossesEveryHop
// pins the request's: a scheduler item with every field set goes rank -> ipc -> bytes -> detokd's
// step -> bytes -> the worker's delta. Each field of scheduler.Item, ipc.TokenItem and api.Delta
// must be checked at the far end or listed as dropped with the reason; a field added to any of
// them fails here until it is one or the other.
func TestItemCrossesEveryHop(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	// cross sends it (its first item) through every hop and returns the delta the worker makes.
	cross := func(it scheduler.Item) (ipc.TextItem, api.Delta) {
		out := outputSettings{skipSpecial: true, stops: []string{"never seen"}, requestID: "req-1"}
		w := itemToWire(&it, it.NewIDs, it.Logprobs, topLogprobs{it.TopLogprobIDs, it.TopLogprobs}, &out, true)
		var tb ipc.TokenBatch
		if err := tb.Decode((&ipc.TokenBatch{Rank: 1, Seq: 2, Items: []ipc.TokenItem{w}}).Append(nil)); err != nil {
			t.Fatal(err)
		}
		batches, err := detok.NewDetokenizer(tok, it.Owner+1).Step(&tb)
		if err != nil {
			t.Fatal(err)
		}
		var xb ipc.TextBatch
		if err := xb.Decode(batches[it.Owner].Append(nil)); err != nil {
			t.Fatal(err)
		}
		if len(xb.Items) != 1 {
			t.Fatalf("%d items reach worker %d, want 1", len(xb.Items), it.Owner)
		}
		return xb.Items[0], worker.DeltaFromWire(&xb.Items[0].TokenItem, xb.Items[0].Text)
	}
	var it scheduler.Item
	var f filler
	f.fill(t, "Item", reflect.ValueOf(&it).Elem())
	it.Owner = 2
	it.NewIDs = []int32{400, 401} // ids of real text
	// The request's first item (its count is its ids): detokd fails a mid-stream item of a
	// request it holds no state for.
	it.CompletionTokens = len(it.NewIDs)
	it.FinishReason, it.ErrKind = scheduler.FinishError, scheduler.ErrorInvalid
	wire, d := cross(it)
	// A stop token is reported only when no stop string matched and the request stopped.
	stopped := it
	stopped.FinishReason, stopped.MatchedStop, stopped.Err = scheduler.FinishStop, "", ""
	_, ds := cross(stopped)

	type check struct {
		got, want any
		dropped   string // why the field stops before the delta
	}
	items := map[string]check{
		"RID":                 {dropped: "the worker routes the delta to the request's stream by it"},
		"Owner":               {dropped: "detokd picks the owning worker's socket by it"},
		"NewIDs":              {got: d.IDs, want: it.NewIDs},
		"Logprobs":            {got: d.Logprobs, want: it.Logprobs},
		"TopLogprobIDs":       {got: d.TopLogprobIDs, want: it.TopLogprobIDs},
		"TopLogprobs":         {got: d.TopLogprobs, want: it.TopLogprobs},
		"PromptLogprobs":      {got: d.PromptLogprobs, want: it.PromptLogprobs},
		"PromptTopLogprobIDs": {got: d.PromptTopLogprobIDs, want: it.PromptTopLogprobIDs},
		"PromptTopLogprobs":   {got: d.PromptTopLogprobs, want: it.PromptTopLogprobs},
		"PromptTokens":        {got: d.PromptTokens, want: it.PromptTokens},
		"CachedTokens":        {got: d.CachedTokens, want: it.CachedTokens},
		"CompletionTokens":    {got: d.CompletionTokens, want: it.CompletionTokens},
		"Finished":            {got: d.Finished, want: it.Finished},
		"FinishReason":        {got: [2]api.FinishReason{d.FinishReason, ds.FinishReason}, want: [2]scheduler.FinishReason{scheduler.FinishError, scheduler.FinishStop}},
		"MatchedStopToken":    {got: ds.MatchedStop, want: it.MatchedStopToken},
		"MatchedStop":         {got: d.MatchedStop, want: it.MatchedStop},
		"Err":                 {got: fmt.Sprint(d.Err), want: it.Err},
		"ErrKind":             {got: errors.As(d.Err, new(*api.BadRequestError)), want: true}, // the client's fault: a 400
		"QueueTime":           {got: d.QueueTime, want: it.QueueTime},
		"PrefillTime":         {got: d.PrefillTime, want: it.PrefillTime},
		"DecodeTime":          {got: d.DecodeTime, want: it.DecodeTime},
		"Preemptions":         {got: d.Preemptions, want: it.Preemptions},
		"SpecDrafts":          {got: d.SpecDrafts, want: it.SpecDrafts},
		"SpecDraftTokens":     {got: d.SpecDraftTokens, want: it.SpecDraftTokens},
		"SpecAccepted":        {got: d.SpecAccepted, want: it.SpecAccepted},
		"Embedding":           {got: d.Embedding, want: it.Embedding},
	}
	for _, name := range leaves(reflect.TypeOf(it), "") {
		c, ok := items[name]
		delete(items, name)
		switch {
		case !ok:
			t.Errorf("scheduler.Item.%s has no check here: check it on the delta, or say why it is dropped", name)
		case c.dropped != "":
		case reflect.ValueOf(c.want).IsZero():
			t.Errorf("Item.%s: the filler left it zero", name)
		case !reflect.DeepEqual(c.got, c.want):
			t.Errorf("Item.%s reaches the delta as %v, sent %v", name, c.got, c.want)
		}
	}
	for name := range items {
		t.Errorf("the check for %s names no field of scheduler.Item", name)
	}

	// The wire item's own fields: each lands in a delta field (checked above through the item)
	// or stops before the delta, for the reason given.
	wireFields := map[string]string{
		"RID": "RID", "Owner": "-routing: detokd's choice of worker socket", "NewIDs": "IDs",
		"Logprobs": "Logprobs", "PromptTokens": "PromptTokens", "CachedTokens": "CachedTokens",
		"CompletionTokens": "CompletionTokens", "Finished": "Finished", "FinishReason": "FinishReason",
		"MatchedStopToken": "MatchedStop", "MatchedStop": "MatchedStop", "Error": "Err", "ErrorKind": "Err",
		"NoText":              "-detokenization setting: read by detokd (or the worker's own detokenizer)",
		"SkipSpecialTokens":   "-detokenization setting: read by detokd (or the worker's own detokenizer)",
		"StopStrings":         "-detokenization setting: detokd keeps them per request",
		"TopLogprobIDs":       "TopLogprobIDs",
		"TopLogprobs":         "TopLogprobs",
		"PromptLogprobs":      "PromptLogprobs",
		"PromptTopLogprobIDs": "PromptTopLogprobIDs", "PromptTopLogprobs": "PromptTopLogprobs",
		"RequestID":  "-detokd's log lines; the worker has the request's own id",
		"QueueNanos": "QueueTime", "PrefillNanos": "PrefillTime", "DecodeNanos": "DecodeTime",
		"Preemptions": "Preemptions", "Embedding": "Embedding",
		"SpecDrafts": "SpecDrafts", "SpecDraftTokens": "SpecDraftTokens", "SpecAccepted": "SpecAccepted",
	}
	reached := map[string]bool{"Text": true} // the text is detokd's, checked below
	for _, name := range leaves(reflect.TypeOf(wire.TokenItem), "") {
		to, ok := wireFields[name]
		delete(wireFields, name)
		switch {
		case !ok:
			t.Errorf("ipc.TokenItem.%s has no entry here: name the delta field it lands in, or why it is dropped", name)
		case strings.HasPrefix(to, "-"):
		case to == "RID":
			if wire.RID != it.RID {
				t.Errorf("wire RID %q, sent %q", wire.RID, it.RID)
			}
		default:
			if _, ok := reflect.TypeFor[api.Delta]().FieldByName(to); !ok {
				t.Errorf("ipc.TokenItem.%s lands in api.Delta.%s, which does not exist", name, to)
			}
			reached[to] = true
		}
	}
	for name := range wireFields {
		t.Errorf("the entry for %s names no field of ipc.TokenItem", name)
	}
	for _, name := range leaves(reflect.TypeFor[api.Delta](), "") {
		if !reached[name] {
			t.Errorf("api.Delta.%s is filled from no wire field", name)
		}
	}
	if want := tok.Decode(it.NewIDs, true); d.Text != want || want == "" {
		t.Errorf("text %q, want %q (the ids' text, decoded by detokd)", d.Text, want)
	}
	// The settings that stop at detokd did reach it.
	if wire.NoText || !wire.SkipSpecialTokens || !slices.Equal(wire.StopStrings, []string{"never seen"}) || wire.RequestID != "req-1" {
		t.Errorf("detokenization settings on the wire: %+v", wire.TokenItem)
	}
}

// ints widens wire counts for comparison with the scheduler's.
func ints(s []int32) []int {
	var out []int
	for _, n := range s {
		out = append(out, int(n))
	}
	return out
}

// TestSpecPositionsFit: every draft position a rank may verify fits the wire's bound (a longer
// draft would have its deeper positions cut from the finish item).
func TestSpecPositionsFit(t *testing.T) {
	if scheduler.MaxDraftLimit > ipc.MaxSpecPositions {
		t.Fatalf("scheduler.MaxDraftLimit %d > ipc.MaxSpecPositions %d", scheduler.MaxDraftLimit, ipc.MaxSpecPositions)
	}
}
