package grammar

import (
	"context"
	"fmt"
	"math/big"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
)

type schemaCompiler struct {
	c      *Compiler
	b      *builder
	root   *jsonValue
	flex   bool
	strict bool // close what schemas leave open by default (Options.Strict, or per compile)
	// refAlone: the root names draft 7 or earlier, where a schema with
	// $ref is that reference alone (its sibling keywords are ignored)
	refAlone bool
	// unknown: keywords the root's draft does not have (laterKeywords)
	unknown map[string]bool
	// keySites: member call sites left for exactly tracked objects (keySitesBudget)
	keySites int
	synthID  int32 // the last id given to a synthesized schema node (negative; see synth)
	ids      map[string]*jsonValue
	dupIDs   map[string]bool // ids more than one schema claims
	anchors  map[string]*jsonValue
	base     map[*jsonValue]string
	rules    map[string]int32
	queue    []queued
	anyRule  int32
	one      map[*jsonValue]*parsed
	depth    int
	// strings: the char automaton of each string constraint set seen, and
	// the rule large ones are shared through (see strFrag)
	strSets map[string]*strEnt
}

type queued struct {
	rule int32
	conj []*jsonValue
}

// parsed is one schema object's own keywords: the constraints it states
// directly, and the subschemas it combines with them.
type parsed struct {
	s *constraints
	// alternatives: lists of schemas of which at least one must hold, one
	// list per anyOf/oneOf ($ref and each allOf entry are lists of one)
	alternatives [][]*jsonValue
	oneOf        []int // the alternatives from oneOf (indices): their branches must exclude each other
	oneOfDone    bool  // oneOf checked (and rewritten where its branches may overlap)
	err          error
	busy         bool // being parsed: reached again, the schema refers to itself without consuming input
}

// compileSchema compiles one JSON Schema document; strict closes objects
// and tuples the schema leaves open by default (see Options.Strict).
func (c *Compiler) compileSchema(ctx context.Context, text string, strict bool) (*Grammar, error) {
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
	b := c.newBuilder(ctx)
	b.g.rules = []int32{-1}
	b.emptyWhat = "the schema allows no document"
	sc := c.newSchemaCompiler(b, root, strict)
	top := b.seq(sc.ws(), b.call(sc.ruleFor([]*jsonValue{root})), sc.ws())
	if err := sc.drain(); err != nil {
		return nil, err
	}
	return c.finish(b, top)
}

// newSchemaCompiler prepares the compile of schema root into b. Every schema
// is compiled through it, alone (response_format) or as a part of a
// composition (tool arguments, output after reasoning), so both get the same
// strictness, member tracking and draft rules.
func (c *Compiler) newSchemaCompiler(b *builder, root *jsonValue, strict bool) *schemaCompiler {
	sc := &schemaCompiler{c: c, b: b, root: root, flex: c.opts.Whitespace == Flexible, strict: strict,
		ids: map[string]*jsonValue{}, dupIDs: map[string]bool{}, anchors: map[string]*jsonValue{}, base: map[*jsonValue]string{},
		rules: map[string]int32{}, anyRule: -1, one: map[*jsonValue]*parsed{}, keySites: keySitesBudget}
	draft := draftOf(root)
	sc.refAlone, sc.unknown = draft != 0, laterKeywords[draft]
	sc.index(root, "urn:grammar:root", 0)
	return sc
}

// drain builds every rule queued by ruleFor.
func (sc *schemaCompiler) drain() error {
	b := sc.b
	for len(sc.queue) > 0 {
		q := sc.queue[0]
		sc.queue = sc.queue[1:]
		b.rule = q.rule
		f, err := sc.value(q.conj)
		if err != nil {
			return err
		}
		if b.over {
			return b.overErr("schema")
		}
		b.g.nodes[f.out].final = true
		b.g.rules[q.rule] = f.in
	}
	return nil
}

// draftOf is the draft root's $schema names: 3, 4, 6 or 7, or 0 for
// 2019-09, 2020-12, none or another URI (read as 2020-12).
func draftOf(root *jsonValue) int {
	s := root.get("$schema")
	if s == nil || s.kind != jsonString {
		return 0
	}
	for _, d := range []int{3, 4, 6, 7} {
		if strings.Contains(s.str, fmt.Sprintf("json-schema.org/draft-%02d/schema", d)) {
			return d
		}
	}
	return 0
}

