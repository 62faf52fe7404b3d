package grammar

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

type schemaCase struct {
	name    string
	schema  string
	valid   []string
	invalid []string
}

var schemaCases = []schemaCase{
	// members come in any order, each at most once (MaskBench's documents
	// often order keys otherwise than their schemas)
	{"object members in any order", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["a","c"],"additionalProperties":false}`,
		[]string{`{"a":1,"c":true}`, `{"c":true,"a":1}`, `{"a":-5,"b":"x","c":false}`, `{"b":"x","c":false,"a":0}`},
		[]string{`{"a":1}`, `{"c":true,"b":"x"}`, `{"a":1.5,"c":true}`, `{"a":1,"c":true,"d":1}`, `{"a":1,"b":2,"c":true}`,
			`{"a":1,"c":true,"a":2}`, `{"c":true,"a":1,"c":false}`, `{"b":"x","a":1,"b":"y","c":true}`}},
	{"open object members in any order", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]}`,
		[]string{`{"x":[],"b":"s","a":1}`, `{"a":1,"y":null,"b":"s","z":2}`, `{"b":""}`},
		[]string{`{"a":1}`, `{"b":"s","b":"t"}`, `{"b":"s","a":1,"a":2}`, `{"a":"x","b":"s"}`}},
	// past exactKeySetProps members, the required set is tracked and
	// optional members may come (and repeat) anywhere
	{"large object in any order", `{"type":"object","properties":{"p0":{},"p1":{},"p2":{},"p3":{},"p4":{},"p5":{},"p6":{},"p7":{},"r1":{"type":"integer"},"r2":{"type":"string"}},"required":["r2","r1"],"additionalProperties":false}`,
		[]string{`{"r1":1,"r2":"s"}`, `{"p7":0,"r2":"s","p0":1,"r1":2,"p3":null}`, `{"r2":"s","p1":1,"r1":2,"p1":2}`},
		[]string{`{"r1":1}`, `{"p0":1,"r2":"s"}`, `{"r1":1,"r2":"s","r1":2}`, `{"r1":1,"r2":"s","q":1}`, `{"r1":"1","r2":"s"}`}},
	// past maxRequiredSetPositions, required members keep the order of
	// the properties or of the required list among themselves (narrower
	// than the schema, never wider); optional ones come anywhere
	{"many required members", `{"type":"object","properties":{"a":{},"b":{},"c":{},"d":{},"e":{},"f":{},"g":{},"h":{},"i":{},"o1":{},"o2":{}},"required":["i","h","g","f","e","d","c","b","a"],"additionalProperties":false}`,
		[]string{`{"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1}`, `{"a":1,"b":1,"c":1,"o1":0,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1}`, `{"o2":0,"i":1,"h":1,"o1":0,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1,"o2":3}`},
		[]string{`{"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1}`, `{"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1,"i":2}`}},
	// drafts up to 7 ignore the keywords beside $ref; later ones apply them
	{"draft-07 $ref alone", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"o":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],"additionalProperties":false}},"type":"object","properties":{"s":{"type":"string","$ref":"#/definitions/o"}},"required":["s"],"additionalProperties":false}`,
		[]string{`{"s":{"x":1}}`}, []string{`{"s":"str"}`, `{"s":{}}`}},
	// keywords a draft does not have are annotations to its validators
	{"draft-04 without if", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"k":{"type":"string"},"v":{"type":"integer"}},"if":{"properties":{"k":{"const":"a"}}},"then":{"required":["v"]}}`,
		[]string{`{"k":"a"}`, `{"v":1}`}, []string{`{"k":1}`, `{"v":"x"}`}},
	// const is unknown too: the negated schema is "has k", whatever its value
	{"draft-04 not without const", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"k":{"type":"string"},"v":{"type":"integer"}},"not":{"properties":{"k":{"const":"b"}},"required":["k"]}}`,
		[]string{`{"v":1}`, `{}`}, []string{`{"k":"a"}`, `{"k":"b"}`, `{"k":1}`}},
	{"draft-07 if and const", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"k":{"type":"string"},"v":{"type":"integer"}},"if":{"properties":{"k":{"const":"a"}},"required":["k"]},"then":{"required":["v"]}}`,
		[]string{`{"k":"a","v":1}`, `{"k":"b"}`, `{}`}, []string{`{"k":"a"}`}},
	{"2020-12 $ref with siblings", `{"$defs":{"o":{"type":"object","properties":{"x":{"type":"integer"}}}},"properties":{"s":{"$ref":"#/$defs/o","required":["x"]}},"required":["s"],"additionalProperties":false}`,
		[]string{`{"s":{"x":1}}`}, []string{`{"s":{}}`, `{"s":"str"}`}},
	// a member whose schema is false is a forbidden key: its key is never
	// allowed, so no prefix leads to a dead end
	{"forbidden member", `{"type":"object","properties":{"a":false,"b":{"type":"integer"}},"not":{"required":["b","c"]}}`,
		[]string{`{"b":1}`, `{"c":1}`, `{}`},
		[]string{`{"a":1}`, `{"b":1,"c":2}`, `{"c":2,"b":1}`}},
	{"additional properties open", `{"type":"object","properties":{"a":{"type":"integer"}}}`,
		[]string{`{"a":1,"zz":[1,{"q":null}]}`, `{"x":"y"}`, `{}`},
		[]string{`{"a":"s"}`, `{"a":1,"a":"s"}`}},
	{"additional properties schema", `{"type":"object","additionalProperties":{"type":"number"}}`,
		[]string{`{"x":1.5,"y":-2e3}`, `{}`},
		[]string{`{"x":"1"}`}},
	{"type union", `{"type":["string","null"]}`, []string{`"hi"`, `null`}, []string{`1`, `true`}},
	{"enum and const", `{"type":"object","properties":{"k":{"enum":["a","b",3,null]},"c":{"const":{"x":[1,2]}}},"required":["k","c"]}`,
		[]string{`{"k":"a","c":{"x":[1,2]}}`, `{"k":3,"c":{"x":[1,2]}}`, `{"k":null,"c":{"x":[1,2]}}`},
		[]string{`{"k":"c","c":{"x":[1,2]}}`, `{"k":"a","c":{"x":[1]}}`}},
	// numbers are compared by value: any plain decimal spelling matches
	{"numeric enum by value", `{"type":"object","properties":{"n":{"enum":[2.0,0.125,-3,0]},"i":{"type":"integer","enum":[5]},"c":{"const":1.50}},"additionalProperties":false}`,
		[]string{`{"n":2}`, `{"n":2.0}`, `{"n":2.000}`, `{"n":0.125}`, `{"n":0.1250}`, `{"n":-3}`, `{"n":-3.0}`, `{"n":0}`, `{"n":-0.0}`, `{"i":5}`, `{"c":1.5}`, `{"c":1.500}`},
		[]string{`{"n":3}`, `{"n":0.12}`, `{"n":0.13}`, `{"n":-2}`, `{"n":2.01}`, `{"c":1.51}`, `{"c":15}`}},
	// uniqueItems over a small finite set of scalars: each value at most once
	{"uniqueItems of enum values", `{"type":"array","items":{"enum":["a","b",1,true]},"uniqueItems":true,"minItems":1}`,
		[]string{`["a"]`, `["b","a"]`, `[1,"a",true,"b"]`, `[1.0,true]`},
		[]string{`[]`, `["a","a"]`, `["a","b","a"]`, `[1,1.0]`, `[true,true]`, `["c"]`}},
	{"uniqueItems of booleans and null", `{"type":"object","properties":{"f":{"type":"array","items":{"type":["boolean","null"]},"uniqueItems":true,"maxItems":2}},"additionalProperties":false}`,
		[]string{`{"f":[]}`, `{"f":[true,null]}`, `{"f":[false]}`},
		[]string{`{"f":[true,true]}`, `{"f":[true,false,null]}`, `{"f":[1]}`}},
	// at most one item is always unique
	{"uniqueItems of one item", `{"type":"array","items":{"type":"string"},"uniqueItems":true,"maxItems":1}`,
		[]string{`[]`, `["x"]`}, []string{`["x","y"]`}},
	// oneOf branches that only list object keywords are disjoint among
	// objects, which the sibling type makes every instance
	{"oneOf disjoint under the sibling type", `{"type":"object","oneOf":[{"properties":{"a":{},"t":{"enum":["x","y"]}},"required":["a","t"],"additionalProperties":false},{"properties":{"b":{},"t":{"enum":["z"]}},"required":["t"],"additionalProperties":false}]}`,
		[]string{`{"a":1,"t":"x"}`, `{"t":"z","b":2}`, `{"t":"z"}`},
		[]string{`{"a":1,"t":"z"}`, `{"t":"x"}`, `{}`, `"s"`, `{"t":"z","a":1}`}},
	// not pattern takes the pattern's widest reading across dialects
	{"not a dialect-dependent pattern", `{"type":"string","not":{"pattern":"^\\w+\\s\\d$"}}`,
		[]string{`"ab 1x"`, `"a1"`, `""`, `"ab\t"`}, []string{`"ab 1"`, `"a_ 9"`, `"x\t0"`}},
	// not multipleOf k: integers k does not divide, fractions, other types
	{"not multipleOf", `{"type":["number","string"],"not":{"multipleOf":3},"maximum":20}`,
		[]string{`1`, `-4`, `20`, `1.5`}, []string{`3`, `0`, `-9`, `18`, `21`, `"s"`}},
	{"oneOf of integers by multiples", `{"type":"integer","minimum":0,"maximum":30,"oneOf":[{"multipleOf":3},{"multipleOf":5}]}`,
		[]string{`3`, `5`, `9`, `25`}, []string{`15`, `0`, `30`, `7`}},
	// not of additionalProperties, patternProperties, propertyNames: some
	// member fails them (a witness member the object must have)
	{"not additionalProperties", `{"type":"object","not":{"properties":{"a":{}},"additionalProperties":false}}`,
		[]string{`{"b":1}`, `{"a":1,"c":2}`}, []string{`{}`, `{"a":1}`}},
	// the witness comes last, or a repeat of its key could take its place
	{"not additionalProperties with repeats", `{"type":"object","additionalProperties":{"type":"integer"},"not":{"additionalProperties":{"minimum":5}}}`,
		[]string{`{"a":1}`, `{"a":9,"b":2}`}, []string{`{}`, `{"a":9}`, `{"k":1,"k":9}`}},
	{"not additionalProperties of a schema", `{"type":"object","properties":{"a":{"type":"integer"}},"not":{"additionalProperties":{"type":"string"}}}`,
		// the negated schema has no properties: "a" is additional to it
		[]string{`{"b":1}`, `{"a":1,"c":null}`, `{"a":1}`, `{"b":"s","a":1}`}, []string{`{}`, `{"b":"s"}`, `{"b":"s","c":"t"}`}},
	{"oneOf of closed objects", `{"oneOf":[{"type":"object","properties":{"d":{"const":"x"},"x":{"type":"boolean"}},"additionalProperties":false},{"type":"object","properties":{"d":{"const":"y"},"y":{"type":"boolean"}},"additionalProperties":false}]}`,
		[]string{`{"x":true}`, `{"d":"y"}`, `{"d":"x","x":false}`, `{"y":false,"d":"y"}`},
		[]string{`{}`, `{"d":"x","y":true}`, `{"x":1}`, `{"x":true,"y":true}`}},
	{"not patternProperties", `{"type":"object","not":{"patternProperties":{"^n_":{"type":"number"}}}}`,
		[]string{`{"n_a":"s"}`, `{"b":1,"n_":null}`}, []string{`{}`, `{"n_a":1}`, `{"b":"x"}`}},
	{"not propertyNames", `{"type":"object","not":{"propertyNames":{"maxLength":2}}}`,
		[]string{`{"abc":1}`, `{"a":1,"long":2}`}, []string{`{}`, `{"ab":1}`}},
	{"enum and const together", `{"enum":["a","b","c"],"const":"c"}`, []string{`"c"`}, []string{`"a"`, `"b"`}},
	// decimal bounds are exact: values between the bound and the next integer pass, and
	// so do trailing zeros at a bound (MaskBench false rejections)
	{"decimal bounds", `{"type":"number","minimum":78.55,"maximum":79.3333}`,
		[]string{`78.55`, `78.550`, `78.6`, `79`, `79.0`, `79.3333`, `79.33330`, `78.99999999`},
		[]string{`78.549`, `78.5`, `79.33331`, `79.4`, `80`, `-79`, `78`}},
	{"fractional minimum", `{"type":"number","minimum":0.1}`,
		[]string{`0.1`, `0.5`, `0.10`, `1`, `123.45`}, []string{`0.09`, `0`, `0.0999`, `-0.5`}},
	{"integer maximum with trailing zeros", `{"type":"number","minimum":0,"maximum":10}`,
		[]string{`10.0`, `10.00`, `0.0`, `9.99`, `0`}, []string{`10.01`, `10.1`, `-0.1`, `11`}},
	{"exclusive decimal bounds", `{"type":"number","exclusiveMinimum":-1.5,"exclusiveMaximum":10}`,
		[]string{`-1.49`, `-1`, `0`, `9.999`, `-0.5`}, []string{`-1.5`, `-1.50`, `10`, `10.0`, `-2`}},
	{"not type and const", `{"not":{"type":["object","array","null"]},"allOf":[{"not":{"const":"x"}},{"not":{"enum":[true,"z"]}}]}`,
		[]string{`"y"`, `false`, `4`, `1.5`, `""`}, []string{`"x"`, `true`, `"z"`, `null`, `{}`, `[]`}},
	{"not integer values", `{"type":"integer","not":{"enum":[3,4.0,"x"]}}`,
		[]string{`2`, `5`, `-3`, `34`}, []string{`3`, `4`, `"x"`}},
	{"not required", `{"type":"object","not":{"required":["a","b"]}}`,
		[]string{`{}`, `{"a":1}`, `{"b":1,"c":2}`}, []string{`{"a":1,"b":2}`, `{"b":1,"a":2}`}},
	{"not pattern and length", `{"type":"string","not":{"anyOf":[{"pattern":"^ab"},{"minLength":4}]}}`,
		[]string{`"a"`, `"ba"`, `"xyz"`}, []string{`"ab"`, `"abz"`, `"long!"`}},
	// a keyword holds vacuously for other types: "not minimum" wants a number, "not
	// properties" an object that has the property
	{"not bounds and properties", `{"type":"object","properties":{"n":{"not":{"minimum":2,"exclusiveMaximum":5}}},"not":{"properties":{"s":{"type":"string"}}}}`,
		[]string{`{"n":1,"s":1}`, `{"n":5,"s":null}`, `{"s":[]}`}, []string{`{}`, `{"n":1}`, `{"s":"x"}`, `{"n":2,"s":1}`, `{"n":4.5,"s":1}`, `{"n":"x","s":1}`}},
	{"not oneOf overlapping", `{"oneOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^a"},{"type":"integer","minimum":5}]}`,
		[]string{`"xy"`, `"abcd"`, `""`, `7`}, []string{`"ab"`, `"a"`, `4`, `null`}},
	{"not oneOf integer or number", `{"oneOf":[{"type":"integer"},{"type":"number"}]}`,
		[]string{`1.5`, `-0.25`}, []string{`1`, `0`, `"x"`}},
	{"not integer", `{"type":"number","not":{"type":"integer"},"maximum":3}`,
		[]string{`1.5`, `-0.25`, `2.999`}, []string{`1`, `2.0`, `3.5`, `"x"`}},
	{"not dependencies", `{"type":"object","dependentRequired":{"a":["b"]},"dependencies":{"c":{"required":["d"]},"e":["a"]},"properties":{"a":{},"b":{},"c":{},"d":{},"e":{}}}`,
		[]string{`{}`, `{"a":1,"b":2}`, `{"b":1}`, `{"c":1,"d":2}`, `{"a":1,"b":1,"e":1}`}, []string{`{"a":1}`, `{"c":1}`, `{"e":1}`, `{"b":1,"e":1}`}},
	{"minProperties", `{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":2}`,
		[]string{`{"a":1,"b":2}`, `{"a":1,"c":3}`, `{"a":1,"b":2,"c":3}`, `{"b":1,"x":2,"c":1}`, `{"x":0,"a":1,"c":2}`, `{"x":1,"a":2}`},
		[]string{`{}`, `{"a":1}`, `{"x":1,"x":2}`}},
	{"maxProperties", `{"type":"object","properties":{"a":{"type":"integer"}},"maxProperties":2}`,
		[]string{`{}`, `{"a":1}`, `{"a":1,"x":2}`, `{"x":1,"y":2}`},
		[]string{`{"a":1,"x":2,"y":3}`, `{"x":1,"y":2,"z":3}`, `{"a":"s"}`}},
	// one extra key is surely a property of its own; a second may repeat it
	{"minProperties with extra keys", `{"type":"object","properties":{"a":{}},"minProperties":2,"additionalProperties":{"type":"string"}}`,
		[]string{`{"a":1,"x":"s"}`, `{"x":"s","a":1}`}, []string{`{}`, `{"a":1}`, `{"x":"s"}`, `{"x":"s","x":"t"}`}},
	{"minProperties one by extra keys", `{"type":"object","minProperties":1,"additionalProperties":{"type":"string"}}`,
		[]string{`{"x":"s"}`, `{"x":"s","y":"t"}`}, []string{`{}`, `{"x":1}`}},
	// counted objects take their members in any order too
	{"minProperties in any order", `{"type":"object","properties":{"a":{},"b":{},"c":{"type":"integer"}},"required":["c"],"minProperties":2,"maxProperties":3,"additionalProperties":false}`,
		[]string{`{"c":1,"a":2}`, `{"b":0,"c":1}`, `{"b":1,"a":2,"c":3}`},
		[]string{`{"c":1}`, `{"a":1,"b":2}`, `{"c":1,"c":2}`, `{"c":1,"a":1,"a":2}`, `{"c":"x","a":1}`}},
	{"maxProperties with extra keys in any order", `{"type":"object","properties":{"a":{"type":"integer"},"b":{}},"maxProperties":2}`,
		[]string{`{"x":1,"a":2}`, `{"b":1,"a":2}`, `{"y":[]}`, `{}`},
		[]string{`{"x":1,"a":2,"b":3}`, `{"x":1,"y":2,"z":3}`, `{"a":"s"}`, `{"a":1,"a":2}`}},
	// an integral number may keep a zero fraction; an integer may not (draft 4)
	{"integer multipleOf on numbers", `{"type":"object","properties":{"n":{"type":"number","multipleOf":5,"minimum":0},"i":{"type":"integer","maximum":9}},"additionalProperties":false}`,
		[]string{`{"n":10}`, `{"n":10.0}`, `{"n":0.00}`, `{"i":9}`},
		[]string{`{"n":10.5}`, `{"n":7.0}`, `{"n":-5.0}`, `{"n":10.}`, `{"i":10}`}},
	{"minimum 0 with exponents", `{"type":"number","minimum":0}`,
		[]string{`1e-06`, `0`, `2.5E+3`, `0.0e5`, `12`}, []string{`-1e-06`, `-1`, `-0.5`}},
	{"maxProperties zero", `{"type":"object","maxProperties":0}`, []string{`{}`}, []string{`{"a":1}`, `[]`}},
	{"enum objects checked against the schema", `{"type":"object","properties":{"a":{"type":"integer","minimum":1}},"required":["a"],"maxProperties":2,"enum":[{"a":1},{"a":0},{"b":1},{"a":2,"b":[1]},{"a":3,"b":1,"c":1}]}`,
		[]string{`{"a":1}`, `{"a":2,"b":[1]}`}, []string{`{"a":0}`, `{"b":1}`, `{"a":3,"b":1,"c":1}`}},
	{"enum arrays checked against the schema", `{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},"maxItems":3,"enum":[["x",1],[1,"x"],["x",1,2,3],["y"]]}`,
		[]string{`["x",1]`, `["y"]`}, []string{`[1,"x"]`, `["x",1,2,3]`}},
	{"not if then else", `{"type":"object","properties":{"kind":{"enum":["a","b"]},"x":{}},"required":["kind"],"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]},"else":{"properties":{"x":false}}}`,
		[]string{`{"kind":"a","x":1}`, `{"kind":"b"}`}, []string{`{"kind":"a"}`, `{"kind":"b","x":1}`, `{"kind":"c"}`}},
	{"not oneOf", `{"type":"integer","not":{"oneOf":[{"minimum":5},{"maximum":10}]}}`,
		[]string{`5`, `10`, `7`}, []string{`4`, `11`, `-1`}},
	{"contains", `{"type":"array","items":{"type":"integer"},"contains":{"minimum":10},"maxItems":4}`,
		[]string{`[10]`, `[1,2,30]`, `[11,1]`, `[1,2,3,10]`}, []string{`[]`, `[1,2]`, `[1,2,3,4,10]`, `["x",10]`}},
	{"not items and contains", `{"type":"array","not":{"items":{"type":"string"}},"allOf":[{"not":{"contains":{"const":"z"}}}]}`,
		[]string{`[1]`, `["a",null]`, `[[],"x"]`}, []string{`[]`, `["a"]`, `["a","z"]`, `["z",1]`}},
	{"not of if", `{"type":"integer","not":{"if":{"minimum":5},"then":{"maximum":9},"else":{"maximum":0}}}`,
		[]string{`10`, `12`, `1`, `4`}, []string{`5`, `9`, `0`, `-3`}},
	{"arrays", `{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3}`,
		[]string{`[1,2]`, `[1,2,3]`}, []string{`[]`, `[1]`, `[1,2,3,4]`, `[1,"a"]`}},
	{"prefixItems", `{"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false}`,
		[]string{`["a",true]`, `["a"]`, `[]`}, []string{`["a",true,1]`, `[true]`}},
	{"tuple draft4", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"array","items":[{"type":"integer"}],"additionalItems":{"type":"string"}}`,
		[]string{`[1,"a","b"]`, `[1]`}, []string{`["a"]`, `[1,2]`}},
	{"anyOf", `{"anyOf":[{"type":"integer","minimum":10},{"type":"string","maxLength":2}]}`,
		[]string{`10`, `999`, `"ab"`}, []string{`9`, `"abc"`, `null`}},
	{"oneOf disjoint", `{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},{"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind"]}]}`,
		[]string{`{"kind":"a","x":1}`, `{"kind":"b","y":"s"}`}, []string{`{"kind":"c"}`, `{"kind":"a","x":"s"}`}},
	{"allOf merge", `{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}`,
		[]string{`{"a":1,"b":"x"}`}, []string{`{"a":1}`, `{"b":"x"}`}},
	{"ref recursion", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
		[]string{`{"v":1}`, `{"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]}`}, []string{`{"v":1,"kids":[{}]}`, `{"v":1,"kids":[{"v":"x"}]}`}},
	{"definitions draft7", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"s":{"type":"string","minLength":1}},"type":"object","properties":{"n":{"$ref":"#/definitions/s"}},"required":["n"]}`,
		[]string{`{"n":"a"}`}, []string{`{"n":""}`}},
	{"integer bounds", `{"type":"integer","minimum":-15,"exclusiveMaximum":120}`,
		[]string{`-15`, `0`, `7`, `119`, `-3`}, []string{`-16`, `120`, `1000`, `1.5`, `007`}},
	{"number bounds", `{"type":"number","minimum":0.5,"maximum":10}`,
		[]string{`1`, `2.75`, `10`, `9.999`}, []string{`0`, `10.5`, `-1`, `11`}},
	{"exclusive zero", `{"type":"number","exclusiveMinimum":0}`,
		[]string{`0.001`, `3`}, []string{`0`, `0.0`, `-1`}},
	{"multipleOf", `{"type":"integer","multipleOf":7,"minimum":0,"maximum":50}`,
		[]string{`0`, `7`, `49`}, []string{`8`, `56`, `-7`}},
	{"string length", `{"type":"string","minLength":2,"maxLength":4}`,
		[]string{`"ab"`, `"abcd"`, `"é€x"`, `"a\n"`}, []string{`"a"`, `"abcde"`}},
	{"pattern search", `{"type":"string","pattern":"[0-9]{3}"}`,
		[]string{`"ab123cd"`, `"123"`}, []string{`"12a3"`}},
	{"pattern anchored", `{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$"}`,
		[]string{`"abc"`, `"ab-cd-e"`}, []string{`"ab-"`, `"Ab"`, `"a b"`}},
	{"format date-time", `{"type":"string","format":"date-time"}`,
		[]string{`"2024-02-28T13:45:00Z"`, `"1999-12-31T23:59:59.123+05:30"`}, []string{`"2024-02-30T13:45:00Z"`, `"2024-01-01 10:00:00"`}},
	{"format date", `{"type":"string","format":"date"}`, []string{`"2023-04-30"`}, []string{`"2023-04-31"`, `"2023-4-3"`}},
	{"format uuid", `{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567e89b12d3a456426614174000"`}},
	{"format email", `{"type":"string","format":"email"}`, []string{`"john.doe@example.com"`}, []string{`"john.doe"`, `"a@b"`}},
	{"format ipv4", `{"type":"string","format":"ipv4"}`, []string{`"192.168.0.1"`}, []string{`"256.1.1.1"`, `"1.2.3"`}},
	{"format ipv6", `{"type":"string","format":"ipv6"}`, []string{`"::1"`, `"2001:db8::8a2e:370:7334"`}, []string{`"2001:db8:::1"`, `"1.2.3.4"`}},
	{"format uri", `{"type":"string","format":"uri"}`,
		[]string{`"https://example.com/a/b?x=1#f"`, `"file:///path/to/file1.js"`, `"https://en.wikipedia.org/wiki/Mass%E2%80%93energy"`, `"urn:isbn:0451450523"`, `"ftp://user:pw@host:21/x"`, `"ecdsa-koblitz-pubkey:14RZvYazz9H2DC2skBfpPVxax54g4yabxe"`},
		[]string{`"not a uri"`, `"/relative"`, `"path/to"`, `"http://a b"`, `"https://x/%zz"`, `"1http://x"`}},
	{"format uri-reference", `{"type":"string","format":"uri-reference"}`,
		[]string{`"path/to/import1"`, `"/a/b?c#d"`, `"//host/x"`, `"https://example.com"`, `"#frag"`, `""`},
		[]string{`"a b"`, `"%zz"`, `"x\y"`}},
	{"patternProperties", `{"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}`,
		[]string{`{"x-a":1,"x-b":2}`, `{}`}, []string{`{"y":1}`, `{"x-a":"s"}`}},
	{"propertyNames", `{"type":"object","propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":{"type":"integer"}}`,
		[]string{`{"abc":1}`}, []string{`{"aBc":1}`, `{"abc":"s"}`}},
	{"boolean schema", `true`, []string{`1`, `{"a":[]}`, `"s"`}, []string{`{"a":}`}},
	// length bounds of >= tailStates chars spell escapes and non-ASCII
	// chars through shared rules; each counts as one char
	{"long string length", `{"type":"string","minLength":600,"maxLength":601}`,
		[]string{`"` + strings.Repeat("a", 600) + `"`, `"` + strings.Repeat("é", 599) + `\n😀"`, `"` + strings.Repeat(`\\`, 300) + strings.Repeat(`\u001f`, 301) + `"`},
		[]string{`"` + strings.Repeat("a", 599) + `"`, `"` + strings.Repeat("a", 600) + `é\n"`, `"` + strings.Repeat("😀", 602) + `"`, `"` + strings.Repeat("a", 599) + "\x01" + `"`}},
	// the same large string constraints twice: one rule called from both
	{"shared long strings", `{"type":"object","properties":{"a":{"type":"string","maxLength":700},"b":{"type":"string","maxLength":700},"c":{"type":"string","pattern":"^[^x]{0,600}$"},"d":{"type":"string","pattern":"^[^x]{0,600}$"}},"required":["a","b","c","d"]}`,
		[]string{`{"a":"é\"","b":"` + strings.Repeat("ü", 700) + `","c":"日本\n","d":"` + strings.Repeat(`\/`, 600) + `"}`},
		[]string{`{"a":"","b":"` + strings.Repeat("ü", 701) + `","c":"","d":""}`, `{"a":"","b":"","c":"x","d":""}`, `{"a":"","b":"","c":"","d":"` + strings.Repeat("é", 601) + `"}`}},
	// a pattern whose '.' leaves out '\n': the tail rules of a char set
	// that is not every char
	{"long pattern with dot", `{"type":"string","pattern":"^https?://.+$","maxLength":1024}`,
		[]string{`"https://é.example/日本?q=\"1\""`, `"http://` + strings.Repeat("ab", 508) + `"`},
		[]string{`"https://a\nb"`, `"https://"`, `"http://` + strings.Repeat("ab", 509) + `"`}},
	// a huge maxLength is enforced as at most longStringCap chars: narrower, never wider
	{"huge maxLength", `{"type":"string","maxLength":65535}`,
		[]string{`""`, `"` + strings.Repeat("é", longStringCap) + `"`}, []string{`"` + strings.Repeat("a", longStringCap+1) + `"`, `1`}},
	{"escapes in free strings", `{"type":"string"}`, []string{`"a\"b\\c\u00e9\n"`, `"日本語"`}, []string{`"\x"`, `"a` + "\x01" + `"`}},
}

