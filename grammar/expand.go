package grammar

import (
	"errors"
	"slices"
)

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
		if err := sc.exclusiveOneOf(p); err != nil {
			return nil, err
		}
		for i := range res {
			if res[i], err = merge(res[i], p.s); err != nil {
				return nil, err
			}
		}
		for _, g := range p.alternatives {
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
						} else {
							sc.b.noteEmpty(m.conflict)
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

// exclusiveOneOf makes p's oneOf lists safe to treat as anyOf: branches
// proven disjoint stay as they are; otherwise branch i becomes "branch i
// and not any other branch" (not.go), exact when each branch's negation is;
// when one cannot be negated, the overlap is the compile error.
func (sc *schemaCompiler) exclusiveOneOf(p *parsed) error {
	if p.oneOfDone {
		return nil
	}
	p.oneOfDone = true
	for _, i := range p.oneOf {
		alts := p.alternatives[i]
		err := sc.checkDisjoint(alts, p.s)
		if err == nil {
			continue
		}
		negs := make([]*jsonValue, len(alts))
		for k, a := range alts {
			n, nerr := sc.negate(a, 0)
			if nerr != nil {
				reason := nerr.Error()
				var ne *Error
				if errors.As(nerr, &ne) {
					reason = ne.Reason
				}
				p.err = errf("%s (and %s)", err.(*Error).Reason, reason)
				return p.err
			}
			negs[k] = n
		}
		excl := make([]*jsonValue, len(alts))
		for k, a := range alts {
			parts := []*jsonValue{a}
			for m, n := range negs {
				if m != k {
					parts = append(parts, n)
				}
			}
			excl[k] = sc.synthObject("allOf", sc.synthArray(parts...))
		}
		p.alternatives[i] = excl
	}
	return nil
}

// checkDisjoint accepts oneOf only when at most one branch can match any
// instance that also satisfies ctx (the schema's own keywords beside the
// oneOf, which every valid instance satisfies too: `"type":"object"` next
// to branches that only list properties); otherwise treating it as anyOf
// could accept invalid documents. ctx may be nil.
func (sc *schemaCompiler) checkDisjoint(alts []*jsonValue, ctx *constraints) error {
	if len(alts) < 2 {
		return nil
	}
	var all [][]*constraints
	for _, a := range alts {
		e, err := sc.expand([]*jsonValue{a})
		if err != nil {
			return err
		}
		var in []*constraints
		for _, x := range e {
			if ctx != nil {
				if m, err := merge(x, ctx); err == nil {
					x = m
				}
			}
			if x.types != 0 {
				in = append(in, x)
			}
		}
		all = append(all, in)
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