// laterKeywords are the keywords each draft before 2019-09 does not have:
// to a validator of that draft they are unknown, hence annotations, and so
// they are here (the draft-04 schema with an `if` holds without it).
var laterKeywords = func() map[int]map[string]bool {
	from2019 := []string{"dependentRequired", "dependentSchemas", "prefixItems", "minContains", "maxContains"}
	from7 := append([]string{"if", "then", "else"}, from2019...)
	from6 := append([]string{"const", "contains", "propertyNames"}, from7...)
	set := func(ks []string) map[string]bool {
		m := map[string]bool{}
		for _, k := range ks {
			m[k] = true
		}
		return m
	}
	return map[int]map[string]bool{3: set(from6), 4: set(from6), 6: set(from7), 7: set(from2019)}
}()

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

// maxAnyDepth is how deeply a free-form value (an untyped property, an
// object without properties, items of any value) may nest arrays and
// objects. The bound is in the grammar (one rule per level left, the last
// allowing only scalars and empty containers), so the masks say it: the
// DFA's own cut at maxStackDepth would let a mask offer an opening bracket
// whose value then could not be written.
const maxAnyDepth = 32

// anyValueRule returns the rule matching any JSON value nesting at most
// maxAnyDepth containers.
func (sc *schemaCompiler) anyValueRule() int32 {
	if sc.anyRule >= 0 {
		return sc.anyRule
	}
	b := sc.b
	// Each container has exactly one call site for its items (a loop back
	// to it after each comma), so every prefix has one parse: two sites (a
	// first item, then a starred rest) would double a state's configurations
	// at each level of nesting, 2^depth of them.
	container := func(open, close string, item func() fragment) fragment {
		ws := sc.ws
		o := b.seq(b.lit(open), ws())
		end := b.node()
		empty := b.lit(close)
		b.eps(o.out, empty.in)
		b.eps(empty.out, end)
		if item == nil {
			return fragment{o.in, end}
		}
		it := item()
		b.eps(o.out, it.in)
		after := b.seq(it, ws())
		cl := b.lit(close)
		b.eps(after.out, cl.in)
		b.eps(cl.out, end)
		comma := b.seq(b.lit(","), ws())
		b.eps(after.out, comma.in)
		b.eps(comma.out, it.in)
		return fragment{o.in, end}
	}
	inner := int32(-1) // the rule one level down
	for level := 0; level <= maxAnyDepth; level++ {
		r := int32(len(b.g.rules))
		b.g.rules = append(b.g.rules, -1)
		var arrItem, objItem func() fragment
		if inner >= 0 {
			down := inner
			arrItem = func() fragment { return b.call(down) }
			objItem = func() fragment {
				return b.seq(b.freeString(), sc.ws(), b.lit(":"), sc.ws(), b.call(down))
			}
		}
		arr := container("[", "]", arrItem)
		obj := container("{", "}", objItem)
		f := b.alt(b.lit("null"), b.lit("true"), b.lit("false"), sc.numberAny(), b.freeString(), arr, obj)
		b.g.nodes[f.out].final = true
		b.g.rules[r] = f.in
		inner = r
	}
	sc.anyRule = inner
	return inner
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
		return sc.never("no value satisfies every schema"), nil
	}
	return sc.b.alt(fs...), nil
}

// valueLiteral matches the spellings of enum/const value v: a number by
// value (numberForms; withFraction as there), anything else as written.
func (sc *schemaCompiler) valueLiteral(v *jsonValue, withFraction bool) fragment {
	if v.kind == jsonNumber {
		return sc.numberForms(v.num, withFraction)
	}
	return sc.b.lit(string(appendCompact(nil, v)))
}