// slowSchemaCases take seconds of masks each (hundreds of distinct
// positions in long strings): the full run checks them, -short does not.
var slowSchemaCases = map[string]bool{"shared long strings": true, "long pattern with dot": true, "huge maxLength": true}

func TestSchemaFeatures(t *testing.T) {
	for name := range slowSchemaCases {
		if !slices.ContainsFunc(schemaCases, func(c schemaCase) bool { return c.name == name }) {
			t.Fatalf("slowSchemaCases names %q, which is not a case", name)
		}
	}
	for _, tok := range testTokenizers() {
		e := env(t, tok)
		for _, tc := range schemaCases {
			if slowSchemaCases[tc.name] && testing.Short() {
				continue
			}
			g, err := e.comp.JSONSchema(tc.schema)
			if err != nil {
				t.Fatalf("%s/%s: compile: %v", tok, tc.name, err)
			}
			for _, d := range tc.valid {
				if !acceptDoc(t, e, g, d) {
					t.Errorf("%s/%s: valid %s rejected", tok, tc.name, d)
				}
				if !acceptBytes(g, d) {
					t.Errorf("%s/%s: valid %s rejected bytewise", tok, tc.name, d)
				}
			}
			for _, d := range tc.invalid {
				if acceptDoc(t, e, g, d) || acceptBytes(g, d) {
					t.Errorf("%s/%s: invalid %s accepted", tok, tc.name, d)
				}
			}
		}
	}
}

