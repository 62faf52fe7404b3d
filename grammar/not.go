package grammar

import (
	"slices"
	"strconv"
)

// `not` is compiled by rewriting its schema into the schema of exactly the
// instances that fail it (de Morgan over keywords: a schema holds when every
// keyword holds, so it fails when some keyword fails), and and-ing that in.
// Each keyword's failure is a schema: a type outside the list, a value
// outside enum, an object missing a required name, a string outside a
// pattern or format (regular sets, complemented as char DFAs), a number
// beyond a bound, a property present with a failing value. A keyword whose
// failure cannot be written that way is refused by name, so `not` is never
// weakened: an accepted document always fails the negated schema.

// Private keywords of synthesized schemas. A user's schema cannot carry
// them: no JSON Schema keyword starts with a NUL, and parseKeywords reads
// them only in synthesized nodes (negative ids).
const (
	kwExcluded     = "\x00excluded"    // array of values the instance may not equal
	kwNotPattern   = "\x00notPattern"  // a pattern the string may not match
	kwFractional   = "\x00fractional"  // true: a number with a non-zero fraction (not an integer)
	kwNotMultiple  = "\x00notMultiple" // an integer the (integer) instance is not a multiple of
	kwWitness      = "\x00witness"     // a member the object must have (see keyWitness)
	maxNegateDepth = 16
)

// synth makes a schema node that is no part of the document; its id is
// negative so rule caches never confuse it with a document node.
func (sc *schemaCompiler) synth(kind jsonKind) *jsonValue {
	sc.synthID--
	return &jsonValue{kind: kind, id: sc.synthID}
}

func (sc *schemaCompiler) synthBool(b bool) *jsonValue {
	v := sc.synth(jsonBool)
	v.b = b
	return v
}

func (sc *schemaCompiler) synthString(s string) *jsonValue {
	v := sc.synth(jsonString)
	v.str = s
	return v
}

func (sc *schemaCompiler) synthNumber(n string) *jsonValue {
	v := sc.synth(jsonNumber)
	v.num = n
	return v
}

func (sc *schemaCompiler) synthArray(vs ...*jsonValue) *jsonValue {
	v := sc.synth(jsonArray)
	v.arr = vs
	return v
}

// synthObject makes an object from alternating keys and values.
func (sc *schemaCompiler) synthObject(kv ...any) *jsonValue {
	v := sc.synth(jsonObject)
	for i := 0; i < len(kv); i += 2 {
		v.keys = append(v.keys, kv[i].(string))
		v.vals = append(v.vals, kv[i+1].(*jsonValue))
	}
	return v
}

func (sc *schemaCompiler) synthTypes(names ...string) *jsonValue {
	arr := make([]*jsonValue, len(names))
	for i, n := range names {
		arr[i] = sc.synthString(n)
	}
	return sc.synthObject("type", sc.synthArray(arr...))
}

// anyOfOrOnly is the schema "one of alts" (alts itself when one; false when none).
func (sc *schemaCompiler) anyOfOrOnly(alts []*jsonValue) *jsonValue {
	switch len(alts) {
	case 0:
		return sc.synthBool(false)
	case 1:
		return alts[0]
	}
	return sc.synthObject("anyOf", sc.synthArray(alts...))
}

// negate returns a schema of exactly the instances that fail v.
func (sc *schemaCompiler) negate(v *jsonValue, depth int) (*jsonValue, error) {
	if depth > maxNegateDepth {
		return nil, errf("not: nested too deep")
	}
	if v.kind == jsonBool {
		return sc.synthBool(!v.b), nil
	}
	if v.kind != jsonObject {
		return nil, errf("not must be a schema")
	}
	var alts []*jsonValue
	for i, k := range v.keys {
		if sc.ignores(v, k) {
			continue
		}
		f, err := sc.negateKeyword(v, k, v.vals[i], depth)
		if err != nil {
			return nil, err
		}
		if f != nil {
			alts = append(alts, f)
		}
	}
	return sc.anyOfOrOnly(alts), nil
}

// negateKeyword returns a schema of the instances that fail keyword k of
// schema v (value x), nil when no instance fails it.
func (sc *schemaCompiler) negateKeyword(v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error) {
	if neg := negators[k]; neg != nil {
		return neg(sc, v, k, x, depth)
	}
	switch k {
	case "minContains", "maxContains":
		return nil, nil // read with contains
	case "then", "else", "additionalItems":
		if k != "additionalItems" && v.get("if") == nil || k == "additionalItems" && (v.get("items") == nil || v.get("items").kind != jsonArray) {
			return nil, nil // no effect without if / array-form items
		}
	case "$schema", "$id", "id", "$anchor", "$comment":
		return nil, nil
	}
	if keywordHandlers[k] == nil && !unsupportedKeys[k] {
		return nil, nil // an unknown keyword is an annotation
	}
	return nil, errf("not: cannot negate %q", k)
}

