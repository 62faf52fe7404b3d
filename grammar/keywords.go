package grammar

import "slices"

// unsupportedKeys are validation keywords this compiler cannot enforce;
// any other unknown keyword is an annotation to validators too.
var unsupportedKeys = map[string]bool{
	"unevaluatedProperties": true, "unevaluatedItems": true, "$dynamicRef": true, "$recursiveRef": true,
}

// parseOne reads one schema object's own keywords (following $ref and allOf).
func (sc *schemaCompiler) parseOne(j *jsonValue) (*parsed, error) {
	if p, ok := sc.one[j]; ok {
		if p.busy {
			return nil, errf("schema refers to itself without consuming input")
		}
		return p, p.err
	}
	p := &parsed{s: newConstraints(), busy: true}
	sc.one[j] = p
	p.err = sc.parseKeywords(j, p)
	p.busy = false
	return p, p.err
}

func (sc *schemaCompiler) subList(j *jsonValue, key string) ([]*jsonValue, error) {
	v := j.get(key)
	if v == nil {
		return nil, nil
	}
	if v.kind != jsonArray || len(v.arr) == 0 {
		return nil, errf("%s must be a non-empty array", key)
	}
	for _, e := range v.arr {
		if e.kind != jsonObject && e.kind != jsonBool {
			return nil, errf("%s entries must be schemas", key)
		}
	}
	return v.arr, nil
}

func asInt(v *jsonValue, key string) (int, error) {
	if v.kind != jsonNumber || !isIntegral(v.num) {
		return 0, errf("%s must be a non-negative integer", key)
	}
	r, _ := numRat(v.num)
	if r.Sign() < 0 {
		return 0, errf("%s must be a non-negative integer", key)
	}
	if !r.Num().IsInt64() || r.Num().Int64() > 1<<30 {
		return 1 << 30, nil
	}
	return int(r.Num().Int64()), nil
}

func isSchema(v *jsonValue) bool { return v != nil && (v.kind == jsonObject || v.kind == jsonBool) }

// keywordHandler reads keyword name (value v) of schema object j into p.
type keywordHandler func(sc *schemaCompiler, j *jsonValue, name string, v *jsonValue, p *parsed) error

// keywordHandlers are the validation keywords the compiler enforces, by family:
// applicators, type and values, objects, arrays, strings, numbers. A keyword in neither this
// table, unsupportedKeys nor annotationKeys is an annotation to validators too.
var keywordHandlers = map[string]keywordHandler{
	"$ref": refKeyword, "allOf": allOfKeyword, "anyOf": anyOfKeyword, "oneOf": oneOfKeyword,

	"type": typeKeyword, "enum": enumKeyword, "const": constKeyword,

	"properties": propertiesKeyword, "required": requiredKeyword,
	"additionalProperties": additionalPropertiesKeyword, "patternProperties": patternPropertiesKeyword,
	"propertyNames": propertyNamesKeyword,
	"minProperties": countKeyword(func(s *constraints, n int) { s.minProps = n }),
	"maxProperties": countKeyword(func(s *constraints, n int) { s.maxProps = n }),

	"items": itemsKeyword, "prefixItems": prefixItemsKeyword,
	"additionalItems": func(*schemaCompiler, *jsonValue, string, *jsonValue, *parsed) error {
		return nil // read with array-form items; alone it has no effect
	},
	"minItems": countKeyword(func(s *constraints, n int) { s.minItems = n }),
	"uniqueItems": func(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
		if v.kind != jsonBool {
			return errf("uniqueItems must be a boolean")
		}
		p.s.unique = p.s.unique || v.b
		return nil
	},
	"maxItems": countKeyword(func(s *constraints, n int) { s.maxItems = n }),

	"minLength": countKeyword(func(s *constraints, n int) { s.minLen = n }),
	"maxLength": countKeyword(func(s *constraints, n int) { s.maxLen = n }),
	"pattern":   patternKeyword, "format": formatKeyword,

	"minimum": boundKeyword, "maximum": boundKeyword, "exclusiveMinimum": boundKeyword, "exclusiveMaximum": boundKeyword,
	"multipleOf": multipleOfKeyword,
}

