package grammar

import "slices"

// unsupportedKeys are validation keywords this compiler cannot enforce;
// any other unknown keyword is an annotation to validators too.
var unsupportedKeys = map[string]bool{
	"not": true, "dependencies": true, "dependentRequired": true, "dependentSchemas": true,
	"uniqueItems": true, "contains": true, "minContains": true, "maxContains": true,
	"unevaluatedProperties": true, "unevaluatedItems": true, "$dynamicRef": true, "$recursiveRef": true,
	"then": true, "else": true,
}

// parseOne reads one schema object's own keywords (following $ref and allOf).
func (sc *schemaCompiler) parseOne(j *jsonValue) (*parsed, error) {
	if p, ok := sc.one[j]; ok {
		if p.busy {
			return nil, errf("schema refers to itself without consuming input")
		}
		return p, p.err
	}
	p := &parsed{busy: true}
	sc.one[j] = p
	s, groups, oneOf, err := sc.parseKeywords(j)
	p.s, p.groups, p.oneOf, p.err, p.busy = s, groups, oneOf, err, false
	return p, err
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

func (sc *schemaCompiler) parseKeywords(j *jsonValue) (*constraints, [][]*jsonValue, [][]*jsonValue, error) {
	s := newConstraints()
	if j.kind == jsonBool {
		if !j.b {
			s.types = 0
		}
		return s, nil, nil, nil
	}
	var groups, oneOfs [][]*jsonValue
	for i, k := range j.keys {
		v := j.vals[i]
		if annotationKeys[k] {
			continue
		}
		if unsupportedKeys[k] {
			if k == "uniqueItems" && v.kind == jsonBool && !v.b {
				continue
			}
			if (k == "then" || k == "else") && j.get("if") == nil {
				continue
			}
			return nil, nil, nil, errf("unsupported keyword %q", k)
		}
		switch k {
		case "$ref":
			if v.kind != jsonString {
				return nil, nil, nil, errf("$ref must be a string")
			}
			t, err := sc.resolveRef(j, v.str)
			if err != nil {
				return nil, nil, nil, err
			}
			groups = append(groups, []*jsonValue{t})
		case "allOf":
			l, err := sc.subList(j, k)
			if err != nil {
				return nil, nil, nil, err
			}
			for _, x := range l {
				groups = append(groups, []*jsonValue{x})
			}
		case "anyOf":
			l, err := sc.subList(j, k)
			if err != nil {
				return nil, nil, nil, err
			}
			groups = append(groups, l)
		case "oneOf":
			l, err := sc.subList(j, k)
			if err != nil {
				return nil, nil, nil, err
			}
			groups = append(groups, l)
			oneOfs = append(oneOfs, l)
		case "if":
			if j.get("then") != nil || j.get("else") != nil {
				return nil, nil, nil, errf("unsupported keyword %q", "if")
			}
		case "type":
			var names []string
			switch v.kind {
			case jsonString:
				names = []string{v.str}
			case jsonArray:
				for _, e := range v.arr {
					if e.kind != jsonString {
						return nil, nil, nil, errf("type entries must be strings")
					}
					names = append(names, e.str)
				}
			default:
				return nil, nil, nil, errf("type must be a string or array")
			}
			var t uint8
			for _, n := range names {
				switch n {
				case "null":
					t |= tNull
				case "boolean":
					t |= tBool
				case "object":
					t |= tObj
				case "array":
					t |= tArr
				case "string":
					t |= tStr
				case "integer":
					t |= tInt
				case "number":
					t |= tInt | tNum
				default:
					return nil, nil, nil, errf("unknown type %q", n)
				}
			}
			s.types &= t
		case "enum":
			if v.kind != jsonArray {
				return nil, nil, nil, errf("enum must be an array")
			}
			s.hasEnum, s.enum = true, v.arr
		case "const":
			s.hasEnum, s.enum = true, []*jsonValue{v}
		case "properties":
			if v.kind != jsonObject {
				return nil, nil, nil, errf("properties must be an object")
			}
			for pi, name := range v.keys {
				if !isSchema(v.vals[pi]) {
					return nil, nil, nil, errf("property %q is not a schema", name)
				}
				s.properties = append(s.properties, prop{name, []*jsonValue{v.vals[pi]}})
			}
		case "required":
			if v.kind != jsonArray {
				return nil, nil, nil, errf("required must be an array")
			}
			for _, e := range v.arr {
				if e.kind != jsonString {
					return nil, nil, nil, errf("required entries must be strings")
				}
				if !slices.Contains(s.required, e.str) {
					s.required = append(s.required, e.str)
				}
			}
		case "additionalProperties":
			if !isSchema(v) {
				return nil, nil, nil, errf("additionalProperties must be a schema")
			}
			if v.kind == jsonBool && !v.b {
				s.noAdditional = true
			} else if !isTrivial([]*jsonValue{v}) {
				s.additional = []*jsonValue{v}
			}
		case "patternProperties":
			if v.kind != jsonObject {
				return nil, nil, nil, errf("patternProperties must be an object")
			}
			for pi, pat := range v.keys {
				if !isSchema(v.vals[pi]) {
					return nil, nil, nil, errf("patternProperties entries must be schemas")
				}
				s.patternProps = append(s.patternProps, patternProp{pat, []*jsonValue{v.vals[pi]}})
			}
		case "propertyNames":
			if !isSchema(v) {
				return nil, nil, nil, errf("propertyNames must be a schema")
			}
			if !isTrivial([]*jsonValue{v}) {
				s.propertyNames = []*jsonValue{v}
			}
		case "minProperties", "maxProperties", "minItems", "maxItems", "minLength", "maxLength":
			n, err := asInt(v, k)
			if err != nil {
				return nil, nil, nil, err
			}
			switch k {
			case "minProperties":
				s.minProps = n
			case "maxProperties":
				s.maxProps = n
			case "minItems":
				s.minItems = n
			case "maxItems":
				s.maxItems = n
			case "minLength":
				s.minLen = n
			case "maxLength":
				s.maxLen = n
			}
		case "items":
			if v.kind == jsonArray {
				for _, e := range v.arr {
					if !isSchema(e) {
						return nil, nil, nil, errf("items entries must be schemas")
					}
					s.prefix = append(s.prefix, []*jsonValue{e})
				}
				if ai := j.get("additionalItems"); ai != nil {
					if !isSchema(ai) {
						return nil, nil, nil, errf("additionalItems must be a schema")
					}
					if ai.kind == jsonBool && !ai.b {
						s.noMoreItems = true
					} else if !isTrivial([]*jsonValue{ai}) {
						s.items = []*jsonValue{ai}
					}
				}
			} else if isSchema(v) {
				if v.kind == jsonBool && !v.b {
					s.noMoreItems = true
				} else if !isTrivial([]*jsonValue{v}) {
					s.items = []*jsonValue{v}
				}
			} else {
				return nil, nil, nil, errf("items must be a schema or array")
			}
		case "prefixItems":
			if v.kind != jsonArray {
				return nil, nil, nil, errf("prefixItems must be an array")
			}
			for _, e := range v.arr {
				if !isSchema(e) {
					return nil, nil, nil, errf("prefixItems entries must be schemas")
				}
				s.prefix = append(s.prefix, []*jsonValue{e})
			}
		case "additionalItems":
			// handled with array-form items; alone it has no effect
		case "pattern":
			if v.kind != jsonString {
				return nil, nil, nil, errf("pattern must be a string")
			}
			s.patterns = append(s.patterns, v.str)
		case "format":
			if v.kind != jsonString {
				return nil, nil, nil, errf("format must be a string")
			}
			s.formats = append(s.formats, v.str)
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			if v.kind == jsonBool {
				continue // draft 4 modifier, read below
			}
			if v.kind != jsonNumber {
				return nil, nil, nil, errf("%s must be a number", k)
			}
			r, _ := numRat(v.num)
			switch k {
			case "minimum":
				ex := false
				if e := j.get("exclusiveMinimum"); e != nil && e.kind == jsonBool {
					ex = e.b
				}
				s.setLo(r, ex)
			case "maximum":
				ex := false
				if e := j.get("exclusiveMaximum"); e != nil && e.kind == jsonBool {
					ex = e.b
				}
				s.setHi(r, ex)
			case "exclusiveMinimum":
				s.setLo(r, true)
			case "exclusiveMaximum":
				s.setHi(r, true)
			}
		case "multipleOf":
			if v.kind != jsonNumber {
				return nil, nil, nil, errf("multipleOf must be a number")
			}
			r, _ := numRat(v.num)
			if r.Sign() <= 0 {
				return nil, nil, nil, errf("multipleOf must be positive")
			}
			s.mults = append(s.mults, r)
		}
	}
	if sc.c.opts.Strict {
		sc.closeImplicit(j, s)
	}
	return s, groups, oneOfs, nil
}

// closeImplicit applies Options.Strict to one schema object: listed properties without a word
// about other keys allow no other keys, and a tuple without a tail schema allows no more items.
// A required name outside properties keeps the object open (closing it would leave no valid
// document).
func (sc *schemaCompiler) closeImplicit(j *jsonValue, s *constraints) {
	if j.get("properties") != nil && j.get("additionalProperties") == nil && j.get("patternProperties") == nil {
		listed := true
		if props := j.get("properties"); props.kind == jsonObject {
			for _, r := range s.required {
				listed = listed && props.get(r) != nil
			}
		}
		if listed {
			s.noAdditional = true
		}
	}
	if items := j.get("items"); (j.get("prefixItems") != nil && items == nil) ||
		(items != nil && items.kind == jsonArray && j.get("additionalItems") == nil) {
		s.noMoreItems = true
	}
}