// numberForms matches the plain decimal spellings of the JSON number num
// (an enum or const value): a validator compares numbers by value, so
// 2.0 also matches 2 and 2.00, and 0.5 matches 0.50. An integral value
// takes a zero fraction only when decimals may hold it (withFraction:
// the type allows numbers, not just integers, which in draft 4 exclude
// 2.0). Exponent forms are left out (narrower, never wider).
func (sc *schemaCompiler) numberForms(num string, withFraction bool) fragment {
	b := sc.b
	r, ok := numRat(num)
	if !ok || decimalDigits(r) < 0 {
		return b.lit(num)
	}
	neg := r.Sign() < 0
	abs := new(big.Rat).Abs(r)
	zeros := b.star(b.lit("0"))
	if abs.IsInt() {
		digits := abs.Num().String()
		f := b.lit(digits)
		if withFraction {
			f = b.seq(f, b.opt(b.seq(b.lit(".0"), zeros)))
		}
		if abs.Sign() == 0 {
			return b.seq(b.opt(b.lit("-")), f) // -0 equals 0
		}
		if neg {
			return b.seq(b.lit("-"), f)
		}
		return f
	}
	text := strings.TrimRight(abs.FloatString(decimalDigits(abs)), "0")
	if neg {
		text = "-" + text
	}
	return b.seq(b.lit(text), zeros)
}

// decimalDigits is the number of fraction digits r's decimal expansion
// takes (the larger count of 2s and 5s in its denominator), or -1 when it
// does not end.
func decimalDigits(r *big.Rat) int {
	d := new(big.Int).Set(r.Denom())
	most := 0
	for _, p := range []int64{2, 5} {
		n := 0
		q, m := new(big.Int), new(big.Int)
		for {
			q.QuoRem(d, big.NewInt(p), m)
			if m.Sign() != 0 {
				break
			}
			d.Set(q)
			n++
		}
		most = max(most, n)
	}
	if d.Cmp(big.NewInt(1)) != 0 {
		return -1
	}
	return most
}

// never is a fragment that accepts nothing, recording why.
func (sc *schemaCompiler) never(reason string) fragment {
	sc.b.noteEmpty(reason)
	return sc.b.never()
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
			key := string(appendCompact(nil, v))
			if v.kind == jsonNumber {
				key = valueKey(v) // 2, 2.0 and 20e-1 are one value
			}
			if ok && !seen[key] {
				seen[key] = true
				fs = append(fs, sc.valueLiteral(v, s.types&tNum != 0))
			}
		}
		if len(fs) == 0 {
			return sc.never("enum/const: no listed value satisfies the other keywords"), nil
		}
		return b.alt(fs...), nil
	}
	if s.types == 0 {
		return sc.never(s.conflict), nil
	}
	excluded := valueSet(s.excluded)
	for _, v := range s.excluded {
		if (v.kind == jsonObject && s.types&tObj != 0) || (v.kind == jsonArray && s.types&tArr != 0) {
			return fragment{}, errf("not: excluding object or array values is not supported")
		}
	}
	var fs []fragment
	for _, lit := range []string{"null", "true", "false"} {
		t := tBool
		if lit == "null" {
			t = tNull
		}
		if s.types&t != 0 && !excluded[lit] {
			fs = append(fs, b.lit(lit))
		}
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
			return sc.never("a property or item whose schema is false")
		}
	}
	return sc.b.call(sc.ruleFor(conj))
}

