package grammar

import (
	"fmt"
	"math/bits"
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
	reqOrder []string        // the required names in the order the schema lists them
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
	if needMin && om.extra && s.minProps > len(om.props)+1 {
		// distinct keys are what counts, and an automaton cannot tell a
		// repeated extra key from a new one: only the first is sure
		return fragment{}, errf("minProperties %d needs more keys than the %d named properties and one extra key, the most that can be told apart (extra keys may repeat)", s.minProps, len(om.props))
	}
	if needMin && needMax && om.extra {
		return fragment{}, errf("minProperties and maxProperties together with additional keys are not supported")
	}
	if k := max(s.minProps, s.maxProps); (needMin || needMax) && 2*(k+1)*(len(om.props)+1) > maxCountedPositions {
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
	wit, err := sc.objectWitness(s, om)
	if err != nil {
		return fragment{}, err
	}
	if wit != nil && (needMin || needMax) {
		return fragment{}, errf("not of additionalProperties, patternProperties or propertyNames together with minProperties/maxProperties is not supported")
	}
	if needMin || needMax {
		minP, maxP := s.minProps, -1
		if needMax {
			maxP = s.maxProps
		}
		if f, ok := sc.buildCountedAnyOrder(om, extra, minP, maxP); ok {
			return f, nil
		}
		return sc.buildCountedObject(om, extra, minP, maxP), nil
	}
	return sc.buildObject(om, extra, wit), nil
}

// objWitness is an object's need for at least one member whose key is in
// keys and whose value is also valid against value: what fails
// additionalProperties, patternProperties or propertyNames (from not).
type objWitness struct {
	keys  *chardfa.DFA // the keys a witness may have
	value []*jsonValue // schemas a witness's value is valid against, beside its member's
	extra int32        // rule of an extra member that is a witness, or -1
}

// values is w's value schemas (nil for no witness).
func (w *objWitness) values() []*jsonValue {
	if w == nil {
		return nil
	}
	return w.value
}

// objectWitness builds s's witness requirement (nil none). A witness among
// the extra keys must match none of the object's patternProperties (so only
// its additional schema and the witness value apply): narrower, never wider.
func (sc *schemaCompiler) objectWitness(s *constraints, om *objectMembers) (*objWitness, error) {
	switch len(s.witness) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, errf("more than one not of additionalProperties, patternProperties or propertyNames on one object is not supported")
	}
	kw := s.witness[0]
	d := chardfa.Length(0, -1)
	and := func(x *chardfa.DFA, err error) error {
		if err == nil {
			d, err = chardfa.Intersect(d, x)
		}
		return err
	}
	if len(kw.excludedNames) > 0 {
		if err := and(chardfa.Exclude(kw.excludedNames), nil); err != nil {
			return nil, err
		}
	}
	for _, p := range kw.excludedPatterns {
		x, err := chardfa.RegexWide(p, true)
		if err != nil {
			return nil, inKeyword("not: patternProperties", err)
		}
		if err := and(chardfa.Complement(x), nil); err != nil {
			return nil, err
		}
	}
	if kw.pattern != "" {
		if err := and(chardfa.Regex(kw.pattern, true)); err != nil {
			return nil, inKeyword("not: patternProperties", err)
		}
	}
	if kw.keySchema != nil {
		disj, err := sc.expand([]*jsonValue{kw.keySchema})
		if err != nil {
			return nil, err
		}
		if len(disj) != 1 || disj[0].hasEnum || disj[0].types&tStr == 0 {
			return nil, errf("not: cannot negate this propertyNames schema")
		}
		kd, err := sc.stringDFA(disj[0])
		if err != nil {
			return nil, err
		}
		if kd != nil {
			if err := and(kd, nil); err != nil {
				return nil, err
			}
		}
	}
	w := &objWitness{keys: d, value: []*jsonValue{kw.value}, extra: -1}
	if om.extra && !s.noAdditional {
		// an extra key matching none of the object's patterns
		x, err := extraKeys(om.names, om.nameDFA)
		if err == nil {
			x, err = chardfa.Intersect(x, d)
		}
		for _, pk := range om.patterns {
			if err == nil {
				x, err = chardfa.Intersect(x, chardfa.Complement(pk.d))
			}
		}
		if err != nil {
			return nil, err
		}
		if !x.Empty() {
			b := sc.b
			conj := append(slices.Clone(s.additional), kw.value)
			w.extra = sc.newRule(b.seq(b.charString(x), sc.ws(), b.lit(":"), sc.ws(), sc.elem(conj)))
		}
	}
	return w, nil
}

