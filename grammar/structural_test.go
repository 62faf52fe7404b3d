package grammar

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// weatherSchema is a tool's parameters: an enum and a nested object.
const weatherSchema = `{"type":"object","properties":{"unit":{"enum":["c","f"]},"loc":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},"required":["loc"]}`

// vllmTag is the first structural-tag shape: two structures behind one trigger.
const vllmTag = `{"type":"structural_tag","structures":[` +
	`{"begin":"<function=get_weather>","schema":` + weatherSchema + `,"end":"</function>"},` +
	`{"begin":"<function=ping>","schema":{"type":"object","properties":{},"additionalProperties":false},"end":"</function>"}],` +
	`"triggers":["<function="]}`

func compileStructural(t *testing.T, c *Compiler, raw string) *Grammar {
	t.Helper()
	p, err := StructuralTag([]byte(raw))
	if err != nil {
		t.Fatalf("StructuralTag: %v", err)
	}
	spec, err := ComposeSpec(p)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Compose(spec.Text)
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	return g
}

// TestStructuralTagFirstShape: free text, then each trigger only as the start of a structure
// whose value is valid against its schema, then free text again; mask == Accept on every token.
func TestStructuralTagFirstShape(t *testing.T) {
	e := env(t, "qwen3")
	g := compileStructural(t, e.comp, vllmTag)
	for doc, want := range map[string]bool{
		"no call at all, just text < = function":                                                 true,
		`Let me look. <function=get_weather>{"loc":{"city":"Oslo"},"unit":"c"}</function> Done.`: true,
		`<function=ping>{}</function><function=get_weather>{"loc":{"city":"x"}}</function>`:      true,
		``:                                 true,
		`<function=get_time>{}</function>`: false, // no such structure
		`<function=get_weather>{"loc":{"city":"Oslo"},"unit":"k"}</function>`:      false, // not in the enum
		`<function=get_weather>{"loc":{}}</function>`:                              false, // city required
		`<function=get_weather>{"loc":{"city":"a"},"loc":{"city":"a"}}</function>`: false, // repeated key
		`<function=get_weather>{"loc":{"city":"a"}}`:                               false, // no end
		`<function=get_weather>{"loc":{"city":"a"}} trailing</function>`:           false,
	} {
		if got := acceptDoc(t, e, g, doc); got != want {
			t.Errorf("%q: accepted %v, want %v", doc, got, want)
		}
	}
}

// TestStructuralTagFormatShape covers the format tree: triggered_tags (at_least_one,
// stop_after_first), tags_with_separator, tag content any_text / sequence / or / const_string /
// regex.
func TestStructuralTagFormatShape(t *testing.T) {
	e := env(t, "qwen3")
	cases := []struct {
		tag  string
		docs map[string]bool
	}{
		{`{"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<tool>","<think>"],"at_least_one":true,"stop_after_first":true,"tags":[` +
			`{"type":"tag","begin":"<tool>","content":{"type":"json_schema","json_schema":` + weatherSchema + `},"end":"</tool>"},` +
			`{"begin":"<think>","content":{"type":"any_text"},"end":"</think>"}]}}`,
			map[string]bool{
				`hi <tool>{"loc":{"city":"a"}}</tool>`:   true,
				`<think>a <tool> inside is text</think>`: true,
				`just text`:                              false, // at least one
				`<tool>{"loc":{"city":"a"}}</tool> more`: false, // stop after first
				`a <thin> b <think>x</think>`:            true,
			}},
		{`{"type":"structural_tag","format":{"type":"tags_with_separator","separator":",","tags":[` +
			`{"begin":"[","content":{"type":"sequence","elements":[{"type":"const_string","value":"n="},{"type":"regex","pattern":"[0-9]+"}]},"end":"]"},` +
			`{"begin":"(","content":{"type":"or","elements":[{"type":"const_string","value":"yes"},{"type":"const_string","value":"no"}]},"end":")"}]}}`,
			map[string]bool{
				``:                true,
				`[n=12],(yes)`:    true,
				`(no),(no),[n=1]`: true,
				`[n=],(yes)`:      false,
				`(maybe)`:         false,
				`[n=1] [n=2]`:     false,
			}},
	}
	for i, c := range cases {
		g := compileStructural(t, e.comp, c.tag)
		for doc, want := range c.docs {
			if got := acceptDoc(t, e, g, doc); got != want {
				t.Errorf("case %d %q: accepted %v, want %v", i, doc, got, want)
			}
		}
	}
}

// TestStructuralTagRefused: malformed tags are *Errors naming the problem.
func TestStructuralTagRefused(t *testing.T) {
	for raw, want := range map[string]string{
		`{"type":"structural_tag","structures":[{"begin":"<a>","schema":{},"end":"</a>"}],"triggers":["<b"]}`:                                       "starts with none of the triggers",
		`{"type":"structural_tag","structures":[],"triggers":["<b"]}`:                                                                               "non-empty",
		`{"type":"structural_tag","structures":[{"begin":"<b>","end":"</b>"}],"triggers":["<b"]}`:                                                   "schema is required",
		`{"type":"structural_tag","format":{"type":"qwen_xml"}}`:                                                                                    "not supported",
		`{"type":"structural_tag","format":{"type":"tag","begin":"a","content":{"type":"any_text"}}}`:                                               "needs begin, content and end",
		`{"type":"structural_tag","format":{"type":"const_string","valu":"x"}}`:                                                                     "unknown field",
		`{"type":"structural_tag","format":{"type":"triggered_tags","triggers":[],"tags":[{"begin":"a","content":{"type":"any_text"},"end":"b"}]}}`: "triggers must be",
	} {
		_, err := StructuralTag([]byte(raw))
		var ge *Error
		if err == nil || !errors.As(err, &ge) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an *Error containing %q", raw, err, want)
		}
	}
}

// TestWithoutAnyMatchesContains: free text without any of several triggers accepts exactly the
// strings that contain none of them (a brute-force check over random strings of the triggers'
// characters, overlapping triggers included).
func TestWithoutAnyMatchesContains(t *testing.T) {
	e := env(t, "qwen3")
	trigs := []string{"aab", "ab", "bca", "é<"}
	spec, err := ComposeSpec(Part{Text: &FreeText{WithoutAny: trigs}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.comp.Compose(spec.Text)
	if err != nil {
		t.Fatal(err)
	}
	alpha := []rune("abcé<x")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		r := make([]rune, rng.IntN(9))
		for i := range r {
			r[i] = alpha[rng.IntN(len(alpha))]
		}
		s := string(r)
		want := true
		for _, tr := range trigs {
			want = want && !strings.Contains(s, tr)
		}
		if got := acceptBytes(g, s); got != want {
			t.Fatalf("%q: accepted %v, want %v", s, got, want)
		}
	}
}
