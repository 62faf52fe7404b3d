package runner

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/scheduler"
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
		"GrammarKind":                {in.grammar.Kind, grammar.KindRegex},
		"GrammarSpec":                {in.grammar.Text, req.GrammarSpec},
		"RoutedRank":                 {in.routedRank, req.RoutedRank},
		"NoText":                     {in.out.noText, req.NoText},
		"RequestID":                  {in.out.requestID, req.RequestID},
		"Priority":                   {s.Priority, req.Priority},
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

// TestGrammarKindCrossing pins each API grammar kind to the grammar kind the rank compiles, by
// name, through the wire's kind; an unknown wire kind is refused, never cast.
func TestGrammarKindCrossing(t *testing.T) {
	for _, c := range []struct {
		api  api.GrammarKind
		want grammar.Kind
	}{
		{api.GrammarNone, grammar.KindNone},
		{api.GrammarJSONSchema, grammar.KindJSONSchema},
		{api.GrammarJSONObject, grammar.KindJSONObject},
		{api.GrammarRegex, grammar.KindRegex},
		{api.GrammarCompose, grammar.KindCompose},
		{api.GrammarGBNF, grammar.KindGBNF},
	} {
		m, err := worker.RequestToWire(&api.Request{GrammarKind: c.api, GrammarSpec: "x"}, "r", 0, 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got, err := grammarFromWire(m.Grammar)
		if err != nil || got.Kind != c.want || m.Grammar.Kind.String() != c.want.String() {
			t.Errorf("api kind %d: wire %v, rank %v (%v), want %v", c.api, m.Grammar.Kind, got.Kind, err, c.want)
		}
		direct, err := worker.GrammarSpec(c.api, "x")
		if err != nil || direct.Kind != c.want {
			t.Errorf("api kind %d: the worker's own check compiles %v, want %v", c.api, direct.Kind, c.want)
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
	it.FinishReason = 3
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
		"Err": {w.Error, it.Err}, "QueueTime": {w.QueueNanos, int64(it.QueueTime)},
		"PrefillTime": {w.PrefillNanos, int64(it.PrefillTime)}, "DecodeTime": {w.DecodeNanos, int64(it.DecodeTime)},
		"Preemptions": {int(w.Preemptions), it.Preemptions},
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
		Stats: scheduler.Stats{Steps: 9, Preemptions: 5, PrefixHitTokens: 48}}
	var l ipc.Load
	loadToWire(&l, &sl, 4, 100, []uint64{7, 8}, []uint64{70, 80})
	want := ipc.Load{Running: 2, Waiting: 7, KVTokensUsed: 64, KVTokensCapacity: 1024, WaitingTokens: 140,
		Received: []uint64{7, 8}, ReceivedTokens: []uint64{70, 80}, Preemptions: 5, PrefixHitTokens: 48}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("load %+v, want %+v", l, want)
	}
}
