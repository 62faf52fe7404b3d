package grammar

import "testing"

// Strict closes objects and tuples that the schema leaves open by default, and nothing else.
func TestStrictClosesImplicitlyOpenSchemas(t *testing.T) {
	e := env(t, "llama3")
	strict := NewCompiler(e.tok, []int32{e.eos}, Options{Strict: true})
	cases := []struct {
		schema         string
		both           []string // accepted in either mode
		permissiveOnly []string // accepted only without Strict
		rejected       []string
	}{
		{`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}`,
			[]string{`{"name":"a","age":1}`}, []string{`{"x":1,"name":"a","age":1}`, `{"name":"a","age":1,"zz":null}`}, []string{`{"age":1}`}},
		// Said explicitly: stays open.
		{`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true}`,
			[]string{`{"a":1}`, `{"a":1,"b":2}`}, nil, nil},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"patternProperties":{"^x":{"type":"integer"}}}`,
			[]string{`{"a":1,"x1":2}`}, nil, []string{`{"a":1,"x1":"s"}`}},
		// A required key outside properties: closing would leave no document, so it stays open.
		{`{"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]}`,
			[]string{`{"b":1}`, `{"a":1,"b":"s"}`}, nil, nil},
		{`{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}]}`,
			[]string{`[1,"a"]`, `[1]`}, []string{`[1,"a",true]`}, []string{`["a"]`}},
		{`{"type":"array","prefixItems":[{"type":"integer"}],"items":{"type":"string"}}`,
			[]string{`[1,"a","b"]`}, nil, []string{`[1,2]`}},
		// Free objects (no properties) are not touched.
		{`{"type":"object"}`, []string{`{"k":[1,{"q":null}]}`}, nil, nil},
	}
	for _, c := range cases {
		gs, err := strict.JSONSchema(c.schema)
		if err != nil {
			t.Fatalf("strict compile %s: %v", c.schema, err)
		}
		gp, err := e.comp.JSONSchema(c.schema)
		if err != nil {
			t.Fatalf("compile %s: %v", c.schema, err)
		}
		for _, d := range c.both {
			if !acceptDoc(t, e, gs, d) || !acceptDoc(t, e, gp, d) {
				t.Errorf("%s: %s should pass in both modes", c.schema, d)
			}
		}
		for _, d := range c.permissiveOnly {
			if acceptDoc(t, e, gs, d) || !acceptBytes(gp, d) {
				t.Errorf("%s: %s should pass only without Strict", c.schema, d)
			}
		}
		for _, d := range c.rejected {
			if acceptBytes(gs, d) || acceptBytes(gp, d) {
				t.Errorf("%s: %s should fail in both modes", c.schema, d)
			}
		}
	}
}