// buildCountedAnyOrder is buildCountedObject for an object small enough to
// remember exactly which named members were written (as buildObject does):
// a position is that set and the extra members counted (each one toward a
// maximum; toward a minimum only the first, as a second may repeat it), so
// members come in any order. It reports false, building nothing, when the
// object has too many members or positions for the compile's budget.
func (sc *schemaCompiler) buildCountedAnyOrder(om *objectMembers, extra int32, minP, maxP int) (fragment, bool) {
	n := len(om.props)
	extras := 1 // extra-member counts 0..extras-1
	if extra >= 0 {
		extras = 2
		if maxP >= 0 {
			extras = maxP + 1
		}
	}
	if n > exactKeySetProps {
		return fragment{}, false
	}
	sites := (n + 2) << n * extras
	if sites > sc.keySites {
		return fragment{}, false
	}
	sc.keySites -= sites
	b := sc.b
	memberRule := make([]int32, n)
	for i, p := range om.props {
		memberRule[i] = sc.memberRule(p)
	}
	need := 0
	for i, p := range om.props {
		if om.required[p.name] {
			need |= 1 << i
		}
	}
	open, end, closeF := sc.objectShell()
	// position (set, x) is index set*extras+x; written after at least one
	// member, afterComma after the comma that follows it
	written, afterComma := sc.positionNodes(extras << n)
	call := func(from int32, rule int32, to int) { b.callBetween(from, rule, written[to]) }
	members := func(from int32, set, x int) {
		count := bits.OnesCount(uint(set)) + x
		room := maxP < 0 || count < maxP
		for i := range om.props {
			if set&(1<<i) == 0 && room {
				call(from, memberRule[i], (set|1<<i)*extras+x)
			}
		}
		switch {
		case extra < 0:
		case maxP >= 0:
			if room {
				call(from, extra, set*extras+x+1)
			}
		default:
			call(from, extra, set*extras+1)
		}
	}
	members(open.out, 0, 0)
	if need == 0 && minP == 0 {
		closeF(open.out)
	}
	for set := 0; set < 1<<n; set++ {
		for x := range extras {
			i := set*extras + x
			members(afterComma[i], set, x)
			if set&need == need && bits.OnesCount(uint(set))+x >= minP && (set != 0 || x != 0) {
				closeF(written[i])
			}
		}
	}
	return fragment{open.in, end}, true
}

// memberBody matches one `"name": value` member of p.
func (sc *schemaCompiler) memberBody(p prop) fragment {
	b := sc.b
	return b.seq(b.lit(string(appendJSONString(nil, p.name))), sc.ws(), b.lit(":"), sc.ws(), sc.elem(p.conj))
}

// memberRule is a rule of memberBody(p), called from every position that
// allows the member.
func (sc *schemaCompiler) memberRule(p prop) int32 { return sc.newRule(sc.memberBody(p)) }

// objectShell starts an object automaton: open is "{" and whitespace, end
// its last node, and closeF(from) leads from a node through whitespace and
// "}" to end.
func (sc *schemaCompiler) objectShell() (open fragment, end int32, closeF func(from int32)) {
	b := sc.b
	open, end = b.seq(b.lit("{"), sc.ws()), b.node()
	closeF = func(from int32) {
		f := b.seq(sc.ws(), b.lit("}"))
		b.eps(from, f.in)
		b.eps(f.out, end)
	}
	return open, end, closeF
}

// positionNodes makes n object positions: written[i], after a member, and
// afterComma[i], after the comma that may follow it.
func (sc *schemaCompiler) positionNodes(n int) (written, afterComma []int32) {
	b := sc.b
	written, afterComma = make([]int32, n), make([]int32, n)
	for i := range written {
		written[i], afterComma[i] = b.node(), b.node()
		c := b.seq(sc.ws(), b.lit(","), sc.ws())
		b.eps(written[i], c.in)
		b.eps(c.out, afterComma[i])
	}
	return written, afterComma
}

