package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestStructuralTags: response_format structural_tag on real processes, streamed and whole
// (seeded, temperature 1, so the two runs are the same generation): in vLLM's and SGLang's
// first shape, free text in which every trigger starts a structure whose JSON validates against
// its schema, with no key written twice, then its end; in the format shape, a fully constrained
// sequence (a literal, then a tag around a schema). streamed == whole, usage exact.
func TestStructuralTags(t *testing.T) {
	e := startEngine(t, engineOpts{})
	point := `{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99},"ok":{"type":"boolean"}},"required":["n"],"additionalProperties":false}`
	word := `{"type":"object","properties":{"w":{"enum":["yes","no"]}},"required":["w"],"additionalProperties":false}`
	// "e" is the commonest letter: a random model writes it soon, and each time the structure
	// it starts must follow
	first := map[string]any{"type": "structural_tag",
		"structures": []map[string]any{
			{"begin": "e=", "schema": json.RawMessage(point), "end": ";"},
			{"begin": "e!", "schema": json.RawMessage(word), "end": ";"},
		},
		"triggers": []string{"e"}}
	regions := 0
	for seed := 1; seed <= 4; seed++ {
		body := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Write here every number you like."}},
			"temperature": 1, "seed": seed, "max_tokens": 120, "return_token_ids": true, "response_format": first}
		whole := e.chatWhole(t, body)
		streamed := e.chatStream(t, body)
		what := fmt.Sprintf("structures seed %d", seed)
		if !whole.same(streamed) {
			t.Fatalf("%s: streamed\n%v\nwhole\n%v", what, streamed, whole)
		}
		if len(whole.Tokens) != whole.Usage.CompletionTokens || whole.Usage.CompletionTokens == 0 {
			t.Fatalf("%s: %d token ids, usage %d", what, len(whole.Tokens), whole.Usage.CompletionTokens)
		}
		n := checkTagged(t, what, whole.Content, whole.Finish == "length", "e", map[string]tagSpec{
			"e=": {compileSchema(t, point), ";"}, "e!": {compileSchema(t, word), ";"}})
		t.Logf("%s: %d regions in %q", what, n, whole.Content)
		regions += n
	}
	if regions == 0 {
		t.Fatal("no tagged region in any output: the trigger was never written")
	}

	format := map[string]any{"type": "structural_tag", "format": map[string]any{"type": "sequence", "elements": []any{
		map[string]any{"type": "const_string", "value": "Answer: "},
		map[string]any{"type": "tag", "begin": "<point>", "content": map[string]any{"type": "json_schema", "json_schema": json.RawMessage(point)}, "end": "</point>"},
	}}}
	for seed := 1; seed <= 3; seed++ {
		body := map[string]any{"messages": []map[string]any{{"role": "user", "content": "A point?"}},
			"temperature": 1, "seed": seed, "max_tokens": 120, "return_token_ids": true, "response_format": format}
		whole := e.chatWhole(t, body)
		streamed := e.chatStream(t, body)
		what := fmt.Sprintf("format seed %d", seed)
		if !whole.same(streamed) {
			t.Fatalf("%s: streamed\n%v\nwhole\n%v", what, streamed, whole)
		}
		if whole.Finish != "stop" || !strings.HasPrefix(whole.Content, "Answer: <point>") || !strings.HasSuffix(whole.Content, "</point>") {
			t.Fatalf("%s: %v", what, whole)
		}
		if n := checkTagged(t, what, strings.TrimPrefix(whole.Content, "Answer: "), false, "<point>", map[string]tagSpec{
			"<point>": {compileSchema(t, point), "</point>"}}); n != 1 {
			t.Fatalf("%s: %d regions in %q", what, n, whole.Content)
		}
	}

	// a malformed tag is a 400 naming response_format and why, before any work
	bad := map[string]any{"type": "structural_tag", "structures": []map[string]any{{"begin": "<x>", "schema": map[string]any{}, "end": "</x>"}}, "triggers": []string{"<y"}}
	code, raw := e.post("/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "response_format": bad})
	if code != 400 || !strings.Contains(string(raw), "response_format") || !strings.Contains(string(raw), "starts with none of the triggers") {
		t.Fatalf("bad tag: %d %s", code, raw)
	}
}

// tagSpec is what follows a structure's begin: a JSON value valid against schema, then end.
type tagSpec struct {
	schema *jsonschema.Schema
	end    string
}

// checkTagged walks text: outside regions it looks for trigger; each occurrence must be one of
// tags' begins, then a JSON value that validates (no key twice), then that tag's end. A region
// cut by max_tokens (truncated) is allowed at the very end. It returns the regions found.
func checkTagged(t *testing.T, what, text string, truncated bool, trigger string, tags map[string]tagSpec) int {
	t.Helper()
	n := 0
	for {
		i := strings.Index(text, trigger)
		if i < 0 {
			return n
		}
		text = text[i:]
		var begin string
		for b := range tags {
			if strings.HasPrefix(text, b) {
				begin = b
			}
		}
		if begin == "" {
			if truncated && len(text) < len(trigger)+2 {
				return n
			}
			t.Fatalf("%s: trigger %q starts no structure at %q", what, trigger, text)
		}
		spec := tags[begin]
		rest := text[len(begin):]
		d := json.NewDecoder(strings.NewReader(rest))
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			if truncated {
				return n
			}
			t.Fatalf("%s: region %q: %v", what, text, err)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(v)))
		if err != nil {
			t.Fatal(err)
		}
		if err := spec.schema.Validate(inst); err != nil {
			t.Fatalf("%s: region %s does not validate: %v", what, v, err)
		}
		if err := noDuplicateKeys(string(v)); err != nil {
			t.Fatalf("%s: region %s: %v", what, v, err)
		}
		rest = rest[d.InputOffset():]
		if !strings.HasPrefix(rest, spec.end) {
			if truncated && strings.HasPrefix(spec.end, rest) {
				return n + 1
			}
			t.Fatalf("%s: region %s is followed by %q, not its end %q", what, v, rest, spec.end)
		}
		n++
		text = rest[len(spec.end):]
	}
}