// negators are the keyword negations, by keyword; the families are the
// negate* methods below.
var negators = map[string]func(sc *schemaCompiler, v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error){}

func init() {
	negators["type"] = (*schemaCompiler).negateValue
	negators["enum"] = (*schemaCompiler).negateValue
	negators["const"] = (*schemaCompiler).negateValue
	negators[kwExcluded] = (*schemaCompiler).negateValue
	negators["pattern"] = (*schemaCompiler).negateValue
	negators[kwNotPattern] = (*schemaCompiler).negateValue
	negators["format"] = (*schemaCompiler).negateValue
	negators["minLength"] = (*schemaCompiler).negateBound
	negators["maxLength"] = (*schemaCompiler).negateBound
	negators["minItems"] = (*schemaCompiler).negateBound
	negators["maxItems"] = (*schemaCompiler).negateBound
	negators["minimum"] = (*schemaCompiler).negateBound
	negators["maximum"] = (*schemaCompiler).negateBound
	negators["exclusiveMinimum"] = (*schemaCompiler).negateBound
	negators["exclusiveMaximum"] = (*schemaCompiler).negateBound
	negators["anyOf"] = (*schemaCompiler).negateApplicator
	negators["allOf"] = (*schemaCompiler).negateApplicator
	negators["oneOf"] = (*schemaCompiler).negateApplicator
	negators["not"] = (*schemaCompiler).negateApplicator
	negators["$ref"] = (*schemaCompiler).negateApplicator
	negators["if"] = (*schemaCompiler).negateApplicator
	negators["multipleOf"] = (*schemaCompiler).negateMultiple
	negators["additionalProperties"] = (*schemaCompiler).negateMembers
	negators["patternProperties"] = (*schemaCompiler).negateMembers
	negators["propertyNames"] = (*schemaCompiler).negateMembers
	negators["required"] = (*schemaCompiler).negateContainer
	negators["properties"] = (*schemaCompiler).negateContainer
	negators["items"] = (*schemaCompiler).negateContainer
	negators["contains"] = (*schemaCompiler).negateContainer
}

// negateValue negates the type and value keywords: type, enum/const, pattern, format.
func (sc *schemaCompiler) negateValue(v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error) {
	switch k {
	case "type":
		return sc.negateType(x)
	case "enum", "const", kwExcluded:
		vals := []*jsonValue{x}
		if k != "const" {
			if x.kind != jsonArray {
				return nil, errf("enum must be an array")
			}
			vals = x.arr
		}
		if k == kwExcluded {
			return sc.synthObject("enum", sc.synthArray(vals...)), nil
		}
		return sc.synthObject(kwExcluded, sc.synthArray(vals...)), nil
	case "pattern", kwNotPattern:
		if x.kind != jsonString {
			return nil, errf("pattern must be a string")
		}
		if k == kwNotPattern {
			return sc.synthObject("type", sc.synthString("string"), "pattern", x), nil
		}
		return sc.synthObject("type", sc.synthString("string"), kwNotPattern, x), nil
	case "format":
		if x.kind != jsonString {
			return nil, errf("format must be a string")
		}
		if _, asserted, err := formatRegex(x.str); err != nil {
			return nil, inKeyword("not", err)
		} else if !asserted {
			return nil, nil // an annotation: every instance has it
		}
		// formats compile to subsets of what validators accept: their
		// complement would let valid (so here invalid) strings through
		return nil, errf("not: cannot negate format %q", x.str)
	}
	return nil, errf("not: cannot negate %q", k)
}

