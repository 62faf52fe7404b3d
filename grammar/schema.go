package grammar

import (
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// Type bits. tInt without tNum means "integers only"; tNum implies tInt.
const (
	tNull uint8 = 1 << iota
	tBool
	tObj
	tArr
	tStr
	tInt
	tNum
	tAll = tNull | tBool | tObj | tArr | tStr | tInt | tNum
)

// constraints is one conjunction of constraints with its disjunctions distributed
// away; subschemas stay unexpanded (lists of *jsonValue that must all hold) so
// recursive schemas compile to rule calls.
type constraints struct {
	types         uint8
	hasEnum       bool
	enum          []*jsonValue
	properties    []prop
	forbidden     map[string]bool
	required      []string
	additional    []*jsonValue
	noAdditional  bool
	patternProps  []patternProp
	propertyNames []*jsonValue
	minProps      int
	maxProps      int
	prefix        [][]*jsonValue
	items         []*jsonValue
	noMoreItems   bool
	minItems      int
	maxItems      int
	minLen        int
	maxLen        int
	patterns      []string
	formats       []string
	lo, hi        *big.Rat
	loEx          bool
	hiEx          bool
	mults         []*big.Rat
}

type prop struct {
	name string
	conj []*jsonValue
}

type patternKey struct {
	d    *chardfa.DFA
	conj []*jsonValue
}

type patternProp struct {
	pat  string
	conj []*jsonValue
}

func newConstraints() *constraints {
	return &constraints{types: tAll, maxProps: -1, maxItems: -1, maxLen: -1}
}

func (s *constraints) clone() *constraints {
	c := *s
	c.enum = slices.Clone(s.enum)
	c.properties = slices.Clone(s.properties)
	c.forbidden = map[string]bool{}
	for k := range s.forbidden {
		c.forbidden[k] = true
	}
	c.required = slices.Clone(s.required)
	c.additional = slices.Clone(s.additional)
	c.patternProps = slices.Clone(s.patternProps)
	c.propertyNames = slices.Clone(s.propertyNames)
	c.prefix = slices.Clone(s.prefix)
	c.items = slices.Clone(s.items)
	c.patterns = slices.Clone(s.patterns)
	c.formats = slices.Clone(s.formats)
	c.mults = slices.Clone(s.mults)
	return &c
}

type schemaCompiler struct {
	c       *Compiler
	b       *builder
	root    *jsonValue
	flex    bool
	ids     map[string]*jsonValue
	dupIDs  map[string]bool // ids more than one schema claims
	anchors map[string]*jsonValue
	base    map[*jsonValue]string
	rules   map[string]int32
	queue   []queued
	anyRule int32
	one     map[*jsonValue]*parsed
	depth   int
	// strings: the char automaton of each string constraint set seen, and
	// the rule large ones are shared through (see strFrag)
	strSets map[string]*strEnt
}

type queued struct {
	rule int32
	conj []*jsonValue
}

type parsed struct {
	s      *constraints
	groups [][]*jsonValue
	oneOf  [][]*jsonValue
	err    error
	busy   bool
}

func (c *Compiler) compileSchema(text string) (*Grammar, error) {
	// Each described level takes up to two schema levels ("properties" then the name).
	root, err := parseJSONValue([]byte(text), 2*c.opts.Limits.MaxDepth+2)
	if err != nil {
		return nil, errf("invalid schema JSON: %v", err)
	}
	if root.kind != jsonObject && root.kind != jsonBool {
		return nil, errf("invalid schema: not an object or boolean")
	}
	if err := validateSchemaDoc(root, text); err != nil {
		return nil, err
	}
	b := c.newBuilder()
	sc := &schemaCompiler{c: c, b: b, root: root, flex: c.opts.Whitespace == Flexible,
		ids: map[string]*jsonValue{}, dupIDs: map[string]bool{}, anchors: map[string]*jsonValue{}, base: map[*jsonValue]string{},
		rules: map[string]int32{}, anyRule: -1, one: map[*jsonValue]*parsed{}}
	sc.index(root, "urn:grammar:root", 0)
	b.g.rules = []int32{-1}
	top := b.seq(sc.ws(), b.call(sc.ruleFor([]*jsonValue{root})), sc.ws())
	for len(sc.queue) > 0 {
		q := sc.queue[0]
		sc.queue = sc.queue[1:]
		f, err := sc.value(q.conj)
		if err != nil {
			return nil, err
		}
		if b.over {
			return nil, errf("schema compiles to more than %d automaton nodes", c.opts.Limits.MaxStates)
		}
		b.g.nodes[f.out].final = true
		b.g.rules[q.rule] = f.in
	}
	return c.finish(b, top)
}

func (sc *schemaCompiler) ws() fragment {
	if !sc.flex {
		return sc.b.empty()
	}
	n := sc.b.node()
	for _, c := range []byte{' ', '\t', '\n', '\r'} {
		sc.b.edge(n, c, c, n)
	}
	return fragment{n, n}
}

// index records $id and $anchor locations and each schema's base URI.
func (sc *schemaCompiler) index(j *jsonValue, base string, depth int) {
	if depth > 200 {
		return
	}
	switch j.kind {
	case jsonObject:
		if id := j.get("$id"); id != nil && id.kind == jsonString {
			base = resolveURI(base, id.str)
			sc.addID(stripFrag(base), j)
		} else if id := j.get("id"); id != nil && id.kind == jsonString && !strings.HasPrefix(id.str, "#") {
			base = resolveURI(base, id.str)
			sc.addID(stripFrag(base), j)
		}
		if a := j.get("$anchor"); a != nil && a.kind == jsonString {
			sc.anchors[stripFrag(base)+"#"+a.str] = j
		}
		if id := j.get("id"); id != nil && id.kind == jsonString && strings.HasPrefix(id.str, "#") {
			sc.anchors[stripFrag(base)+id.str] = j
		}
		sc.base[j] = base
		if depth == 0 {
			sc.addID(stripFrag(base), j)
		}
		for _, v := range j.vals {
			sc.index(v, base, depth+1)
		}
	case jsonArray:
		for _, v := range j.arr {
			sc.index(v, base, depth+1)
		}
	}
}

// inKeyword names the schema keyword a compile error comes from.
func inKeyword(kw string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return errf("%s: %s", kw, e.Reason)
	}
	return fmt.Errorf("%s: %w", kw, err)
}