func (sc *schemaCompiler) arrFrag(s *constraints) (fragment, error) {
	b := sc.b
	maxI := s.maxItems
	if s.noMoreItems || sc.strict && s.closeItems && !s.openItems {
		maxI = minLimit(maxI, len(s.prefix))
	}
	if maxI >= 0 && s.minItems > maxI {
		return sc.never(fmt.Sprintf("minItems %d is more than the %d items allowed (maxItems, or a closed tuple)", s.minItems, maxI)), nil
	}
	if s.unique && (maxI < 0 || maxI > 1) { // one item or none is always unique
		return sc.uniqueArray(s, maxI)
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
	// With contains, each position exists twice: before an item valid
	// against it was seen (layer 0) and after (layer 1); the array closes
	// only in layer 1. Without, layer 0 is the only one and closes.
	layers := 1
	var contains []*jsonValue
	if len(s.contains) > 0 {
		if len(s.contains) > 1 {
			return fragment{}, errf("more than one contains on one array is not supported")
		}
		layers, contains = 2, s.contains
	}
	item := func(i int, found bool) fragment {
		conj := conjAt(i)
		if found {
			conj = append(slices.Clone(conj), contains...)
		}
		if i == 0 {
			return sc.elem(conj)
		}
		return b.seq(sc.ws(), b.lit(","), sc.ws(), sc.elem(conj))
	}
	cur := []int32{open.out, -1}
	if layers == 2 {
		cur[1] = b.node()
	}
	for i := 0; i <= explicit; i++ {
		if i >= s.minItems {
			closeF(cur[layers-1])
		}
		if i == explicit {
			if maxI < 0 { // loop for unbounded tails
				for l := 0; l < layers; l++ {
					f := item(max(i, 1), false)
					b.eps(cur[l], f.in)
					b.eps(f.out, cur[l])
				}
				if layers == 2 {
					f := item(max(i, 1), true)
					b.eps(cur[0], f.in)
					b.eps(f.out, cur[1])
				}
			}
			break
		}
		next := []int32{b.node(), -1}
		f := item(i, false)
		b.eps(cur[0], f.in)
		b.eps(f.out, next[0])
		if layers == 2 {
			next[1] = b.node()
			g := item(i, false)
			b.eps(cur[1], g.in)
			b.eps(g.out, next[1])
			h := item(i, true)
			b.eps(cur[0], h.in)
			b.eps(h.out, next[1])
		}
		cur = next
	}
	return fragment{open.in, end}, nil
}

// check reports whether an enum/const value satisfies s's own constraints.
func (sc *schemaCompiler) check(v *jsonValue, s *constraints) (bool, error) {
	if len(s.excluded) > 0 && valueSet(s.excluded)[string(appendCompact(nil, v))] {
		return false, nil
	}
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
		return sc.checkObject(v, s)
	case jsonArray:
		return sc.checkArray(v, s)
	}
	return true, nil
}

