package toolparse

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// result is a parse's outcome without the random call ids.
type result struct {
	Reasoning, Content string
	After              int
	Calls              []string // name + " " + args
}

func run(t testing.TB, name string, o Options, chunks []string) result {
	p, err := New(name, o)
	if err != nil {
		t.Fatal(err)
	}
	var r result
	var deltas []CallDelta
	add := func(ev Events) {
		r.Reasoning += string(ev.Reasoning)
		r.Content += string(ev.Content)
		deltas = append(deltas, ev.Calls...)
	}
	for _, c := range chunks {
		add(p.Feed(c))
	}
	add(p.Finish())
	all := p.All()
	if string(all.Reasoning) != r.Reasoning || string(all.Content) != r.Content {
		t.Fatalf("%s: All() %q/%q differs from the events' %q/%q", name, all.Reasoning, all.Content, r.Reasoning, r.Content)
	}
	r.After = all.After
	calls := p.Calls()
	// the deltas concatenate to the calls
	got := make([]string, len(calls))
	for _, d := range deltas {
		if d.Index >= len(calls) {
			t.Fatalf("%s: delta for call %d of %d", name, d.Index, len(calls))
		}
		if d.ID != "" {
			if d.ID != calls[d.Index].ID || d.Name != calls[d.Index].Name {
				t.Fatalf("%s: header %+v differs from call %+v", name, d, calls[d.Index])
			}
		}
		got[d.Index] += d.Args
	}
	for i, c := range calls {
		if got[i] != string(c.Args) {
			t.Fatalf("%s: call %d deltas %q != args %q", name, i, got[i], c.Args)
		}
		r.Calls = append(r.Calls, c.Name+" "+string(c.Args))
	}
	return r
}

// chunkings of s: whole, one byte at a time, and random cuts.
func chunkings(s string, seed uint64) [][]string {
	out := [][]string{{s}}
	var bytes []string
	for i := range len(s) {
		bytes = append(bytes, s[i:i+1])
	}
	out = append(out, bytes)
	rng := rand.New(rand.NewPCG(seed, 7))
	for range 4 {
		var cs []string
		for rest := s; rest != ""; {
			n := 1 + rng.IntN(min(len(rest), 9))
			cs = append(cs, rest[:n])
			rest = rest[n:]
		}
		out = append(out, cs)
	}
	return out
}

type parseCase struct {
	parser string
	opts   Options
	in     string
	want   result
}

var cases = []parseCase{
	{"hermes", Options{Tools: true}, "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}\"}]}}\n</tool_call>",
		result{Content: "Sure.", Calls: []string{`get_weather {"city": "Paris"}`, `f {"a": [1, {"b": "}"}]}`}}},
	{"hermes", Options{Tools: true, Reasoning: ReasoningQwen3}, "<think>\nhmm</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
		result{Reasoning: "\nhmm", Calls: []string{"f {}"}}},
	{"hermes", Options{Reasoning: ReasoningDeepSeekR1}, "a </thin</think>\n\nb <tool_call>", result{Reasoning: "a </thin", Content: "b <tool_call>"}},
	{"hermes", Options{Tools: true}, "x <tool_call> no name here", result{Content: "x <tool_call> no name here"}},
	{"llama3_json", Options{Tools: true}, ` {"name": "f", "parameters": {"x": 1}}`, result{Calls: []string{`f {"x": 1}`}}},
	{"llama3_json", Options{Tools: true}, `Hello {"name": "f"}`, result{Content: `Hello {"name": "f"}`}},
	{"mistral", Options{Tools: true}, `ok[TOOL_CALLS][{"name": "a", "arguments": {"q": "]"}}, {"name": "b", "arguments": {}}] bye`,
		result{Content: "ok bye", After: 4, Calls: []string{`a {"q": "]"}`, "b {}"}}},
	{"deepseek_v3", Options{Tools: true, Reasoning: ReasoningDeepSeekR1}, "why</think>\n\nLet me.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		result{Reasoning: "why", Content: "Let me.", Calls: []string{`get_weather {"city": "Oslo"}`, "g {}"}}},
	{"qwen3_coder", Options{Tools: true, ParamTypes: map[string]map[string]string{"run": {"n": "integer", "code": "string"}}},
		"Running.\n<tool_call>\n<function=run>\n<parameter=code>\nprint(1)\nx = \"<b>\"\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=stop>\n</function>\n</tool_call>",
		result{Content: "Running.\n", Calls: []string{`run {"code":"print(1)\nx = \"<b>\"","n":3}`, "stop {}"}}},
	{"harmony", Options{Tools: true}, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}<|call|>",
		result{Reasoning: "Need weather.", Calls: []string{`get_weather {"city":"Rome"}`}}},
	{"harmony", Options{}, "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi <|there<|return|>",
		result{Reasoning: "think", Content: "Hi <|there"}},
	{"harmony", Options{}, "plain text, no headers", result{Content: "plain text, no headers"}},
}

func TestParsers(t *testing.T) {
	for i, c := range cases {
		for j, ch := range chunkings(c.in, uint64(i)) {
			got := run(t, c.parser, c.opts, ch)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("case %d (%s) chunking %d:\n got %+v\nwant %+v", i, c.parser, j, got, c.want)
			}
		}
	}
}

func TestRegistry(t *testing.T) {
	for _, n := range []string{"hermes", "llama3_json", "mistral", "deepseek_v3", "qwen3_coder", "harmony"} {
		if _, err := New(n, Options{}); err != nil {
			t.Error(err)
		}
	}
	if _, err := New("nope", Options{}); err == nil || !strings.Contains(err.Error(), "hermes") {
		t.Errorf("unknown parser: %v", err)
	}
}

// FuzzChunks checks that every parser yields the same reasoning, content and calls whether
// the text comes whole, byte by byte, or in random chunks.
func FuzzChunks(f *testing.F) {
	for _, c := range cases {
		f.Add(c.in, uint64(len(c.in)), true, c.opts.Reasoning)
	}
	f.Add("<think><tool_call>{\"name\":\"\\\"x\", \"arguments\":{\"a\":\"\\\\\"}}</tool_call>", uint64(3), true, "qwen3")
	names := Names()
	f.Fuzz(func(t *testing.T, in string, seed uint64, tools bool, reasoning string) {
		if reasoning != ReasoningQwen3 && reasoning != ReasoningDeepSeekR1 {
			reasoning = ""
		}
		o := Options{Tools: tools, Reasoning: reasoning, ParamTypes: map[string]map[string]string{"f": {"n": "number"}}}
		for _, n := range names {
			var want result
			for j, ch := range chunkings(in, seed) {
				got := run(t, n, o, ch)
				if j == 0 {
					want = got
				} else if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s chunking %d of %q:\n got %+v\nwant %+v", n, j, in, got, want)
				}
			}
		}
	})
}