// addID records j as the schema identified by uri. Generated schemas often
// repeat an $id (e.g. "#" or a path copied into several properties); that
// is harmless unless a $ref names it, which resolveRef then refuses.
func (sc *schemaCompiler) addID(uri string, j *jsonValue) {
	if prev := sc.ids[uri]; prev != nil && prev != j {
		sc.dupIDs[uri] = true
	}
	sc.ids[uri] = j
}

func stripFrag(u string) string {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		return u[:i]
	}
	return u
}

func resolveURI(base, ref string) string {
	b, err := url.Parse(base)
	if err != nil {
		return ref
	}
	r, err := url.Parse(ref)
	if err != nil {
		return ref
	}
	return b.ResolveReference(r).String()
}

func (sc *schemaCompiler) resolveRef(from *jsonValue, ref string) (*jsonValue, error) {
	base := sc.base[from]
	if base == "" {
		base = "urn:grammar:root"
	}
	full := resolveURI(base, ref)
	if strings.HasPrefix(ref, "#") {
		full = stripFrag(base) + ref
	}
	doc := sc.ids[stripFrag(full)]
	if doc == nil {
		return nil, errf("unresolvable $ref %q", ref)
	}
	if sc.dupIDs[stripFrag(full)] {
		return nil, errf("$ref %q: more than one schema has the $id %q", ref, stripFrag(full))
	}
	frag := ""
	if i := strings.IndexByte(full, '#'); i >= 0 {
		frag = full[i+1:]
	}
	if frag == "" {
		return doc, nil
	}
	if !strings.HasPrefix(frag, "/") {
		if a := sc.anchors[stripFrag(full)+"#"+frag]; a != nil {
			return a, nil
		}
		return nil, errf("unresolvable $ref %q", ref)
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil, errf("bad $ref %q", ref)
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur.kind {
		case jsonObject:
			cur = cur.get(tok)
		case jsonArray:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur.arr) {
				return nil, errf("unresolvable $ref %q", ref)
			}
			cur = cur.arr[i]
		default:
			cur = nil
		}
		if cur == nil {
			return nil, errf("unresolvable $ref %q", ref)
		}
	}
	if cur.kind != jsonObject && cur.kind != jsonBool {
		return nil, errf("$ref %q does not point to a schema", ref)
	}
	return cur, nil
}

func conjKey(conj []*jsonValue) string {
	ids := make([]int, len(conj))
	for i, j := range conj {
		ids[i] = int(j.id)
	}
	sort.Ints(ids)
	ids = slices.Compact(ids)
	var sb strings.Builder
	for _, x := range ids {
		sb.WriteString(strconv.Itoa(x))
		sb.WriteByte(',')
	}
	return sb.String()
}

// ruleFor returns the rule matching one JSON value valid against all of conj.
func (sc *schemaCompiler) ruleFor(conj []*jsonValue) int32 {
	if len(conj) == 0 || isTrivial(conj) {
		return sc.anyValueRule()
	}
	k := conjKey(conj)
	if r, ok := sc.rules[k]; ok {
		return r
	}
	r := int32(len(sc.b.g.rules))
	sc.b.g.rules = append(sc.b.g.rules, -1)
	sc.rules[k] = r
	sc.queue = append(sc.queue, queued{r, conj})
	return r
}

