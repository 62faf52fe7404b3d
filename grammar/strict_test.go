package grammar

import (
	"errors"
	"strings"
	"testing"
)

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

// Strict mode closes the merged object of an allOf (and of $ref + siblings): each branch lists
// its own properties, and the document takes the keys of all of them, no others.
func TestStrictClosesMergedObjects(t *testing.T) {
	e := env(t, "llama3")
	strict := NewCompiler(e.tok, []int32{e.eos}, Options{Strict: true})
	cases := []struct {
		schema        string
		valid, reject []string
	}{
		{`{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}]}`,
			[]string{`{"a":1,"b":"x"}`}, []string{`{"a":1}`, `{"a":1,"b":"x","c":2}`, `{"b":"x"}`}},
		{`{"$defs":{"base":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}},"$ref":"#/$defs/base","properties":{"name":{"type":"string"}},"required":["name"]}`,
			[]string{`{"name":"n","id":1}`}, []string{`{"id":1}`, `{"name":"n","id":1,"x":0}`}},
		// one branch lists, the other only requires: the merged object lists every required key
		{`{"allOf":[{"properties":{"a":{"type":"integer"},"b":{"type":"integer"}}},{"required":["b"]}]}`,
			[]string{`{"b":2}`, `{"a":1,"b":2}`}, []string{`{"a":1}`, `{"b":2,"c":3}`}},
		// said explicitly in one branch: stays open (and that branch's additionalProperties
		// applies to "a" too, which no value can then satisfy)
		{`{"allOf":[{"properties":{"a":{"type":"integer"}}},{"additionalProperties":{"type":"boolean"}}]}`,
			[]string{`{"z":true}`, `{}`}, []string{`{"z":1}`, `{"a":1}`, `{"a":true}`}},
		// tuples: merged positions, closed after the longest
		{`{"allOf":[{"prefixItems":[{"type":"integer"}]},{"prefixItems":[{},{"type":"string"}]}]}`,
			[]string{`[1,"a"]`, `[1]`}, []string{`[1,"a",2]`, `["a"]`}},
	}
	for _, c := range cases {
		g, err := strict.JSONSchema(c.schema)
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		for _, d := range c.valid {
			if !acceptDoc(t, e, g, d) {
				t.Errorf("%s: %s rejected", c.schema, d)
			}
		}
		for _, d := range c.reject {
			if acceptBytes(g, d) {
				t.Errorf("%s: %s accepted", c.schema, d)
			}
		}
	}
	// per compile: the same schema without strict keeps the permissive default
	schema := cases[0].schema
	g, err := strict.JSONSchemaStrict(schema, false)
	if err != nil {
		t.Fatal(err)
	}
	if !acceptBytes(g, `{"a":1,"b":"x","c":2}`) {
		t.Error("JSONSchemaStrict(false) closed the object")
	}
	if gs, _ := strict.JSONSchemaStrict(schema, true); gs == g {
		t.Error("strict and permissive compiles share a cache entry")
	}
}

// TestUnsatisfiableSchemas: a schema that allows no document is a compile error (a client
// error) naming what conflicts, never a grammar that fails every request at run time.
func TestUnsatisfiableSchemas(t *testing.T) {
	e := env(t, "llama3")
	strict := NewCompiler(e.tok, []int32{e.eos}, Options{Strict: true})
	cases := []struct{ schema, mentions string }{
		{`false`, "false"},
		{`{"not":{}}`, "not"},
		{`{"allOf":[{"type":"string"},{"type":"integer"}]}`, "type"},
		{`{"type":"string","const":1}`, "enum/const"},
		{`{"enum":["a","b"],"const":"c"}`, "enum/const"},
		{`{"type":"integer","minimum":5,"maximum":3}`, "minimum"},
		{`{"type":"integer","minimum":1,"maximum":4,"multipleOf":5}`, "multipleOf"},
		{`{"type":"number","exclusiveMinimum":2,"exclusiveMaximum":2}`, "minimum"},
		{`{"type":"string","minLength":5,"maxLength":3}`, "minLength"},
		{`{"type":"string","pattern":"^a+$","format":"date"}`, "pattern"},
		{`{"type":"array","minItems":3,"maxItems":2}`, "minItems"},
		{`{"type":"array","prefixItems":[{}],"items":false,"minItems":2}`, "minItems"},
		{`{"type":"object","properties":{"a":false},"required":["a"]}`, "false"},
		{`{"type":"object","additionalProperties":false,"required":["a"]}`, "required"},
		{`{"type":"object","properties":{"ab":{}},"propertyNames":{"maxLength":1},"required":["ab"]}`, "propertyNames"},
		{`{"allOf":[{"properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"a":{"type":"integer"}}}],"type":"object"}`, "type"},
		{`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, "allows no document"},
		{`{"anyOf":[{"type":"string","maxLength":-0,"minLength":1},{"type":"null","enum":[1]}]}`, "allows no document"},
	}
	for _, c := range cases {
		for _, comp := range []*Compiler{e.comp, strict} {
			_, err := comp.JSONSchema(c.schema)
			var ge *Error
			if !errors.As(err, &ge) {
				t.Errorf("%s: compiled (err %v), want an *Error", c.schema, err)
				continue
			}
			if !strings.Contains(ge.Reason, c.mentions) || !strings.Contains(ge.Reason, "allows no document") && !strings.Contains(ge.Reason, "unsupported") {
				t.Errorf("%s: error %q does not say it allows no document or name %q", c.schema, ge.Reason, c.mentions)
			}
		}
	}
	if _, err := e.comp.Regex(`[]`); err == nil || !strings.Contains(err.Error(), "matches no string") {
		t.Errorf("empty regex: err %v", err)
	}
}