// extraKeys is the language of the keys an extra member may have: none of
// names (escaped or not), and within nameDFA (propertyNames) when given.
func extraKeys(names map[string]bool, nameDFA *chardfa.DFA) (*chardfa.DFA, error) {
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	d := chardfa.Exclude(list)
	if nameDFA == nil {
		return d, nil
	}
	return chardfa.Intersect(d, nameDFA)
}

// newRule makes fragment f a rule of its own (f.out ends it).
func (sc *schemaCompiler) newRule(f fragment) int32 {
	b := sc.b
	r := int32(len(b.g.rules))
	b.g.nodes[f.out].final = true
	b.g.rules = append(b.g.rules, f.in)
	return r
}

// maxCountedPositions bounds the (count, position) pairs buildCountedObject
// builds: each count is a copy of the object's positions.
const maxCountedPositions = 4096

// buildCountedObject is buildObject with a count of the members emitted, so
// that the object closes only with at least minP members and takes no more
// than maxP (-1 none). Positions exist per count c (0..K, K = max(minP,
// maxP), saturating at K when there is no maximum) and, for minP, per e:
// whether an extra member was emitted. Extra members count toward maxP one
// by one; toward minP they count once (e): an extra key may repeat (no
// automaton remembers every key) and a repeat is one property to a
// validator, but the first is surely a key of its own, as extra keys
// exclude the named ones.
func (sc *schemaCompiler) buildCountedObject(om *objectMembers, extra int32, minP, maxP int) fragment {
	b := sc.b
	props, required := om.props, om.required
	n := len(props)
	K := max(minP, maxP)
	countExtra := maxP >= 0
	E := 1
	if !countExtra && extra >= 0 {
		E = 2
	}
	// next is the count after one more counted member from c (-1: none allowed)
	next := func(c int) int {
		switch {
		case c < K:
			return c + 1
		case maxP >= 0:
			return -1
		}
		return K
	}
	open, end, closeF := sc.objectShell()
	member := sc.memberBody
	comma := func(f fragment) fragment { return b.seq(sc.ws(), b.lit(","), sc.ws(), f) }
	// noneYet[i]: before member i, nothing emitted; some/hub[c][e][i]: before
	// member i after count c (and e), hub where extra members may follow
	noneYet := make([]int32, n+1)
	for i := range noneYet {
		noneYet[i] = b.node()
	}
	some, hub := make([][][]int32, K+1), make([][][]int32, K+1)
	for c := range some {
		some[c], hub[c] = make([][]int32, E), make([][]int32, E)
		for e := range E {
			some[c][e], hub[c][e] = make([]int32, n+1), make([]int32, n+1)
			for i := range some[c][e] {
				some[c][e][i], hub[c][e][i] = b.node(), b.node()
				b.eps(hub[c][e][i], some[c][e][i])
			}
		}
	}
	b.eps(open.out, noneYet[0])
	for i, p := range props {
		if nc := next(0); nc >= 0 {
			f := member(p)
			b.eps(noneYet[i], f.in)
			b.eps(f.out, hub[nc][0][i+1])
		}
		for c := range some {
			nc := next(c)
			for e := range E {
				if nc >= 0 {
					f := comma(member(p))
					b.eps(some[c][e][i], f.in)
					b.eps(f.out, hub[nc][e][i+1])
				}
				if !required[p.name] {
					b.eps(some[c][e][i], some[c][e][i+1])
				}
			}
		}
		if !required[p.name] {
			b.eps(noneYet[i], noneYet[i+1])
		}
	}
	if extra >= 0 {
		// where an extra member from (c, e) leads
		after := func(c, e int) (int, int) {
			if countExtra {
				return next(c), e
			}
			return c, 1
		}
		if c, e := after(0, 0); c >= 0 {
			f := b.call(extra)
			b.eps(noneYet[0], f.in)
			b.eps(f.out, hub[c][e][0])
		}
		for c := range hub {
			for e := range E {
				tc, te := after(c, e)
				if tc < 0 {
					continue
				}
				for i := range hub[c][e] {
					g := comma(b.call(extra))
					b.eps(hub[c][e][i], g.in)
					b.eps(g.out, hub[tc][te][i])
				}
			}
		}
	}
	if minP == 0 {
		closeF(noneYet[n])
	}
	for c := range some {
		for e := range E {
			if c+e >= minP && c+e > 0 {
				closeF(some[c][e][n])
			}
		}
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
		if !om.required[r] {
			om.reqOrder = append(om.reqOrder, r)
		}
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

// exactKeySetProps is the most named properties an object tracks exactly
// (which of them were written, each at most once, in any order): one
// position per subset, so 2^n positions and n*2^(n-1) member call sites.
const exactKeySetProps = 8

// maxRequiredSetPositions bounds the positions of a larger object that
// tracks the set of required properties written (2^r); past it, required
// properties come in one of two orders (see planPositions).
const maxRequiredSetPositions = 256

// keySitesBudget bounds the member call sites (position, member) that the
// exactly tracked objects of one compile may take together; objects past
// it fall back to the two orders. A schema whose dependencies or oneOf
// branches multiply one object into dozens would otherwise build
// thousands of positions per branch (and pay for them in time to first
// mask) for orders no document needs all of.
const keySitesBudget = 4096

// keyPositions says where an object's automaton is after each member: a
// position records what has been written so far, as much as the object
// must remember to close soundly.
type keyPositions struct {
	n     int                         // positions 0..n-1; 0 is the start
	next  func(pos, member int) []int // positions after member from pos (none: not allowed there)
	loops []bool                      // members that leave every position where it was (written by the shared loop rule)
	close func(pos int) bool          // whether the object may close at pos
}

// planPositions chooses how an object tracks its named members. Small
// objects remember exactly which members were written: any order, each at
// most once. Larger ones remember only the required members, each exactly
// once: as a set when there are few, else in the order of the properties
// or in the order of the required list (documents tend to follow one of
// them); their optional members may come anywhere and, as nothing
// remembers them, repeat. A repeat is still valid to a validator (JSON
// objects keep the last value, and every value written was checked against
// the member's schema), and so are extra keys, which may already repeat.
func planPositions(props []prop, required map[string]bool, reqOrder []string, budget *int) keyPositions {
	n := len(props)
	one := func(p int) []int { return []int{p} }
	// afford takes the call sites of a plan of 2^k positions, k members
	// each tracked, from the budget if it has them
	afford := func(k int) bool {
		sites := (k + 4) << max(k-1, 0)
		if sites > *budget {
			return false
		}
		*budget -= sites
		return true
	}
	if n <= exactKeySetProps && afford(n) {
		var need int
		for i, p := range props {
			if required[p.name] {
				need |= 1 << i
			}
		}
		return keyPositions{
			n:     1 << n,
			loops: make([]bool, n),
			next: func(pos, m int) []int {
				if pos&(1<<m) != 0 {
					return nil
				}
				return one(pos | 1<<m)
			},
			close: func(pos int) bool { return pos&need == need },
		}
	}
	// byProps[i] and byList[i]: required member i's rank among the
	// required in properties order and in required-list order (-1 optional)
	byProps, byList := make([]int, n), make([]int, n)
	loops := make([]bool, n)
	r := 0
	for i, p := range props {
		byProps[i], byList[i] = -1, -1
		if required[p.name] {
			byProps[i] = r
			r++
		} else {
			loops[i] = true
		}
	}
	k := 0
	for _, name := range reqOrder {
		if i := slices.IndexFunc(props, func(p prop) bool { return p.name == name }); i >= 0 {
			byList[i] = k
			k++
		}
	}
	if r < 31 && 1<<r <= maxRequiredSetPositions && afford(r) {
		return keyPositions{
			n:     1 << r,
			loops: loops,
			next: func(pos, m int) []int {
				switch {
				case byProps[m] < 0:
					return one(pos)
				case pos&(1<<byProps[m]) != 0:
					return nil
				}
				return one(pos | 1<<byProps[m])
			},
			close: func(pos int) bool { return pos == 1<<r-1 },
		}
	}
	// Two chains of r+1 positions sharing the start: position k (k <= r)
	// has written the first k required members in properties order;
	// position r+k the first k in required-list order (r+r is complete).
	return keyPositions{
		n:     2*r + 1,
		loops: loops,
		next: func(pos, m int) []int {
			if byProps[m] < 0 {
				return one(pos)
			}
			var to []int
			if pos <= r && byProps[m] == pos {
				to = append(to, pos+1)
			}
			if (pos == 0 || pos > r) && byList[m] == max(pos-r, 0) {
				to = append(to, r+byList[m]+1)
			}
			return to
		},
		close: func(pos int) bool { return pos == r || pos == 2*r },
	}
}

// buildObject emits the object automaton: the named members in any order
// (planPositions says what is remembered of them) and extra members (rule
// extra, -1 none) anywhere. Each named member is a rule of its own, called
// from every position that allows it, so a position costs a few nodes and
// the member's key and value automata exist once; the members that loop
// share one rule of their alternatives.
func (sc *schemaCompiler) buildObject(om *objectMembers, extra int32, wit *objWitness) fragment {
	b := sc.b
	props := om.props
	plan := planPositions(props, om.required, om.reqOrder, &sc.keySites)
	// layers: 1, or 2 with a witness (layer 1 after the witness member,
	// which ends the object); the object closes only in the last layer
	layers := 1
	if wit != nil {
		layers = 2
	}
	memberRule, witnessRule := make([]int32, len(props)), make([]int32, len(props))
	var looping, loopingWitness []fragment
	for i, p := range props {
		witnessRule[i] = -1
		canWitness := wit != nil && wit.keys.Matches(p.name)
		wp := prop{p.name, append(slices.Clone(p.conj), wit.values()...)}
		if plan.loops[i] {
			looping = append(looping, sc.memberBody(p))
			if canWitness {
				loopingWitness = append(loopingWitness, sc.memberBody(wp))
			}
			continue
		}
		memberRule[i] = sc.memberRule(p)
		if canWitness {
			witnessRule[i] = sc.memberRule(wp)
		}
	}
	loopRule, loopWitnessRule := int32(-1), int32(-1)
	if len(looping) > 0 {
		loopRule = sc.newRule(b.alt(looping...))
	}
	if len(loopingWitness) > 0 {
		loopWitnessRule = sc.newRule(b.alt(loopingWitness...))
	}
	extraWitness := int32(-1)
	if wit != nil {
		extraWitness = wit.extra
	}
	open, end, closeF := sc.objectShell()
	// written[l][pos]: at least one member written, at position pos of
	// layer l; each position's members follow a comma from
	// afterComma[l][pos]. Before the first member (open.out) the same
	// members come without a comma.
	written, afterComma := make([][]int32, layers), make([][]int32, layers)
	for l := range layers {
		written[l], afterComma[l] = sc.positionNodes(plan.n)
	}
	call := b.callBetween
	// members adds the edges of the members allowed at (layer l, pos),
	// leaving from node from; rules are called once per (from, destination).
	members := func(from int32, l, pos int) {
		for i := range props {
			if plan.loops[i] {
				continue
			}
			for _, to := range plan.next(pos, i) {
				call(from, memberRule[i], written[l][to])
				if l == 0 && witnessRule[i] >= 0 {
					call(from, witnessRule[i], written[1][to])
				}
			}
		}
		for _, r := range []int32{loopRule, extra} {
			if r >= 0 {
				call(from, r, written[l][pos])
			}
		}
		if l == 0 {
			for _, r := range []int32{loopWitnessRule, extraWitness} {
				if r >= 0 {
					call(from, r, written[1][pos])
				}
			}
		}
	}
	members(open.out, 0, 0)
	for l := range layers {
		for pos := range written[l] {
			// The witness is the last member: a later member with its key
			// (an extra key, or an optional member of a large object, may
			// repeat) would replace its value, as a validator keeps the last.
			if l == 0 {
				members(afterComma[l][pos], l, pos)
			}
			if plan.close(pos) && l == layers-1 {
				closeF(written[l][pos])
			}
		}
	}
	if plan.close(0) && layers == 1 {
		closeF(open.out)
	}
	return fragment{open.in, end}
}

// extraRule matches one `"key":value` member for keys outside properties.
func (sc *schemaCompiler) extraRule(names map[string]bool, pats []patternKey, s *constraints, nameDFA *chardfa.DFA) (int32, error) {
	b := sc.b
	excl, err := extraKeys(names, nameDFA)
	if err != nil {
		return 0, err
	}
	var alts []fragment
	member := func(key *chardfa.DFA, conj []*jsonValue) {
		alts = append(alts, b.seq(b.charString(key), sc.ws(), b.lit(":"), sc.ws(), sc.elem(conj)))
	}
	if len(pats) == 0 {
		if len(names) == 0 && nameDFA == nil {
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