func isTrivial(conj []*jsonValue) bool {
	for _, j := range conj {
		if j.kind == jsonBool && j.b {
			continue
		}
		if j.kind == jsonObject {
			ok := true
			for _, k := range j.keys {
				if !annotationKeys[k] {
					ok = false
				}
			}
			if ok {
				continue
			}
		}
		return false
	}
	return true
}

var annotationKeys = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"$schema": true, "$id": true, "id": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "$anchor": true, "$dynamicAnchor": true, "$recursiveAnchor": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true, "$vocabulary": true,
	"example": true, "discriminator": true, "nullable": true, "xml": true, "externalDocs": true,
}

// unsupportedKeys are validation keywords this compiler cannot enforce;
// any other unknown keyword is an annotation to validators too.
var unsupportedKeys = map[string]bool{
	"not": true, "dependencies": true, "dependentRequired": true, "dependentSchemas": true,
	"uniqueItems": true, "contains": true, "minContains": true, "maxContains": true,
	"unevaluatedProperties": true, "unevaluatedItems": true, "$dynamicRef": true, "$recursiveRef": true,
	"then": true, "else": true,
}

func (sc *schemaCompiler) anyValueRule() int32 {
	if sc.anyRule >= 0 {
		return sc.anyRule
	}
	b := sc.b
	r := int32(len(b.g.rules))
	b.g.rules = append(b.g.rules, -1)
	sc.anyRule = r
	ws := sc.ws
	val := func() fragment { return b.call(r) }
	arr := b.alt(
		b.seq(b.lit("["), ws(), b.lit("]")),
		b.seq(b.lit("["), ws(), b.star(b.seq(val(), ws(), b.lit(","), ws())), val(), ws(), b.lit("]")),
	)
	member := func() fragment { return b.seq(b.freeString(), ws(), b.lit(":"), ws(), val()) }
	obj := b.alt(
		b.seq(b.lit("{"), ws(), b.lit("}")),
		b.seq(b.lit("{"), ws(), b.star(b.seq(member(), ws(), b.lit(","), ws())), member(), ws(), b.lit("}")),
	)
	f := b.alt(b.lit("null"), b.lit("true"), b.lit("false"), sc.numberAny(), b.freeString(), arr, obj)
	b.g.nodes[f.out].final = true
	b.g.rules[r] = f.in
	return r
}

func (sc *schemaCompiler) numberAny() fragment {
	b := sc.b
	intPart := b.alt(b.lit("0"), b.seq(b.lit19(), b.star(b.digit())))
	frac := b.opt(b.seq(b.lit("."), b.digit(), b.star(b.digit())))
	exp := b.opt(b.seq(b.byteSet("eE"), b.opt(b.byteSet("+-")), b.digit(), b.star(b.digit())))
	return b.seq(b.opt(b.lit("-")), intPart, frac, exp)
}

func (b *builder) digit() fragment {
	in, out := b.node(), b.node()
	b.edge(in, '0', '9', out)
	return fragment{in, out}
}

func (b *builder) lit19() fragment {
	in, out := b.node(), b.node()
	b.edge(in, '1', '9', out)
	return fragment{in, out}
}

func (b *builder) byteSet(s string) fragment {
	in, out := b.node(), b.node()
	for i := 0; i < len(s); i++ {
		b.edge(in, s[i], s[i], out)
	}
	return fragment{in, out}
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

func (s *constraints) setLo(r *big.Rat, ex bool) {
	if s.lo == nil || r.Cmp(s.lo) > 0 || (r.Cmp(s.lo) == 0 && ex) {
		s.lo, s.loEx = r, ex
	}
}

func (s *constraints) setHi(r *big.Rat, ex bool) {
	if s.hi == nil || r.Cmp(s.hi) < 0 || (r.Cmp(s.hi) == 0 && ex) {
		s.hi, s.hiEx = r, ex
	}
}

const maxDisjuncts = 128

// expand turns a conjunction of schemas into disjuncts without anyOf/oneOf.
func (sc *schemaCompiler) expand(conj []*jsonValue) ([]*constraints, error) {
	sc.depth++
	defer func() { sc.depth-- }()
	if sc.depth > 64 {
		return nil, errf("schema nesting of $ref/allOf/anyOf is too deep")
	}
	res := []*constraints{newConstraints()}
	for _, j := range conj {
		p, err := sc.parseOne(j)
		if err != nil {
			return nil, err
		}
		for _, o := range p.oneOf {
			if err := sc.checkDisjoint(o); err != nil {
				return nil, err
			}
		}
		for i := range res {
			if res[i], err = merge(res[i], p.s); err != nil {
				return nil, err
			}
		}
		for _, g := range p.groups {
			var next []*constraints
			for _, alt := range g {
				subs, err := sc.expand([]*jsonValue{alt})
				if err != nil {
					return nil, err
				}
				for _, r := range res {
					for _, a := range subs {
						m, err := merge(r, a)
						if err != nil {
							return nil, err
						}
						if m.types != 0 {
							next = append(next, m)
						}
					}
				}
				if len(next) > maxDisjuncts {
					return nil, errf("anyOf/oneOf combinations exceed %d alternatives", maxDisjuncts)
				}
			}
			res = next
		}
	}
	return res, nil
}

// checkDisjoint accepts oneOf only when at most one branch can match any
// instance; otherwise treating it as anyOf could accept invalid documents.
func (sc *schemaCompiler) checkDisjoint(alts []*jsonValue) error {
	if len(alts) < 2 {
		return nil
	}
	var all [][]*constraints
	for _, a := range alts {
		e, err := sc.expand([]*jsonValue{a})
		if err != nil {
			return err
		}
		all = append(all, e)
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			for _, x := range all[i] {
				for _, y := range all[j] {
					if !disjoint(x, y) {
						return errf("oneOf branches %d and %d may both match", i, j)
					}
				}
			}
		}
	}
	return nil
}