// The negation keywords join the table at init: negate consults the table
// (to tell annotations from keywords it cannot negate).
func init() {
	keywordHandlers["contains"] = containsKeyword
	keywordHandlers["minContains"] = containsKeyword
	keywordHandlers["maxContains"] = containsKeyword
	keywordHandlers["if"] = ifKeyword
	keywordHandlers["dependencies"] = dependenciesKeyword
	keywordHandlers["dependentRequired"] = dependenciesKeyword
	keywordHandlers["dependentSchemas"] = dependenciesKeyword
	keywordHandlers["not"] = notKeyword
	keywordHandlers[kwExcluded] = excludedKeyword
	keywordHandlers[kwNotPattern] = notPatternKeyword
	keywordHandlers[kwNotMultiple] = func(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
		r, ok := numRat(v.num)
		if v.kind != jsonNumber || !ok || !r.IsInt() {
			return errf("internal: bad %s", kwNotMultiple)
		}
		p.s.notMults = append(p.s.notMults, r.Num())
		return nil
	}
	keywordHandlers[kwWitness] = func(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
		w := keyWitness{value: v.get("value"), keySchema: v.get("keySchema")}
		strs := func(key string) []string {
			var out []string
			if a := v.get(key); a != nil {
				for _, e := range a.arr {
					out = append(out, e.str)
				}
			}
			return out
		}
		w.excludedNames, w.excludedPatterns = strs("names"), strs("patterns")
		if pat := v.get("pattern"); pat != nil {
			w.pattern = pat.str
		}
		if w.value == nil {
			return errf("internal: bad %s", kwWitness)
		}
		p.s.witness = append(p.s.witness, w)
		return nil
	}
	keywordHandlers[kwFractional] = func(_ *schemaCompiler, _ *jsonValue, _ string, _ *jsonValue, p *parsed) error {
		p.s.fractional = true
		return nil
	}
}

// ignores reports whether keyword k of schema j asserts nothing: an
// annotation, a sibling of $ref or a keyword of a later draft under a root
// draft 3 to 7 (refAlone, unknown). Synthesized schemas (id < 0) are
// read whole.
func (sc *schemaCompiler) ignores(j *jsonValue, k string) bool {
	if annotationKeys[k] {
		return true
	}
	if j.id < 0 {
		return false
	}
	return sc.refAlone && k != "$ref" && j.get("$ref") != nil || sc.unknown[k]
}

// parseKeywords reads schema j's own keywords into p.
func (sc *schemaCompiler) parseKeywords(j *jsonValue, p *parsed) error {
	if j.kind == jsonBool {
		if !j.b {
			p.s.types, p.s.conflict = 0, "the schema false allows nothing"
			if j.id < 0 { // made by negate: the negated schema holds for every value
				p.s.conflict = "not: every value is valid against the negated schema"
			}
		}
		return nil
	}
	for i, k := range j.keys {
		v := j.vals[i]
		if sc.ignores(j, k) {
			continue
		}
		if unsupportedKeys[k] {
			return errf("unsupported keyword %q", k)
		}
		if (k == kwExcluded || k == kwNotPattern || k == kwFractional || k == kwNotMultiple || k == kwWitness) && j.id >= 0 {
			continue // private to synthesized schemas
		}
		if h := keywordHandlers[k]; h != nil {
			if err := h(sc, j, k, v, p); err != nil {
				return err
			}
		}
	}
	if sc.strict {
		markImplicit(j, p.s)
	}
	return nil
}

// Applicators: each adds a list of schemas of which at least one must hold.

func refKeyword(sc *schemaCompiler, j *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonString {
		return errf("$ref must be a string")
	}
	t, err := sc.resolveRef(j, v.str)
	if err != nil {
		return err
	}
	p.alternatives = append(p.alternatives, []*jsonValue{t})
	return nil
}

