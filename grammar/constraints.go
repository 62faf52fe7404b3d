package grammar

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
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
	types         uint8        // type bits a value may have (0: no value)
	hasEnum       bool         // enum or const given: only the values of enum
	enum          []*jsonValue // allowed values, when hasEnum
	properties    []prop       // named members, in schema order
	forbidden     map[string]bool
	required      []string
	additional    []*jsonValue // schemas of keys outside properties
	noAdditional  bool         // additionalProperties false (said, not implied by strict mode)
	patternProps  []patternProp
	propertyNames []*jsonValue
	minProps      int
	maxProps      int            // -1 unbounded
	prefix        [][]*jsonValue // schemas of the first items (tuple)
	items         []*jsonValue   // schemas of the items after prefix
	noMoreItems   bool           // no items after prefix (said, not implied by strict mode)
	minItems      int
	maxItems      int // -1 unbounded
	minLen        int
	maxLen        int // -1 unbounded
	patterns      []string
	formats       []string
	lo, hi        *big.Rat // number bounds (nil: none)
	loEx          bool     // lo is exclusive
	hiEx          bool     // hi is exclusive
	mults         []*big.Rat
	notMults      []*big.Int   // integers an integer instance is not a multiple of (from not)
	excluded      []*jsonValue // values the instance may not equal (from not)
	notPatterns   []string     // patterns a string may not match (from not)
	fractional    bool         // numbers with a non-zero fraction only (not an integer)
	contains      []*jsonValue // schemas some item must be valid against (each)
	unique        bool         // uniqueItems: no two items are equal
	witness       []keyWitness // members the object must have one of each (from not)
	// conflict says why no value satisfies these constraints once types is
	// 0 (for the compile error of a schema that allows no document)
	conflict string
	// Strict mode closes objects and tuples after merging (allOf, $ref and
	// siblings): closeKeys when some merged schema listed properties,
	// openKeys when one said additionalProperties (other than false) or
	// patternProperties; closeItems when one was a tuple, openItems when one
	// gave its tail schema. Closing each schema alone would forbid the keys
	// and items the others list.
	closeKeys, openKeys, closeItems, openItems bool
}

// keyWitness asks for a member whose key is none of excludedNames, matches
// none of excludedPatterns (in their widest reading), matches pattern ("" any)
// and is valid against keySchema (nil any), and whose value is valid
// against value: the members that make additionalProperties,
// patternProperties or propertyNames fail (not.go).
type keyWitness struct {
	excludedNames    []string
	excludedPatterns []string
	pattern          string
	keySchema        *jsonValue
	value            *jsonValue
}

type prop struct {
	name string
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
	c.notMults = slices.Clone(s.notMults)
	c.witness = slices.Clone(s.witness)
	c.excluded = slices.Clone(s.excluded)
	c.notPatterns = slices.Clone(s.notPatterns)
	c.contains = slices.Clone(s.contains)
	return &c
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

// merge intersects two constraint sets, one keyword family at a time.
func merge(a, b *constraints) (*constraints, error) {
	m := a.clone()
	m.types &= b.types
	if m.conflict == "" {
		m.conflict = b.conflict
	}
	if m.types == 0 && m.conflict == "" {
		m.conflict = fmt.Sprintf("type: %s and %s have no value in common", typeNames(a.types), typeNames(b.types))
	}
	m.closeKeys, m.openKeys = a.closeKeys || b.closeKeys, a.openKeys || b.openKeys
	m.closeItems, m.openItems = a.closeItems || b.closeItems, a.openItems || b.openItems
	mergeEnums(m, b)
	if err := mergeObjects(m, a, b); err != nil {
		return nil, err
	}
	mergeArrays(m, a, b)
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
	m.notMults = append(m.notMults, b.notMults...)
	m.excluded = append(m.excluded, b.excluded...)
	m.notPatterns = append(m.notPatterns, b.notPatterns...)
	m.fractional = a.fractional || b.fractional
	m.contains = append(m.contains, b.contains...)
	m.unique = a.unique || b.unique
	m.witness = append(m.witness, b.witness...)
	return m, nil
}

// mergeEnums keeps in m (a copy of one side) the enum values b allows too.
func mergeEnums(m, b *constraints) {
	if !b.hasEnum {
		return
	}
	if !m.hasEnum {
		m.hasEnum, m.enum = true, slices.Clone(b.enum)
		return
	}
	in := valueSet(b.enum)
	var keep []*jsonValue
	for _, x := range m.enum {
		if in[string(appendCompact(nil, x))] {
			keep = append(keep, x)
		}
	}
	m.enum = keep
}

// propertySchemas returns the schemas s puts on a member named name, or ok
// false when s forbids the name.
func (s *constraints) propertySchemas(name string) (conj []*jsonValue, ok bool) {
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

// mergeObjects intersects the object keywords of a and b into m (a copy of
// a): a property gets both sides' schemas for it, and a name one side
// forbids is forbidden.
func mergeObjects(m, a, b *constraints) error {
	if len(a.patternProps) > 0 && b.hasObjectKeywords() || len(b.patternProps) > 0 && a.hasObjectKeywords() {
		return errf("patternProperties combined with other object constraints is not supported")
	}
	if len(a.propertyNames) > 0 && b.hasObjectKeywords() || len(b.propertyNames) > 0 && a.hasObjectKeywords() {
		return errf("propertyNames combined with other object constraints is not supported")
	}
	m.patternProps = append(m.patternProps, b.patternProps...)
	m.propertyNames = append(m.propertyNames, b.propertyNames...)
	var props []prop
	seen := map[string]bool{}
	for _, p := range append(slices.Clone(a.properties), b.properties...) {
		if seen[p.name] {
			continue
		}
		seen[p.name] = true
		ca, oka := a.propertySchemas(p.name)
		cb, okb := b.propertySchemas(p.name)
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
	for _, r := range m.required {
		if m.forbidden[r] && m.types&tObj != 0 {
			m.types &^= tObj
			if m.types == 0 && m.conflict == "" {
				m.conflict = fmt.Sprintf("required: property %q is not allowed (additionalProperties false or a false schema)", r)
			}
		}
	}
	return nil
}

// mergeArrays intersects the array keywords of a and b into m (a copy of
// a): position i takes both sides' schemas for it, and the first position
// one side does not allow ends the array.
func mergeArrays(m, a, b *constraints) {
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
	for i := 0; i < max(len(a.prefix), len(b.prefix)); i++ {
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

// typeNames spells type bits as the type keyword's names.
func typeNames(t uint8) string {
	if t == 0 {
		return "no type"
	}
	var names []string
	for _, n := range []string{"null", "boolean", "object", "array", "string", "integer", "number"} {
		bit := typeBits[n]
		if t&bit == bit && (n != "integer" || t&tNum == 0) {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|")
}