// valueValid reports whether value v is valid against every schema of conj
// (an enum/const value checked against the rest of the schema).
func (sc *schemaCompiler) valueValid(v *jsonValue, conj []*jsonValue) (bool, error) {
	disj, err := sc.expand(conj)
	if err != nil {
		return false, err
	}
	for _, d := range disj {
		if d.hasEnum && !valueSet(d.enum)[string(appendCompact(nil, v))] {
			continue
		}
		ok, err := sc.check(v, d)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// checkObject reports whether object value v meets s's object keywords.
func (sc *schemaCompiler) checkObject(v *jsonValue, s *constraints) (bool, error) {
	if len(s.patternProps) > 0 || len(s.propertyNames) > 0 {
		return false, errf("enum/const objects combined with patternProperties or propertyNames are not supported")
	}
	if sc.strict && s.closeKeys && !s.openKeys && !s.noAdditional && listsRequired(s) {
		s = s.clone()
		s.noAdditional = true
	}
	if len(v.keys) < s.minProps || s.maxProps >= 0 && len(v.keys) > s.maxProps {
		return false, nil
	}
	for _, r := range s.required {
		if v.get(r) == nil {
			return false, nil
		}
	}
	for i, k := range v.keys {
		conj, ok := s.propertySchemas(k)
		if !ok {
			return false, nil
		}
		if ok, err := sc.valueValid(v.vals[i], conj); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// checkArray reports whether array value v meets s's array keywords.
func (sc *schemaCompiler) checkArray(v *jsonValue, s *constraints) (bool, error) {
	n := len(v.arr)
	closed := s.noMoreItems || sc.strict && s.closeItems && !s.openItems
	if n < s.minItems || s.maxItems >= 0 && n > s.maxItems || closed && n > len(s.prefix) {
		return false, nil
	}
	for i, e := range v.arr {
		conj := s.items
		if i < len(s.prefix) {
			conj = s.prefix[i]
		}
		if ok, err := sc.valueValid(e, conj); err != nil || !ok {
			return false, err
		}
	}
	if s.unique {
		seen := map[string]bool{}
		for _, e := range v.arr {
			k := valueKey(e)
			if seen[k] {
				return false, nil
			}
			seen[k] = true
		}
	}
	for _, c := range s.contains {
		found := false
		for _, e := range v.arr {
			ok, err := sc.valueValid(e, []*jsonValue{c})
			if err != nil {
				return false, err
			}
			found = found || ok
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

// maxUniqueValues is the most distinct item values a uniqueItems array
// tracks: one position per subset of them.
const maxUniqueValues = 8

// uniqueArray builds an array with uniqueItems whose items come from a
// small finite set of scalars (enum or const values, booleans, null):
// positions are the subsets of values written, so each value appears at
// most once, and the count bounds follow from the subset's size. Items
// from an unbounded set (strings, numbers, objects) cannot be told apart
// by an automaton, so that is a compile error naming why.
func (sc *schemaCompiler) uniqueArray(s *constraints, maxI int) (fragment, error) {
	if len(s.prefix) > 0 || len(s.contains) > 0 {
		return fragment{}, errf("uniqueItems with prefixItems, tuple items or contains is not supported")
	}
	values, fraction, err := sc.finiteValues(s.items)
	if err != nil {
		return fragment{}, err
	}
	if len(values) > maxUniqueValues {
		return fragment{}, errf("uniqueItems over %d possible item values (at most %d are tracked)", len(values), maxUniqueValues)
	}
	b := sc.b
	n := len(values)
	if maxI < 0 || maxI > n {
		maxI = n
	}
	if s.minItems > maxI {
		return sc.never(fmt.Sprintf("minItems %d is more than the %d distinct items uniqueItems allows", s.minItems, maxI)), nil
	}
	open := b.seq(b.lit("["), sc.ws())
	end := b.node()
	written := make([]int32, 1<<n) // written[set]: after the values of set (open.out for none)
	written[0] = open.out
	for set := 1; set < len(written); set++ {
		written[set] = b.node()
	}
	for set, at := range written {
		k := bits.OnesCount(uint(set))
		if k >= s.minItems {
			f := b.seq(sc.ws(), b.lit("]"))
			b.eps(at, f.in)
			b.eps(f.out, end)
		}
		if k == maxI {
			continue
		}
		for i, v := range values {
			if set&(1<<i) != 0 {
				continue
			}
			f := sc.valueLiteral(v, fraction[i])
			if set != 0 {
				f = b.seq(sc.ws(), b.lit(","), sc.ws(), f)
			}
			b.eps(at, f.in)
			b.eps(f.out, written[set|1<<i])
		}
	}
	return fragment{open.in, end}, nil
}

// finiteValues lists the distinct scalar values conj allows, when it
// allows only finitely many (enum or const values, booleans, null), and
// for each whether a number may be spelled with a zero fraction (its type
// allows numbers, not only integers); else an error says why uniqueItems
// cannot be enforced.
func (sc *schemaCompiler) finiteValues(conj []*jsonValue) ([]*jsonValue, []bool, error) {
	if len(conj) == 0 {
		return nil, nil, errf("uniqueItems on items of any value is not supported (only a small finite set of scalars)")
	}
	disj, err := sc.expand(conj)
	if err != nil {
		return nil, nil, err
	}
	var out []*jsonValue
	var fraction []bool
	seen := map[string]bool{}
	add := func(v *jsonValue, s *constraints) error {
		if v.kind == jsonObject || v.kind == jsonArray {
			return errf("uniqueItems on object or array items is not supported")
		}
		ok, err := sc.check(v, s)
		if k := valueKey(v); err == nil && ok && !seen[k] {
			seen[k] = true
			out = append(out, v)
			fraction = append(fraction, s.types&tNum != 0)
		}
		return err
	}
	for _, d := range disj {
		switch {
		case d.hasEnum:
			for _, v := range d.enum {
				if err := add(v, d); err != nil {
					return nil, nil, err
				}
			}
		case d.types&^(tBool|tNull) == 0:
			for _, lit := range []string{"true", "false", "null"} {
				v, _ := parseJSONValue([]byte(lit), 1)
				if err := add(v, d); err != nil {
					return nil, nil, err
				}
			}
		default:
			return nil, nil, errf("uniqueItems on items of type %s is not supported (only a small finite set of scalars)", typeNames(d.types))
		}
	}
	return out, fraction, nil
}