func allOfKeyword(sc *schemaCompiler, j *jsonValue, name string, _ *jsonValue, p *parsed) error {
	l, err := sc.subList(j, name)
	if err != nil {
		return err
	}
	for _, x := range l {
		p.alternatives = append(p.alternatives, []*jsonValue{x})
	}
	return nil
}

func anyOfKeyword(sc *schemaCompiler, j *jsonValue, name string, _ *jsonValue, p *parsed) error {
	l, err := sc.subList(j, name)
	if err != nil {
		return err
	}
	p.alternatives = append(p.alternatives, l)
	return nil
}

func oneOfKeyword(sc *schemaCompiler, j *jsonValue, name string, _ *jsonValue, p *parsed) error {
	l, err := sc.subList(j, name)
	if err != nil {
		return err
	}
	p.oneOf = append(p.oneOf, len(p.alternatives))
	p.alternatives = append(p.alternatives, l)
	return nil
}

// ifKeyword: if S then T else E holds when (S and T) or (not S and E), with
// not S the exact negation of not.go (refused where there is none). An if
// without then/else asserts nothing; then/else without if are ignored.
func ifKeyword(sc *schemaCompiler, j *jsonValue, _ string, v *jsonValue, p *parsed) error {
	then, els := j.get("then"), j.get("else")
	if then == nil && els == nil {
		return nil
	}
	if !isSchema(v) || then != nil && !isSchema(then) || els != nil && !isSchema(els) {
		return errf("if, then and else must be schemas")
	}
	neg, err := sc.negate(v, 0)
	if err != nil {
		return inKeyword("if", err)
	}
	yes, no := []*jsonValue{v}, []*jsonValue{neg}
	if then != nil {
		yes = append(yes, then)
	}
	if els != nil {
		no = append(no, els)
	}
	p.alternatives = append(p.alternatives, []*jsonValue{
		sc.synthObject("allOf", sc.synthArray(yes...)),
		sc.synthObject("allOf", sc.synthArray(no...)),
	})
	return nil
}

// Type and values.

// typeBits are the type keyword's names.
var typeBits = map[string]uint8{
	"null": tNull, "boolean": tBool, "object": tObj, "array": tArr, "string": tStr,
	"integer": tInt, "number": tInt | tNum,
}

func typeKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	var names []string
	switch v.kind {
	case jsonString:
		names = []string{v.str}
	case jsonArray:
		for _, e := range v.arr {
			if e.kind != jsonString {
				return errf("type entries must be strings")
			}
			names = append(names, e.str)
		}
	default:
		return errf("type must be a string or array")
	}
	var t uint8
	for _, n := range names {
		bit, ok := typeBits[n]
		if !ok {
			return errf("unknown type %q", n)
		}
		t |= bit
	}
	p.s.types &= t
	return nil
}

func enumKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonArray {
		return errf("enum must be an array")
	}
	mergeEnums(p.s, &constraints{hasEnum: true, enum: v.arr})
	return nil
}

// constKeyword: const and enum in one schema both hold (the values of
// enum equal to const).
func constKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	mergeEnums(p.s, &constraints{hasEnum: true, enum: []*jsonValue{v}})
	return nil
}

// countKeyword reads a non-negative integer keyword into the field set writes.
func countKeyword(set func(s *constraints, n int)) keywordHandler {
	return func(_ *schemaCompiler, _ *jsonValue, name string, v *jsonValue, p *parsed) error {
		n, err := asInt(v, name)
		if err != nil {
			return err
		}
		set(p.s, n)
		return nil
	}
}

// Objects.

func propertiesKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonObject {
		return errf("properties must be an object")
	}
	for i, name := range v.keys {
		if !isSchema(v.vals[i]) {
			return errf("property %q is not a schema", name)
		}
		p.s.properties = append(p.s.properties, prop{name, []*jsonValue{v.vals[i]}})
	}
	return nil
}

func requiredKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonArray {
		return errf("required must be an array")
	}
	for _, e := range v.arr {
		if e.kind != jsonString {
			return errf("required entries must be strings")
		}
		if !slices.Contains(p.s.required, e.str) {
			p.s.required = append(p.s.required, e.str)
		}
	}
	return nil
}

func additionalPropertiesKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if !isSchema(v) {
		return errf("additionalProperties must be a schema")
	}
	if v.kind == jsonBool && !v.b {
		p.s.noAdditional = true
	} else if !isTrivial([]*jsonValue{v}) {
		p.s.additional = []*jsonValue{v}
	}
	return nil
}

func patternPropertiesKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonObject {
		return errf("patternProperties must be an object")
	}
	for i, pat := range v.keys {
		if !isSchema(v.vals[i]) {
			return errf("patternProperties entries must be schemas")
		}
		p.s.patternProps = append(p.s.patternProps, patternProp{pat, []*jsonValue{v.vals[i]}})
	}
	return nil
}

func propertyNamesKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if !isSchema(v) {
		return errf("propertyNames must be a schema")
	}
	if !isTrivial([]*jsonValue{v}) {
		p.s.propertyNames = []*jsonValue{v}
	}
	return nil
}

// Arrays.

func itemsKeyword(_ *schemaCompiler, j *jsonValue, _ string, v *jsonValue, p *parsed) error {
	s := p.s
	switch {
	case v.kind == jsonArray: // draft <= 2019-09 tuple, its tail in additionalItems
		for _, e := range v.arr {
			if !isSchema(e) {
				return errf("items entries must be schemas")
			}
			s.prefix = append(s.prefix, []*jsonValue{e})
		}
		if ai := j.get("additionalItems"); ai != nil {
			if !isSchema(ai) {
				return errf("additionalItems must be a schema")
			}
			if ai.kind == jsonBool && !ai.b {
				s.noMoreItems = true
			} else if !isTrivial([]*jsonValue{ai}) {
				s.items = []*jsonValue{ai}
			}
		}
	case isSchema(v):
		if v.kind == jsonBool && !v.b {
			s.noMoreItems = true
		} else if !isTrivial([]*jsonValue{v}) {
			s.items = []*jsonValue{v}
		}
	default:
		return errf("items must be a schema or array")
	}
	return nil
}

func prefixItemsKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonArray {
		return errf("prefixItems must be an array")
	}
	for _, e := range v.arr {
		if !isSchema(e) {
			return errf("prefixItems entries must be schemas")
		}
		p.s.prefix = append(p.s.prefix, []*jsonValue{e})
	}
	return nil
}

// Strings.

func patternKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonString {
		return errf("pattern must be a string")
	}
	p.s.patterns = append(p.s.patterns, v.str)
	return nil
}

func formatKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonString {
		return errf("format must be a string")
	}
	p.s.formats = append(p.s.formats, v.str)
	return nil
}

// Numbers.

// boundKeyword reads minimum, maximum and their exclusive forms: numbers
// (draft 6 on), or draft 4's booleans that make minimum/maximum exclusive.
func boundKeyword(_ *schemaCompiler, j *jsonValue, name string, v *jsonValue, p *parsed) error {
	if v.kind == jsonBool {
		return nil // draft 4 modifier, read with minimum/maximum
	}
	if v.kind != jsonNumber {
		return errf("%s must be a number", name)
	}
	r, _ := numRat(v.num)
	draft4Exclusive := func(key string) bool {
		e := j.get(key)
		return e != nil && e.kind == jsonBool && e.b
	}
	switch name {
	case "minimum":
		p.s.setLo(r, draft4Exclusive("exclusiveMinimum"))
	case "maximum":
		p.s.setHi(r, draft4Exclusive("exclusiveMaximum"))
	case "exclusiveMinimum":
		p.s.setLo(r, true)
	case "exclusiveMaximum":
		p.s.setHi(r, true)
	}
	return nil
}

func multipleOfKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if v.kind != jsonNumber {
		return errf("multipleOf must be a number")
	}
	r, _ := numRat(v.num)
	if r.Sign() <= 0 {
		return errf("multipleOf must be positive")
	}
	p.s.mults = append(p.s.mults, r)
	return nil
}

// markImplicit records, for strict mode, what schema object j leaves open
// by default: listed properties with no word about other keys, a tuple with
// no tail schema. They are closed once merged with the schemas j is and-ed
// with (see constraints.closeKeys); a required name outside the merged
// properties keeps the object open (closing it would leave no document).
func markImplicit(j *jsonValue, s *constraints) {
	s.closeKeys = j.get("properties") != nil
	s.openKeys = j.get("additionalProperties") != nil || j.get("patternProperties") != nil
	items := j.get("items")
	tupleItems := items != nil && items.kind == jsonArray
	s.closeItems = j.get("prefixItems") != nil || tupleItems
	s.openItems = items != nil && !tupleItems || tupleItems && j.get("additionalItems") != nil
}

// notKeyword ands in the schema of the instances that fail v (not.go).
func notKeyword(sc *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	if !isSchema(v) {
		return errf("not must be a schema")
	}
	neg, err := sc.negate(v, 0)
	if err != nil {
		return err
	}
	p.alternatives = append(p.alternatives, []*jsonValue{neg})
	return nil
}

func excludedKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	p.s.excluded = append(p.s.excluded, v.arr...)
	return nil
}

func notPatternKeyword(_ *schemaCompiler, _ *jsonValue, _ string, v *jsonValue, p *parsed) error {
	p.s.notPatterns = append(p.s.notPatterns, v.str)
	return nil
}

// dependenciesKeyword reads dependentRequired, dependentSchemas and draft
// 4-7's dependencies: for each name, an object that has it must have the
// listed names too (or be valid against the schema). Each is the choice
// "no such key, or the key and what it brings" (one anyOf of two schemas),
// so the object automaton stays the plain one.
func dependenciesKeyword(sc *schemaCompiler, _ *jsonValue, name string, v *jsonValue, p *parsed) error {
	if v.kind != jsonObject {
		return errf("%s must be an object", name)
	}
	for i, key := range v.keys {
		dep := v.vals[i]
		absent := sc.synthObject("properties", sc.synthObject(key, sc.synthBool(false)))
		present := sc.synthObject("required", sc.synthArray(sc.synthString(key)))
		var with *jsonValue
		switch {
		case dep.kind == jsonArray && name != "dependentSchemas":
			names := []*jsonValue{sc.synthString(key)}
			for _, n := range dep.arr {
				if n.kind != jsonString {
					return errf("%s: %q: entries must be strings", name, key)
				}
				names = append(names, n)
			}
			with = sc.synthObject("required", sc.synthArray(names...))
		case isSchema(dep) && name != "dependentRequired":
			with = sc.synthObject("allOf", sc.synthArray(present, dep))
		default:
			return errf("%s: %q must be an array of names or a schema", name, key)
		}
		// (a non-object passes absent: properties holds for it vacuously)
		p.alternatives = append(p.alternatives, []*jsonValue{absent, with})
	}
	return nil
}

// containsKeyword reads contains (some item valid against the schema) with
// the default counts: minContains 1 (0 drops it), no maxContains.
func containsKeyword(_ *schemaCompiler, j *jsonValue, name string, v *jsonValue, p *parsed) error {
	c := j.get("contains")
	if c == nil {
		return nil // min/maxContains alone assert nothing
	}
	if name != "contains" {
		n, err := asInt(v, name)
		if err != nil {
			return err
		}
		if name == "maxContains" || n > 1 {
			return errf("%s is not supported", name)
		}
		return nil
	}
	if !isSchema(c) {
		return errf("contains must be a schema")
	}
	if m := j.get("minContains"); m != nil && m.kind == jsonNumber && isIntegral(m.num) {
		if r, _ := numRat(m.num); r.Sign() == 0 {
			return nil // at least zero: no constraint
		}
	}
	p.s.contains = append(p.s.contains, c)
	return nil
}