func effTypes(s *constraints) uint8 {
	t := s.types
	if s.hasEnum {
		var et uint8
		for _, v := range s.enum {
			et |= kindType(v)
		}
		t &= et
	}
	return t
}

func kindType(v *jsonValue) uint8 {
	switch v.kind {
	case jsonNull:
		return tNull
	case jsonBool:
		return tBool
	case jsonObject:
		return tObj
	case jsonArray:
		return tArr
	case jsonString:
		return tStr
	}
	if isIntegral(v.num) {
		return tInt | tNum
	}
	return tNum
}

func disjoint(x, y *constraints) bool {
	tx, ty := effTypes(x), effTypes(y)
	common := tx & ty
	if tx&tNum != 0 && ty&tInt != 0 || ty&tNum != 0 && tx&tInt != 0 {
		common |= tInt
	}
	if common == 0 {
		return true
	}
	if x.hasEnum && y.hasEnum {
		return !sharesValue(x.enum, y.enum)
	}
	if common&^tObj != 0 {
		return false
	}
	// Objects: a property required by one that the other forbids, or a
	// required property whose const/enum values differ.
	for _, pair := range [][2]*constraints{{x, y}, {y, x}} {
		a, b := pair[0], pair[1]
		for _, r := range a.required {
			if b.propForbidden(r) {
				return true
			}
		}
	}
	for _, r := range x.required {
		if !slices.Contains(y.required, r) {
			continue
		}
		ex, ey := constOf(x, r), constOf(y, r)
		if ex == nil || ey == nil {
			continue
		}
		if !sharesValue(ex, ey) {
			return true
		}
	}
	return false
}

func (s *constraints) propForbidden(name string) bool {
	if s.forbidden[name] {
		return true
	}
	for _, p := range s.properties {
		if p.name == name {
			for _, j := range p.conj {
				if j.kind == jsonBool && !j.b {
					return true
				}
			}
			return false
		}
	}
	return s.noAdditional && len(s.patternProps) == 0
}

func constOf(s *constraints, name string) []*jsonValue {
	for _, p := range s.properties {
		if p.name != name {
			continue
		}
		for _, j := range p.conj {
			if j.kind != jsonObject {
				continue
			}
			if c := j.get("const"); c != nil {
				return []*jsonValue{c}
			}
			if e := j.get("enum"); e != nil && e.kind == jsonArray {
				return e.arr
			}
		}
	}
	return nil
}

// valueSet is the set of vs's compact serializations: values are equal here when they
// serialize alike, as the grammar compares enum and const values.
func valueSet(vs []*jsonValue) map[string]bool {
	set := make(map[string]bool, len(vs))
	for _, v := range vs {
		set[string(appendCompact(nil, v))] = true
	}
	return set
}

// sharesValue reports whether a and b have a value in common.
func sharesValue(a, b []*jsonValue) bool {
	in := valueSet(a)
	for _, v := range b {
		if in[string(appendCompact(nil, v))] {
			return true
		}
	}
	return false
}