func TestFlexibleWhitespace(t *testing.T) {
	e := env(t, "llama3")
	g, err := e.flex.JSONSchema(`{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{`{"a":[1,2]}`, "{\n  \"a\": [ 1, 2 ]\n}"} {
		if !acceptDoc(t, e, g, d) {
			t.Errorf("flexible: %q rejected", d)
		}
	}
	gc, _ := e.comp.JSONSchema(`{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}`)
	if acceptDoc(t, e, gc, "{ \"a\":[1]}") {
		t.Error("compact grammar accepted whitespace")
	}
}

// Generated schemas often repeat an $id; the compile only refuses a $ref to one.
func TestDuplicateIDsWithoutRef(t *testing.T) {
	e := env(t, "llama3")
	g, err := e.comp.JSONSchema(`{"type":"object","properties":{"a":{"$id":"/properties/x","type":"string"},"b":{"$id":"/properties/x","type":"integer"}},"required":["a","b"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !acceptDoc(t, e, g, `{"a":"s","b":1}`) || acceptDoc(t, e, g, `{"a":1,"b":1}`) {
		t.Error("properties with a repeated $id do not keep their own schemas")
	}
	if _, err := e.comp.JSONSchema(`{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","exclusiveMinimum":true,"minimum":5}`); err != nil {
		t.Errorf("valid draft-04 schema refused: %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	e := env(t, "llama3")
	cases := map[string]string{
		`{"type":"string","not":{"format":"email"}}`:                                     "not",
		`{"type":"array","uniqueItems":true}`:                                            "uniqueItems",
		`{"type":"array","items":{"type":"string"},"uniqueItems":true}`:                  "uniqueItems",
		`{"type":"object","properties":{"a":{}},"minProperties":3}`:                      "minProperties",
		`{"type":"array","not":{"uniqueItems":true}}`:                                    "uniqueItems",
		`{"type":"string","pattern":"(?=a)b"}`:                                           "pattern",
		`{"type":"string","pattern":"(a"}`:                                               "pattern",
		`{"$ref":"http://example.com/x.json"}`:                                           "",
		`{"type":"strin"}`:                                                               "",
		`{"oneOf":[{"type":"string","format":"email"},{"type":"string","maxLength":5}]}`: "oneOf",
		`{"type":"string","if":{"format":"email"},"then":{"maxLength":5}}`:               "if",
		`not json`: "JSON",
		// the root $schema picks the metaschema: draft-04's exclusiveMinimum is a boolean
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","exclusiveMinimum":5}`: "exclusiveMinimum",
		`{"type":"object","properties":{"a":{"minLength":"3"}}}`:                                      "minLength",
		// a $ref to an $id two schemas claim is ambiguous
		`{"type":"object","properties":{"a":{"$id":"http://x/a","type":"string"},"b":{"$id":"http://x/a","type":"integer"},"c":{"$ref":"http://x/a"}}}`: "more than one schema",
	}
	for schema, want := range cases {
		_, err := e.comp.JSONSchema(schema)
		var ge *Error
		if !errors.As(err, &ge) {
			t.Errorf("%s: want *Error, got %v", schema, err)
			continue
		}
		if !strings.Contains(ge.Reason, want) {
			t.Errorf("%s: error %q does not mention %q", schema, ge.Reason, want)
		}
	}
	small := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxSchemaBytes: 10}})
	if _, err := small.JSONSchema(`{"type":"string"}`); err == nil {
		t.Error("schema over MaxSchemaBytes compiled")
	}
}

// invalidCase is one hand-written MaskBench-style negative instance.
type invalidCase struct {
	Schema json.RawMessage `json:"schema"`
	Valid  []string        `json:"valid"`
	Data   []string        `json:"invalid"`
}

func TestInvalidInstancesRejected(t *testing.T) {
	raw, err := os.ReadFile("testdata/invalid.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []invalidCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	e := env(t, "llama3")
	n := 0
	for i, c := range cases {
		g, err := e.comp.JSONSchema(string(c.Schema))
		if err != nil {
			t.Errorf("case %d: compile: %v", i, err)
			continue
		}
		for _, d := range c.Valid {
			if !acceptDoc(t, e, g, d) {
				t.Errorf("case %d: valid %s rejected", i, d)
			}
		}
		for _, d := range c.Data {
			n++
			if acceptDoc(t, e, g, d) {
				t.Errorf("case %d: invalid %s accepted", i, d)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d invalid instances in testdata", n)
	}
}

// TestSchemaCasesAgreeWithValidator: every document schemaCases calls valid
// validates against jsonschema/v6 with formats asserted (a reference nobody
// here wrote), so a case cannot make the grammar accept what a validator
// would refuse.
func TestSchemaCasesAgreeWithValidator(t *testing.T) {
	for _, c := range schemaCases {
		v := compileValidator(t, c.schema)
		if strings.HasPrefix(c.name, "not ") {
			// the negations' invalid documents are invalid to the validator too
			for _, d := range c.invalid {
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(d))
				if err == nil && v.Validate(inst) == nil {
					t.Errorf("%s: %s is listed invalid but validates", c.name, d)
				}
			}
		}
		for _, d := range c.valid {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(d))
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, d, err)
			}
			if err := v.Validate(inst); err != nil {
				t.Errorf("%s: %s does not validate: %v", c.name, d, err)
			}
		}
	}
}
