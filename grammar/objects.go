package grammar

import (
	"fmt"
	"slices"
	"sort"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// patternKey is one patternProperties entry: the keys it matches and the
// schemas their values take.
type patternKey struct {
	d    *chardfa.DFA
	conj []*jsonValue
}

// objectMembers is what an object schema allows, resolved from its
// keywords: the named members in order, and what other keys may appear.
type objectMembers struct {
	props    []prop          // named members in the order emitted, each with every schema that applies
	required map[string]bool // names that must appear
	names    map[string]bool // names an extra key may not take (defined or excluded)
	patterns []patternKey    // patternProperties
	nameDFA  *chardfa.DFA    // propertyNames as a language, or nil
	extra    bool            // keys outside props may appear
}

// objFrag builds the automaton of the objects s allows.
func (sc *schemaCompiler) objFrag(s *constraints) (fragment, error) {
	if sc.strict && s.closeKeys && !s.openKeys && !s.noAdditional && listsRequired(s) {
		s = s.clone()
		s.noAdditional = true
	}
	om, err := sc.resolveMembers(s)
	if err != nil {
		return fragment{}, err
	}
	if om == nil {
		return sc.b.never(), nil // resolveMembers said why
	}
	nReq := 0
	for _, p := range om.props {
		if om.required[p.name] {
			nReq++
		}
	}
	needMin := s.minProps > nReq
	needMax := s.maxProps >= 0 && (om.extra || len(om.props) > s.maxProps)
	if needMin && needMax && om.extra {
		return fragment{}, errf("minProperties and maxProperties together with additional keys are not supported")
	}
	if k := max(s.minProps, s.maxProps); (needMin || needMax) && (k+1)*(len(om.props)+1) > maxCountedPositions {
		return fragment{}, errf("minProperties/maxProperties of %d over %d properties need too many positions", k, len(om.props))
	}
	var extra int32 = -1
	if om.extra {
		r, err := sc.extraRule(om.names, om.patterns, s, om.nameDFA)
		if err != nil {
			return fragment{}, err
		}
		extra = r
	}
	if needMin || needMax {
		minP, maxP := s.minProps, -1
		if needMax {
			maxP = s.maxProps
		}
		return sc.buildCountedObject(om, extra, minP, maxP), nil
	}
	return sc.buildObject(om, extra), nil
}

// maxCountedPositions bounds the (count, position) pairs buildCountedObject
// builds: each count is a copy of the object's positions.
const maxCountedPositions = 4096

// buildCountedObject is buildObject with a count of the members emitted
// (layers 1..K of the positions; K = max(minP, maxP)), so that the object
// closes only with at least minP members and takes no more than maxP (-1
// none). Extra members count toward maxP; toward minP only named ones do: an
// extra key may repeat (no automaton remembers every key), and a repeat is
// one property to a validator.
func (sc *schemaCompiler) buildCountedObject(om *objectMembers, extra int32, minP, maxP int) fragment {
	b := sc.b
	props, required := om.props, om.required
	n := len(props)
	K := max(minP, maxP)
	// next is the layer after one more member from layer c (-1: none allowed)
	next := func(c int) int {
		switch {
		case c < K:
			return c + 1
		case maxP >= 0:
			return -1
		}
		return K
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
	noneYet := make([]int32, n+1)
	some := make([][]int32, K+1) // some[c][i]: before member i, c members emitted (c >= 1)
	hub := make([][]int32, K+1)
	for i := range noneYet {
		noneYet[i] = b.node()
	}
	for c := 1; c <= K; c++ {
		some[c], hub[c] = make([]int32, n+1), make([]int32, n+1)
		for i := range some[c] {
			some[c][i], hub[c][i] = b.node(), b.node()
			b.eps(hub[c][i], some[c][i])
		}
	}
	b.eps(open.out, noneYet[0])
	for i, p := range props {
		if K >= 1 {
			f := member(p)
			b.eps(noneYet[i], f.in)
			b.eps(f.out, hub[1][i+1])
		}
		for c := 1; c <= K; c++ {
			if nc := next(c); nc >= 0 {
				f := comma(member(p))
				b.eps(some[c][i], f.in)
				b.eps(f.out, hub[nc][i+1])
			}
		}
		if !required[p.name] {
			b.eps(noneYet[i], noneYet[i+1])
			for c := 1; c <= K; c++ {
				b.eps(some[c][i], some[c][i+1])
			}
		}
	}
	if extra >= 0 {
		countExtra := maxP >= 0
		first := 1
		if !countExtra {
			first = 0
		}
		// the first extra member, at the start
		if first == 0 {
			// not counted: it stays at layer 0, but something was emitted;
			// layer 0 then needs its own "some" positions
			some0, hub0 := make([]int32, n+1), make([]int32, n+1)
			for i := range some0 {
				some0[i], hub0[i] = b.node(), b.node()
				b.eps(hub0[i], some0[i])
			}
			some[0], hub[0] = some0, hub0
			for i, p := range props {
				if K >= 1 {
					f := comma(member(p))
					b.eps(some0[i], f.in)
					b.eps(f.out, hub[1][i+1])
				}
				if !required[p.name] {
					b.eps(some0[i], some0[i+1])
				}
			}
		}
		if first == 0 || next(0) >= 0 {
			f := b.call(extra)
			b.eps(noneYet[0], f.in)
			b.eps(f.out, hub[first][0])
		}
		for c := 0; c <= K; c++ {
			if hub[c] == nil {
				continue
			}
			to := c
			if countExtra {
				to = next(c)
			}
			if to < 0 {
				continue
			}
			for i := range hub[c] {
				g := comma(b.call(extra))
				b.eps(hub[c][i], g.in)
				b.eps(g.out, hub[to][i])
			}
		}
	}
	if minP == 0 {
		closeF(noneYet[n])
		if some[0] != nil {
			closeF(some[0][n])
		}
	}
	for c := max(minP, 1); c <= K; c++ {
		closeF(some[c][n])
	}
	return fragment{open.in, end}
}

// listsRequired reports whether every required name of s is one of its
// properties.
func listsRequired(s *constraints) bool {
	for _, r := range s.required {
		if !slices.ContainsFunc(s.properties, func(p prop) bool { return p.name == r }) {
			return false
		}
	}
	return true
}

// resolveMembers applies patternProperties and propertyNames to the named
// properties and adds the required names that only additional or pattern
// schemas govern. It returns nil when a required name cannot appear.
func (sc *schemaCompiler) resolveMembers(s *constraints) (*objectMembers, error) {
	om := &objectMembers{names: map[string]bool{}, required: map[string]bool{}}
	for _, p := range s.properties {
		om.names[p.name] = true
	}
	for k := range s.forbidden {
		om.names[k] = true
	}
	for _, r := range s.required {
		om.required[r] = true
	}
	// Pattern properties: defined names matching a pattern take its schema too.
	props := slices.Clone(s.properties)
	for _, pp := range s.patternProps {
		d, err := chardfa.Regex(pp.pat, true)
		if err != nil {
			return nil, inKeyword("patternProperties", err)
		}
		om.patterns = append(om.patterns, patternKey{d, pp.conj})
		for i := range props {
			if d.Matches(props[i].name) {
				props[i].conj = append(slices.Clone(props[i].conj), pp.conj...)
			}
		}
	}
	if len(s.propertyNames) > 0 {
		disj, err := sc.expand(s.propertyNames)
		if err != nil {
			return nil, err
		}
		if len(disj) != 1 || disj[0].hasEnum || disj[0].types&tStr == 0 {
			return nil, errf("unsupported propertyNames schema")
		}
		if om.nameDFA, err = sc.stringDFA(disj[0]); err != nil {
			return nil, err
		}
		if om.nameDFA == nil {
			om.nameDFA = chardfa.Length(0, -1)
		}
		for _, p := range props {
			if !om.nameDFA.Matches(p.name) {
				if om.required[p.name] {
					sc.b.noteEmpty(fmt.Sprintf("required property %q does not match propertyNames", p.name))
					return nil, nil
				}
				om.names[p.name] = true
			}
		}
	}
	// Required names not among properties are governed by additional schemas.
	for _, r := range s.required {
		if om.names[r] {
			continue
		}
		conj := s.additional
		if s.noAdditional && len(om.patterns) == 0 {
			sc.b.noteEmpty(fmt.Sprintf("required property %q is not allowed (additionalProperties false)", r))
			return nil, nil
		}
		for _, pk := range om.patterns {
			if pk.d.Matches(r) {
				conj = append(slices.Clone(conj), pk.conj...)
			}
		}
		props = append(props, prop{r, conj})
		om.names[r] = true
	}
	for _, p := range props {
		if !s.forbidden[p.name] && (om.nameDFA == nil || om.nameDFA.Matches(p.name)) {
			om.props = append(om.props, p)
		}
	}
	om.extra = !s.noAdditional || len(om.patterns) > 0
	return om, nil
}

// buildObject emits the object automaton: the named members in order,
// each optional one skippable, and extra members (rule extra, -1 none).
func (sc *schemaCompiler) buildObject(om *objectMembers, extra int32) fragment {
	b := sc.b
	props, required := om.props, om.required
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
	return fragment{open.in, end}
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
