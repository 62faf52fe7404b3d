package grammar

import (
	"fmt"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

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
	for _, p := range s.notPatterns {
		// the widest reading of the pattern, so its complement holds in every dialect
		x, err := chardfa.RegexWide(p, true)
		if err != nil {
			return nil, inKeyword("not: pattern", err)
		}
		if err := and(chardfa.Complement(x)); err != nil {
			return nil, err
		}
	}
	if names := excludedStrings(s); len(names) > 0 {
		if err := and(chardfa.Exclude(names)); err != nil {
			return nil, err
		}
	}
	maxLen := s.maxLen
	if maxLen > maxCountedLength && s.minLen <= longStringCap {
		// Limits like 32767 or 65535 mean "long"; counting that many chars
		// costs an automaton state each. Allowing at most longStringCap
		// chars is a narrower grammar (every document still validates).
		maxLen = longStringCap
	}
	if s.minLen > 0 || maxLen >= 0 {
		if maxLen >= 0 && s.minLen > maxLen {
			return &chardfa.DFA{Trans: [][]chardfa.Edge{nil}, Accept: []bool{false}}, nil
		}
		if max(s.minLen, maxLen) > maxCountedLength {
			return nil, errf("string length bound too large")
		}
		if err := and(chardfa.Length(s.minLen, maxLen)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

const (
	// maxCountedLength is the largest minLength/maxLength counted exactly.
	maxCountedLength = 20000
	// longStringCap is how many chars a string may take when its maxLength
	// is over maxCountedLength (and its minLength is at most this).
	longStringCap = 2048
)

// strSet returns the entry of s's string constraints, building their char
// automaton the first time the schema uses them.
func (sc *schemaCompiler) strSet(s *constraints) (*strEnt, error) {
	key := fmt.Sprintf("%q %q %d %d %q %q", s.formats, s.patterns, s.minLen, s.maxLen, s.notPatterns, excludedStrings(s))
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
	if d.Empty() {
		return sc.never("pattern/format/minLength/maxLength: no string satisfies them all"), nil
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

// excludedStrings are the string values s excludes.
func excludedStrings(s *constraints) []string {
	var names []string
	for _, v := range s.excluded {
		if v.kind == jsonString {
			names = append(names, v.str)
		}
	}
	return names
}