// merge intersects two constraint sets.
func merge(a, b *constraints) (*constraints, error) {
	m := a.clone()
	m.types &= b.types
	if b.hasEnum {
		if !m.hasEnum {
			m.hasEnum, m.enum = true, slices.Clone(b.enum)
		} else {
			in := valueSet(b.enum)
			var keep []*jsonValue
			for _, x := range m.enum {
				if in[string(appendCompact(nil, x))] {
					keep = append(keep, x)
				}
			}
			m.enum = keep
		}
	}
	// objects
	if len(a.patternProps) > 0 && b.hasObjectKeywords() || len(b.patternProps) > 0 && a.hasObjectKeywords() {
		return nil, errf("patternProperties combined with other object constraints is not supported")
	}
	if len(a.propertyNames) > 0 && b.hasObjectKeywords() || len(b.propertyNames) > 0 && a.hasObjectKeywords() {
		return nil, errf("propertyNames combined with other object constraints is not supported")
	}
	m.patternProps = append(m.patternProps, b.patternProps...)
	m.propertyNames = append(m.propertyNames, b.propertyNames...)
	conjIn := func(s *constraints, name string) ([]*jsonValue, bool) {
		if s.forbidden[name] {
			return nil, false
		}
		for _, p := range s.properties {
			if p.name == name {
				return p.conj, true
			}
		}
		if s.noAdditional {
			return nil, false
		}
		return s.additional, true
	}
	var props []prop
	seen := map[string]bool{}
	for _, p := range append(slices.Clone(a.properties), b.properties...) {
		if seen[p.name] {
			continue
		}
		seen[p.name] = true
		ca, oka := conjIn(a, p.name)
		cb, okb := conjIn(b, p.name)
		if !oka || !okb {
			m.forbidden[p.name] = true
			continue
		}
		props = append(props, prop{p.name, append(slices.Clone(ca), cb...)})
	}
	m.properties = props
	for k := range b.forbidden {
		m.forbidden[k] = true
	}
	for _, r := range b.required {
		if !slices.Contains(m.required, r) {
			m.required = append(m.required, r)
		}
	}
	m.additional = append(m.additional, b.additional...)
	m.noAdditional = a.noAdditional || b.noAdditional
	m.minProps = max(a.minProps, b.minProps)
	m.maxProps = minLimit(a.maxProps, b.maxProps)
	// arrays
	n := max(len(a.prefix), len(b.prefix))
	at := func(s *constraints, i int) ([]*jsonValue, bool) {
		if i < len(s.prefix) {
			return s.prefix[i], true
		}
		if s.noMoreItems {
			return nil, false
		}
		return s.items, true
	}
	m.prefix = nil
	maxI := minLimit(a.maxItems, b.maxItems)
	for i := 0; i < n; i++ {
		ca, oka := at(a, i)
		cb, okb := at(b, i)
		if !oka || !okb {
			maxI = minLimit(maxI, i)
			break
		}
		m.prefix = append(m.prefix, append(slices.Clone(ca), cb...))
	}
	m.items = append(slices.Clone(a.items), b.items...)
	m.noMoreItems = a.noMoreItems || b.noMoreItems
	m.minItems = max(a.minItems, b.minItems)
	m.maxItems = maxI
	// strings
	m.minLen = max(a.minLen, b.minLen)
	m.maxLen = minLimit(a.maxLen, b.maxLen)
	m.patterns = append(m.patterns, b.patterns...)
	m.formats = append(m.formats, b.formats...)
	// numbers
	if b.lo != nil {
		m.setLo(b.lo, b.loEx)
	}
	if b.hi != nil {
		m.setHi(b.hi, b.hiEx)
	}
	m.mults = append(m.mults, b.mults...)
	for _, r := range m.required {
		if m.forbidden[r] {
			m.types &^= tObj
		}
	}
	return m, nil
}

func (s *constraints) hasObjectKeywords() bool {
	return len(s.properties) > 0 || len(s.required) > 0 || len(s.additional) > 0 || s.noAdditional || len(s.patternProps) > 0 || len(s.propertyNames) > 0 || len(s.forbidden) > 0
}

func minLimit(a, b int) int {
	if a < 0 {
		return b
	}
	if b < 0 {
		return a
	}
	return min(a, b)
}

