package chat

import (
	"encoding/json"
	"os"
	"testing"
)

// conformanceCase is one entry of testdata/conformance.json, rendered by
// Jinja2 3.1 in the environment transformers builds (see
// testdata/gen_conformance.py). Cases with "messages" go through Apply,
// the others through Render.
type conformanceCase struct {
	Name                string            `json:"name"`
	Template            string            `json:"template"`
	Vars                json.RawMessage   `json:"vars"`
	Messages            []json.RawMessage `json:"messages"`
	Tools               json.RawMessage   `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Extra               json.RawMessage   `json:"extra"`
	Special             map[string]string `json:"special"`
	Want                *string           `json:"want"`
	Error               *string           `json:"error"`
}

// orderedObject decodes a JSON object keeping nested key order; the top
// level becomes a Go map, as callers of Render and Apply pass it.
func orderedObject(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(*Map)
	out := make(map[string]any, m.Len())
	for _, k := range m.Keys() {
		out[k], _ = m.Get(k)
	}
	return out
}

func TestJinjaConformance(t *testing.T) {
	data, err := os.ReadFile("testdata/conformance.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []conformanceCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 50 {
		t.Fatalf("only %d conformance cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			tmpl, err := Compile(c.Template)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			var got string
			if c.Messages != nil {
				msgs := make([]map[string]any, len(c.Messages))
				for i, m := range c.Messages {
					msgs[i] = orderedObject(t, m)
				}
				got, err = tmpl.Apply(msgs, Options{
					AddGenerationPrompt: c.AddGenerationPrompt,
					ToolsJSON:           c.Tools,
					Extra:               orderedObject(t, c.Extra),
					Special:             c.Special,
				})
			} else {
				got, err = tmpl.Render(orderedObject(t, c.Vars))
			}
			switch {
			case c.Error != nil && err == nil:
				t.Fatalf("rendered %q, want error %q", got, *c.Error)
			case c.Error != nil:
				t.Logf("error as expected: %v (jinja: %s)", err, *c.Error)
			case err != nil:
				t.Fatalf("render: %v", err)
			case got != *c.Want:
				t.Fatalf("\n got %q\nwant %q", got, *c.Want)
			}
		})
	}
}