// negateBound negates the length, count and number bounds.
func (sc *schemaCompiler) negateBound(v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error) {
	switch k {
	case "minLength", "maxLength", "minItems", "maxItems":
		n, err := asInt(x, k)
		if err != nil {
			return nil, err
		}
		typ := map[string]string{"minLength": "string", "maxLength": "string", "minItems": "array", "maxItems": "array"}[k]
		other := map[string]string{"minLength": "maxLength", "maxLength": "minLength", "minItems": "maxItems", "maxItems": "minItems"}[k]
		if k == "minLength" || k == "minItems" {
			if n == 0 {
				return nil, nil
			}
			n--
		} else {
			n++
		}
		return sc.synthObject("type", sc.synthString(typ), other, sc.synthNumber(strconv.Itoa(n))), nil
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		if x.kind != jsonNumber {
			return nil, errf("not: the draft-04 form of %s is not supported", k)
		}
		if ex := v.get(map[string]string{"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}[k]); ex != nil && ex.kind == jsonBool {
			return nil, errf("not: the draft-04 form of %s is not supported", k)
		}
		flip := map[string]string{"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
			"exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}[k]
		return sc.synthObject("type", sc.synthString("number"), flip, x), nil
	}
	return nil, errf("not: cannot negate %q", k)
}

// negateApplicator negates the applicators: anyOf, allOf, oneOf, not, $ref, if/then/else.
func (sc *schemaCompiler) negateApplicator(v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error) {
	switch k {
	case "anyOf", "allOf":
		if x.kind != jsonArray || len(x.arr) == 0 {
			return nil, errf("%s must be a non-empty array", k)
		}
		var negs []*jsonValue
		for _, s := range x.arr {
			n, err := sc.negate(s, depth+1)
			if err != nil {
				return nil, err
			}
			negs = append(negs, n)
		}
		if k == "anyOf" { // fails every branch
			return sc.synthObject("allOf", sc.synthArray(negs...)), nil
		}
		return sc.anyOfOrOnly(negs), nil
	case "oneOf":
		// fails when no branch holds, or two do
		if x.kind != jsonArray || len(x.arr) == 0 {
			return nil, errf("oneOf must be a non-empty array")
		}
		var negs, alts []*jsonValue
		for _, b := range x.arr {
			n, err := sc.negate(b, depth+1)
			if err != nil {
				return nil, err
			}
			negs = append(negs, n)
		}
		alts = append(alts, sc.synthObject("allOf", sc.synthArray(negs...)))
		for i := range x.arr {
			for j := i + 1; j < len(x.arr); j++ {
				alts = append(alts, sc.synthObject("allOf", sc.synthArray(x.arr[i], x.arr[j])))
			}
		}
		return sc.anyOfOrOnly(alts), nil
	case "not":
		return x, nil
	case "$ref":
		if x.kind != jsonString {
			return nil, errf("$ref must be a string")
		}
		for _, sib := range v.keys {
			if sib != "$ref" && !sc.ignores(v, sib) {
				// drafts up to 7 ignore them, later ones and them: the
				// compiler ands them, which negated would be too loose
				return nil, errf("not: cannot negate $ref with sibling keywords")
			}
		}
		t, err := sc.resolveRef(v, x.str)
		if err != nil {
			return nil, err
		}
		return sc.negate(t, depth+1)
	case "if":
		then, els := v.get("then"), v.get("else")
		if then == nil && els == nil {
			return nil, nil
		}
		// fails when (if and not then) or (not if and not else)
		negIf, err := sc.negate(x, depth+1)
		if err != nil {
			return nil, err
		}
		var alts []*jsonValue
		for _, branch := range []struct{ cond, body *jsonValue }{{x, then}, {negIf, els}} {
			if branch.body == nil {
				continue
			}
			negBody, err := sc.negate(branch.body, depth+1)
			if err != nil {
				return nil, err
			}
			alts = append(alts, sc.synthObject("allOf", sc.synthArray(branch.cond, negBody)))
		}
		return sc.anyOfOrOnly(alts), nil
	}
	return nil, errf("not: cannot negate %q", k)
}

// negateContainer negates the object and array keywords that name members or items.
func (sc *schemaCompiler) negateContainer(v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error) {
	switch k {
	case "required":
		if x.kind != jsonArray {
			return nil, errf("required must be an array")
		}
		var alts []*jsonValue
		for _, n := range x.arr {
			if n.kind != jsonString {
				return nil, errf("required entries must be strings")
			}
			alts = append(alts, sc.synthObject("type", sc.synthString("object"),
				"properties", sc.synthObject(n.str, sc.synthBool(false))))
		}
		if len(alts) == 0 {
			return nil, nil
		}
		return sc.anyOfOrOnly(alts), nil
	case "properties":
		if x.kind != jsonObject {
			return nil, errf("properties must be an object")
		}
		var alts []*jsonValue
		for i, name := range x.keys {
			n, err := sc.negate(x.vals[i], depth+1)
			if err != nil {
				return nil, err
			}
			if n.kind == jsonBool && !n.b {
				continue // every value passes
			}
			alts = append(alts, sc.synthObject("type", sc.synthString("object"),
				"required", sc.synthArray(sc.synthString(name)), "properties", sc.synthObject(name, n)))
		}
		if len(alts) == 0 {
			return nil, nil
		}
		return sc.anyOfOrOnly(alts), nil
	case "items":
		if !isSchema(x) {
			return nil, errf("not: cannot negate items of the array form")
		}
		// some item fails it
		n, err := sc.negate(x, depth+1)
		if err != nil {
			return nil, err
		}
		if n.kind == jsonBool && !n.b {
			return nil, nil
		}
		if v.get("prefixItems") != nil {
			return nil, errf("not: cannot negate items after prefixItems")
		}
		return sc.synthObject("type", sc.synthString("array"), "contains", n), nil
	case "contains":
		if v.get("minContains") != nil || v.get("maxContains") != nil {
			return nil, errf("not: cannot negate contains with minContains/maxContains")
		}
		n, err := sc.negate(x, depth+1)
		if err != nil {
			return nil, err
		}
		return sc.synthObject("type", sc.synthString("array"), "items", n), nil
	}
	return nil, errf("not: cannot negate %q", k)
}

// negateMultiple negates an integer multipleOf k: an integer k does not
// divide, or a number with a fraction (no multiple of an integer has one);
// like every number keyword it holds for other types, so its negation
// wants a number. A fractional multipleOf is refused.
func (sc *schemaCompiler) negateMultiple(_ *jsonValue, _ string, x *jsonValue, _ int) (*jsonValue, error) {
	r, ok := numRat(x.num)
	if x.kind != jsonNumber || !ok || r.Sign() <= 0 {
		return nil, errf("multipleOf must be a positive number")
	}
	if !r.IsInt() {
		return nil, errf("not: cannot negate multipleOf %s (only integer ones)", r.RatString())
	}
	return sc.anyOfOrOnly([]*jsonValue{
		sc.synthObject("type", sc.synthString("integer"), kwNotMultiple, x),
		sc.synthObject("type", sc.synthString("number"), kwFractional, sc.synthBool(true)),
	}), nil
}

// negateType is the schema of the instances whose type is not in x.
func (sc *schemaCompiler) negateType(x *jsonValue) (*jsonValue, error) {
	var names []string
	switch x.kind {
	case jsonString:
		names = []string{x.str}
	case jsonArray:
		for _, e := range x.arr {
			if e.kind != jsonString {
				return nil, errf("type entries must be strings")
			}
			names = append(names, e.str)
		}
	default:
		return nil, errf("type must be a string or array")
	}
	var alts []*jsonValue
	if slices.Contains(names, "integer") && !slices.Contains(names, "number") {
		// "not an integer" keeps the numbers with a fraction (written
		// without an exponent: 1.5e1 is 15, so fewer texts, never more)
		alts = append(alts, sc.synthObject("type", sc.synthString("number"), kwFractional, sc.synthBool(true)))
	}
	var rest []string
	for _, n := range []string{"null", "boolean", "object", "array", "string", "number"} {
		if !slices.Contains(names, n) && !(n == "number" && slices.Contains(names, "integer")) {
			rest = append(rest, n)
		}
	}
	if len(rest) > 0 {
		alts = append(alts, sc.synthTypes(rest...))
	}
	return sc.anyOfOrOnly(alts), nil
}

// negateMembers negates the keywords about members other than the named
// ones: some member fails them. additionalProperties fails on a key outside
// properties and patternProperties whose value fails its schema;
// patternProperties on a key matching a pattern whose value fails that
// pattern's schema; propertyNames on a key that fails the name schema.
func (sc *schemaCompiler) negateMembers(v *jsonValue, k string, x *jsonValue, depth int) (*jsonValue, error) {
	witness := func(kv ...any) *jsonValue {
		return sc.synthObject("type", sc.synthString("object"), kwWitness, sc.synthObject(kv...))
	}
	isFalse := func(j *jsonValue) bool { return j.kind == jsonBool && !j.b }
	switch k {
	case "additionalProperties":
		if !isSchema(x) {
			return nil, errf("additionalProperties must be a schema")
		}
		n, err := sc.negate(x, depth+1)
		if err != nil || isFalse(n) {
			return nil, err // every value passes: nothing fails the keyword
		}
		var names, pats []*jsonValue
		if p := v.get("properties"); p != nil && p.kind == jsonObject {
			for _, name := range p.keys {
				names = append(names, sc.synthString(name))
			}
		}
		if p := v.get("patternProperties"); p != nil && p.kind == jsonObject {
			for _, pat := range p.keys {
				pats = append(pats, sc.synthString(pat))
			}
		}
		return witness("names", sc.synthArray(names...), "patterns", sc.synthArray(pats...), "value", n), nil
	case "patternProperties":
		if x.kind != jsonObject {
			return nil, errf("patternProperties must be an object")
		}
		var alts []*jsonValue
		for i, pat := range x.keys {
			n, err := sc.negate(x.vals[i], depth+1)
			if err != nil {
				return nil, err
			}
			if !isFalse(n) {
				alts = append(alts, witness("pattern", sc.synthString(pat), "value", n))
			}
		}
		if len(alts) == 0 {
			return nil, nil
		}
		return sc.anyOfOrOnly(alts), nil
	case "propertyNames":
		if !isSchema(x) {
			return nil, errf("propertyNames must be a schema")
		}
		n, err := sc.negate(x, depth+1)
		if err != nil || isFalse(n) {
			return nil, err
		}
		return witness("keySchema", n, "value", sc.synthBool(true)), nil
	}
	return nil, errf("not: cannot negate %q", k)
}