// value builds a fragment for one JSON value valid against conj.
func (sc *schemaCompiler) value(conj []*jsonValue) (fragment, error) {
	disj, err := sc.expand(conj)
	if err != nil {
		return fragment{}, err
	}
	var fs []fragment
	for _, s := range disj {
		f, err := sc.schFrag(s)
		if err != nil {
			return fragment{}, err
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return sc.b.never(), nil
	}
	return sc.b.alt(fs...), nil
}

func (sc *schemaCompiler) schFrag(s *constraints) (fragment, error) {
	b := sc.b
	if s.hasEnum {
		var fs []fragment
		seen := map[string]bool{}
		for _, v := range s.enum {
			ok, err := sc.check(v, s)
			if err != nil {
				return fragment{}, err
			}
			lit := string(appendCompact(nil, v))
			if ok && !seen[lit] {
				seen[lit] = true
				fs = append(fs, b.lit(lit))
			}
		}
		if len(fs) == 0 {
			return b.never(), nil
		}
		return b.alt(fs...), nil
	}
	var fs []fragment
	if s.types&tNull != 0 {
		fs = append(fs, b.lit("null"))
	}
	if s.types&tBool != 0 {
		fs = append(fs, b.lit("true"), b.lit("false"))
	}
	if s.types&(tInt|tNum) != 0 {
		f, err := sc.numFrag(s)
		if err != nil {
			return fragment{}, err
		}
		fs = append(fs, f)
	}
	if s.types&tStr != 0 {
		f, err := sc.strFrag(s)
		if err != nil {
			return fragment{}, err
		}
		fs = append(fs, f)
	}
	if s.types&tArr != 0 {
		f, err := sc.arrFrag(s)
		if err != nil {
			return fragment{}, err
		}
		fs = append(fs, f)
	}
	if s.types&tObj != 0 {
		f, err := sc.objFrag(s)
		if err != nil {
			return fragment{}, err
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return b.never(), nil
	}
	return b.alt(fs...), nil
}

// elem is a call matching one value valid against conj (nil = any value).
func (sc *schemaCompiler) elem(conj []*jsonValue) fragment {
	for _, j := range conj {
		if j.kind == jsonBool && !j.b {
			return sc.b.never()
		}
	}
	return sc.b.call(sc.ruleFor(conj))
}

func (sc *schemaCompiler) arrFrag(s *constraints) (fragment, error) {
	b := sc.b
	maxI := s.maxItems
	if s.noMoreItems {
		maxI = minLimit(maxI, len(s.prefix))
	}
	if maxI >= 0 && s.minItems > maxI {
		return b.never(), nil
	}
	conjAt := func(i int) []*jsonValue {
		if i < len(s.prefix) {
			return s.prefix[i]
		}
		return s.items
	}
	explicit := max(len(s.prefix), s.minItems, 1)
	if maxI >= 0 {
		explicit = maxI
	}
	if explicit > 5000 {
		return fragment{}, errf("array bounds need %d explicit positions", explicit)
	}
	open := b.seq(b.lit("["), sc.ws())
	end := b.node()
	closeF := func(from int32) {
		f := b.seq(sc.ws(), b.lit("]"))
		b.eps(from, f.in)
		b.eps(f.out, end)
	}
	cur := open.out
	for i := 0; i <= explicit; i++ {
		if i >= s.minItems {
			closeF(cur)
		}
		if i == explicit {
			if maxI < 0 { // loop for unbounded tails
				f := b.seq(sc.ws(), b.lit(","), sc.ws(), sc.elem(s.items))
				b.eps(cur, f.in)
				b.eps(f.out, cur)
			}
			break
		}
		var f fragment
		if i == 0 {
			f = sc.elem(conjAt(0))
		} else {
			f = b.seq(sc.ws(), b.lit(","), sc.ws(), sc.elem(conjAt(i)))
		}
		b.eps(cur, f.in)
		cur = f.out
	}
	return fragment{open.in, end}, nil
}

func (sc *schemaCompiler) objFrag(s *constraints) (fragment, error) {
	b := sc.b
	names := map[string]bool{}
	for _, p := range s.properties {
		names[p.name] = true
	}
	for k := range s.forbidden {
		names[k] = true
	}
	required := map[string]bool{}
	for _, r := range s.required {
		required[r] = true
	}
	// Pattern properties: defined names matching a pattern take its schema too.
	var pats []patternKey
	props := slices.Clone(s.properties)
	for _, pp := range s.patternProps {
		d, err := chardfa.Regex(pp.pat, true)
		if err != nil {
			return fragment{}, inKeyword("patternProperties", err)
		}
		pats = append(pats, patternKey{d, pp.conj})
		for i := range props {
			if d.Matches(props[i].name) {
				props[i].conj = append(slices.Clone(props[i].conj), pp.conj...)
			}
		}
	}
	var nameDFA *chardfa.DFA
	if len(s.propertyNames) > 0 {
		disj, err := sc.expand(s.propertyNames)
		if err != nil {
			return fragment{}, err
		}
		if len(disj) != 1 || disj[0].hasEnum || disj[0].types&tStr == 0 {
			return fragment{}, errf("unsupported propertyNames schema")
		}
		nameDFA, err = sc.stringDFA(disj[0])
		if err != nil {
			return fragment{}, err
		}
		if nameDFA == nil {
			nameDFA = chardfa.Length(0, -1)
		}
		for _, p := range props {
			if !nameDFA.Matches(p.name) {
				if required[p.name] {
					return b.never(), nil
				}
				names[p.name] = true
			}
		}
	}
	// Required names not among properties are governed by additional schemas.
	for _, r := range s.required {
		if !names[r] {
			conj := s.additional
			if s.noAdditional && len(pats) == 0 {
				return b.never(), nil
			}
			for _, pk := range pats {
				if pk.d.Matches(r) {
					conj = append(slices.Clone(conj), pk.conj...)
				}
			}
			props = append(props, prop{r, conj})
			names[r] = true
		}
	}
	var kept []prop
	for _, p := range props {
		if !s.forbidden[p.name] && (nameDFA == nil || nameDFA.Matches(p.name)) {
			kept = append(kept, p)
		}
	}
	props = kept
	nReq := 0
	for _, p := range props {
		if required[p.name] {
			nReq++
		}
	}
	extraAllowed := !s.noAdditional || len(pats) > 0
	if s.maxProps >= 0 && (extraAllowed || len(props) > s.maxProps) {
		return fragment{}, errf("maxProperties is not supported here")
	}
	if s.minProps > nReq {
		return fragment{}, errf("minProperties beyond required properties is not supported")
	}
	var extra int32 = -1
	if extraAllowed {
		r, err := sc.extraRule(names, pats, s, nameDFA)
		if err != nil {
			return fragment{}, err
		}
		extra = r
	}
	open := b.seq(b.lit("{"), sc.ws())
	end := b.node()
	closeF := func(from int32) {
		f := b.seq(sc.ws(), b.lit("}"))
		b.eps(from, f.in)
		b.eps(f.out, end)
	}
	member := func(p prop) fragment {
		return b.seq(b.lit(string(appendJSONString(nil, p.name))), sc.ws(), b.lit(":"), sc.ws(), sc.elem(p.conj))
	}
	comma := func(f fragment) fragment { return b.seq(sc.ws(), b.lit(","), sc.ws(), f) }
	// noneYet[i]: before member i, nothing emitted; someEmitted[i]: something emitted.
	// Extra members loop only at the hubs hub[i] (after member i-1 or an
	// extra member) and at the start: an extra member between skipped
	// optional properties can always be emitted before skipping them, so
	// the language is the same as with a loop at every position, but the
	// closure of a position reaches one open-key call site instead of one
	// per remaining property (each with its own stack, hence DFA states and
	// masks that could not be shared across positions).
	noneYet, someEmitted, hub := make([]int32, len(props)+1), make([]int32, len(props)+1), make([]int32, len(props)+1)
	for i := range noneYet {
		noneYet[i], someEmitted[i], hub[i] = b.node(), b.node(), b.node()
		b.eps(hub[i], someEmitted[i])
	}
	b.eps(open.out, noneYet[0])
	for i, p := range props {
		// one member, entered directly or after a comma
		f := member(p)
		b.eps(noneYet[i], f.in)
		b.eps(f.out, hub[i+1])
		c := b.seq(sc.ws(), b.lit(","), sc.ws())
		b.eps(someEmitted[i], c.in)
		b.eps(c.out, f.in)
		if !required[p.name] {
			b.eps(noneYet[i], noneYet[i+1])
			b.eps(someEmitted[i], someEmitted[i+1])
		}
	}
	if extra >= 0 {
		f := b.call(extra)
		b.eps(noneYet[0], f.in)
		b.eps(f.out, hub[0])
		for i := range hub {
			g := comma(b.call(extra))
			b.eps(hub[i], g.in)
			b.eps(g.out, hub[i])
		}
	}
	closeF(noneYet[len(props)])
	closeF(someEmitted[len(props)])
	return fragment{open.in, end}, nil
}

// extraRule matches one `"key":value` member for keys outside properties.
func (sc *schemaCompiler) extraRule(names map[string]bool, pats []patternKey, s *constraints, nameDFA *chardfa.DFA) (int32, error) {
	b := sc.b
	var list []string
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	excl := chardfa.Exclude(list)
	if nameDFA != nil {
		var err error
		if excl, err = chardfa.Intersect(excl, nameDFA); err != nil {
			return 0, err
		}
	}
	var alts []fragment
	member := func(key *chardfa.DFA, conj []*jsonValue) {
		alts = append(alts, b.seq(b.charString(key), sc.ws(), b.lit(":"), sc.ws(), sc.elem(conj)))
	}
	if len(pats) == 0 {
		if len(list) == 0 && nameDFA == nil {
			alts = append(alts, b.seq(b.freeString(), sc.ws(), b.lit(":"), sc.ws(), sc.elem(s.additional)))
		} else {
			member(excl, s.additional)
		}
	} else {
		if len(pats) > 4 {
			return 0, errf("more than 4 patternProperties with open keys is not supported")
		}
		// Each subset of matching patterns gets its own key language, so a
		// key is always checked against every pattern it matches.
		for mask := 0; mask < 1<<len(pats); mask++ {
			if mask == 0 && s.noAdditional {
				continue
			}
			d := excl
			var conj []*jsonValue
			for i, pk := range pats {
				var err error
				if mask&(1<<i) != 0 {
					d, err = chardfa.Intersect(d, pk.d)
					conj = append(conj, pk.conj...)
				} else {
					d, err = chardfa.Intersect(d, chardfa.Complement(pk.d))
				}
				if err != nil {
					return 0, err
				}
			}
			if mask == 0 {
				conj = s.additional
			}
			if d.Empty() {
				continue
			}
			member(d, conj)
		}
		if len(alts) == 0 {
			return -1, nil
		}
	}
	r := int32(len(b.g.rules))
	b.g.rules = append(b.g.rules, -1)
	f := b.alt(alts...)
	b.g.nodes[f.out].final = true
	b.g.rules[r] = f.in
	return r, nil
}

// stringDFA combines a schema's string constraints; nil means unconstrained.
func (sc *schemaCompiler) stringDFA(s *constraints) (*chardfa.DFA, error) {
	var d *chardfa.DFA
	and := func(x *chardfa.DFA) error {
		if d == nil {
			d = x
			return nil
		}
		var err error
		d, err = chardfa.Intersect(d, x)
		return err
	}
	for _, f := range s.formats {
		re, ok, err := formatRegex(f)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		x, err := chardfa.Regex(re, false)
		if err != nil {
			return nil, fmt.Errorf("format %q: %w", f, err)
		}
		if err := and(x); err != nil {
			return nil, err
		}
	}
	for _, p := range s.patterns {
		x, err := chardfa.Regex(p, true)
		if err != nil {
			return nil, inKeyword("pattern", err)
		}
		if err := and(x); err != nil {
			return nil, err
		}
	}
	if s.minLen > 0 || s.maxLen >= 0 {
		if s.maxLen >= 0 && s.minLen > s.maxLen {
			return &chardfa.DFA{Trans: [][]chardfa.Edge{nil}, Accept: []bool{false}}, nil
		}
		if max(s.minLen, s.maxLen) > 20000 {
			return nil, errf("string length bound too large")
		}
		if err := and(chardfa.Length(s.minLen, s.maxLen)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// strSet returns the entry of s's string constraints, building their char
// automaton the first time the schema uses them.
func (sc *schemaCompiler) strSet(s *constraints) (*strEnt, error) {
	key := fmt.Sprintf("%q %q %d %d", s.formats, s.patterns, s.minLen, s.maxLen)
	if ent := sc.strSets[key]; ent != nil {
		return ent, nil
	}
	d, err := sc.stringDFA(s)
	if err != nil {
		return nil, err
	}
	if sc.strSets == nil {
		sc.strSets = map[string]*strEnt{}
	}
	ent := &strEnt{d: d, rule: -1}
	sc.strSets[key] = ent
	return ent, nil
}

func (sc *schemaCompiler) strFrag(s *constraints) (fragment, error) {
	ent, err := sc.strSet(s)
	if err != nil {
		return fragment{}, err
	}
	b, d := sc.b, ent.d
	if d == nil {
		return b.freeString(), nil
	}
	if len(d.Trans) < sharedStringStates {
		return b.charString(d), nil
	}
	// A large string automaton (maxLength 4096 is 4,097 char states) is
	// built once per grammar as a rule and called wherever the same
	// constraints recur. Length-only strings are always called (their
	// masks come from the per-length tables whatever the stack); others
	// are inlined the first time, as masks of states on the root stack
	// need no split of what stays in the frame from what leaves it.
	if ent.rule < 0 {
		if !d.Counted && !ent.inlined {
			ent.inlined = true
			return b.charString(d), nil
		}
		ent.rule = int32(len(b.g.rules))
		b.g.rules = append(b.g.rules, -1)
		f := b.charString(d)
		b.g.nodes[f.out].final = true
		b.g.rules[ent.rule] = f.in
	}
	return b.call(ent.rule), nil
}

// strEnt is one string constraint set of a schema: its char automaton (nil:
// any string) and, once shared, its rule (-1 before).
type strEnt struct {
	d       *chardfa.DFA
	rule    int32
	inlined bool // built inline once already
}

// sharedStringStates is the size from which a string automaton becomes a
// rule shared by every string with the same constraints.
const sharedStringStates = 64

// check reports whether an enum/const value satisfies s's own constraints.
func (sc *schemaCompiler) check(v *jsonValue, s *constraints) (bool, error) {
	kt := kindType(v)
	if v.kind == jsonNumber {
		if s.types&tNum == 0 && !(s.types&tInt != 0 && isIntegral(v.num)) {
			return false, nil
		}
	} else if s.types&kt == 0 {
		return false, nil
	}
	switch v.kind {
	case jsonString:
		ent, err := sc.strSet(s)
		if err != nil {
			return false, err
		}
		if d := ent.d; d != nil && !d.Matches(v.str) {
			return false, nil
		}
	case jsonNumber:
		r, ok := numRat(v.num)
		if !ok {
			return false, nil
		}
		if s.lo != nil && (r.Cmp(s.lo) < 0 || s.loEx && r.Cmp(s.lo) == 0) {
			return false, nil
		}
		if s.hi != nil && (r.Cmp(s.hi) > 0 || s.hiEx && r.Cmp(s.hi) == 0) {
			return false, nil
		}
		for _, m := range s.mults {
			q := new(big.Rat).Quo(r, m)
			if !q.IsInt() {
				return false, nil
			}
		}
	case jsonObject:
		if s.hasObjectKeywords() || s.minProps > 0 || s.maxProps >= 0 {
			return false, errf("enum/const objects combined with object constraints are not supported")
		}
	case jsonArray:
		if len(s.prefix) > 0 || len(s.items) > 0 || s.noMoreItems || s.minItems > 0 || s.maxItems >= 0 {
			return false, errf("enum/const arrays combined with array constraints are not supported")
		}
	}
	return true, nil
}
