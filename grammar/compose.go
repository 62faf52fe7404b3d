package grammar

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// Part is one piece of a composed grammar: exactly one of its fields is set. Composition is what
// tool calling and reasoning need without any change to the scheduler: a sequence of literal
// text (a tool-call opener), free text up to a trigger (content before a tool call, a reasoning
// block before `</think>`), JSON values valid against a schema (each call's arguments), and
// alternation and repetition (one of several functions, parallel calls). The whole is one
// automaton, so masks, caching and EOS behave as for a single schema.
type Part struct {
	// Lit is literal text, never empty.
	Lit string `json:"lit,omitempty"`
	// Schema is a JSON value valid against this JSON Schema, written compactly.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Strict, with Schema, closes what the schema leaves open (true) or keeps JSON Schema's
	// permissive defaults (false), as JSONSchemaStrict does; unset: Options.Strict.
	Strict *bool `json:"strict,omitempty"`
	// Text is free text with the limits FreeText gives.
	Text *FreeText `json:"text,omitempty"`
	// Regex is text fully matching this regular expression (the dialect of Compiler.Regex).
	Regex string `json:"regex,omitempty"`
	// GBNF is text in the language of this grammar in GBNF syntax (start rule root).
	GBNF string `json:"gbnf,omitempty"`
	// Seq is its parts one after another (an empty Seq is the empty string).
	Seq []Part `json:"seq,omitempty"`
	// Alt is any one of its parts.
	Alt []Part `json:"alt,omitempty"`
	// Repeat is its part repeated, with an optional separator between repetitions.
	Repeat *Repeat `json:"repeat,omitempty"`
}

// FreeText is any UTF-8 text that never contains Without (when set) nor any of WithoutAny (when
// set: the triggers of structural tags, not together with NotFirst), does not begin with any
// of NotFirst's characters (when set), and is at most MaxChars characters long (when > 0). A
// composition lets such text run until the trigger that Without names, which then starts the
// constrained part; MaxChars bounds it (a reasoning budget), after which the trigger is forced.
type FreeText struct {
	Without    string   `json:"without,omitempty"`
	WithoutAny []string `json:"without_any,omitempty"`
	NotFirst   string   `json:"not_first,omitempty"`
	MaxChars   int      `json:"max_chars,omitempty"`
}

// MaxFreeTextChars bounds FreeText.MaxChars (each character counted is automaton states).
const MaxFreeTextChars = 4096

// Repeat is Part at least Min and at most Max times (Max < 0: unbounded), Sep between two.
type Repeat struct {
	Part Part  `json:"part"`
	Sep  *Part `json:"sep,omitempty"`
	Min  int   `json:"min"`
	Max  int   `json:"max"`
}

// Literal is the text s (not empty: leave an empty literal out of a Sequence).
func Literal(s string) Part { return Part{Lit: s} }

// Sequence is ps one after another.
func Sequence(ps ...Part) Part { return Part{Seq: append([]Part{}, ps...)} }

// Alternatives is one of ps.
func Alternatives(ps ...Part) Part { return Part{Alt: ps} }

// SchemaPart is a JSON value valid against schema.
func SchemaPart(schema json.RawMessage) Part { return Part{Schema: schema} }

// TextUntil is free text that never contains trigger.
func TextUntil(trigger string) Part { return Part{Text: &FreeText{Without: trigger}} }

// maxComposeRepeat bounds Repeat.Min and a finite Repeat.Max (each repetition is built out).
const maxComposeRepeat = 64

// Compose compiles a composition given as the JSON of a Part (what a Spec of KindCompose holds).
func (c *Compiler) Compose(spec string) (*Grammar, error) {
	return c.compose(context.Background(), spec)
}

func (c *Compiler) compose(ctx context.Context, spec string) (*Grammar, error) {
	if len(spec) > c.opts.Limits.MaxSchemaBytes {
		return nil, errf("composed grammar is %d bytes, over the %d byte limit", len(spec), c.opts.Limits.MaxSchemaBytes)
	}
	return c.cached(ctx, "c\x00"+spec, func(ctx context.Context) (*Grammar, error) {
		var p Part
		if err := json.Unmarshal([]byte(spec), &p); err != nil {
			return nil, errf("invalid composed grammar: %v", err)
		}
		b := c.newBuilder(ctx)
		b.g.rules = []int32{-1}
		cc := &composer{c: c, b: b}
		root, err := cc.part(&p, 0)
		if err != nil {
			return nil, err
		}
		if b.over {
			return nil, b.overErr("composed grammar")
		}
		return c.finish(b, root)
	})
}

// composer builds one composition into one builder.
type composer struct {
	c *Compiler
	b *builder
	// schemas: the rule of each schema text already built, so a schema used twice (the same
	// function at two positions) is built once
	schemas map[string]int32
}

func (cc *composer) part(p *Part, depth int) (fragment, error) {
	if depth > cc.c.opts.Limits.MaxDepth {
		return fragment{}, errf("composed grammar nests deeper than %d", cc.c.opts.Limits.MaxDepth)
	}
	set := 0
	for _, on := range []bool{p.Lit != "", p.Schema != nil, p.Text != nil, p.Regex != "", p.GBNF != "", p.Seq != nil, p.Alt != nil, p.Repeat != nil} {
		if on {
			set++
		}
	}
	if set != 1 {
		return fragment{}, errf("composed grammar: a part sets %d of lit, schema, text, regex, gbnf, seq, alt, repeat; want exactly one", set)
	}
	b := cc.b
	switch {
	case p.Lit != "":
		return b.lit(p.Lit), nil
	case p.Schema != nil:
		r, err := cc.schema(p.Schema, p.Strict)
		if err != nil {
			return fragment{}, err
		}
		return b.call(r), nil
	case p.Text != nil:
		d, err := freeTextDFA(p.Text)
		if err != nil {
			return fragment{}, err
		}
		return b.rawChars(d), nil
	case p.Regex != "":
		d, err := chardfa.Regex(p.Regex, false)
		if err != nil {
			return fragment{}, errf("composed grammar: regex: %v", err)
		}
		return b.rawChars(d), nil
	case p.GBNF != "":
		r, err := cc.c.buildGBNF(b, p.GBNF)
		if err != nil {
			return fragment{}, err
		}
		return b.call(r), nil
	case p.Seq != nil:
		fs := make([]fragment, 0, len(p.Seq))
		for i := range p.Seq {
			f, err := cc.part(&p.Seq[i], depth+1)
			if err != nil {
				return fragment{}, err
			}
			fs = append(fs, f)
		}
		return b.seq(fs...), nil
	case p.Alt != nil:
		if len(p.Alt) == 0 {
			return fragment{}, errf("composed grammar: empty alt")
		}
		fs := make([]fragment, 0, len(p.Alt))
		for i := range p.Alt {
			f, err := cc.part(&p.Alt[i], depth+1)
			if err != nil {
				return fragment{}, err
			}
			fs = append(fs, f)
		}
		return b.alt(fs...), nil
	}
	return cc.repeat(p.Repeat, depth)
}

// repeat builds Min copies, then either Max-Min optional ones or a loop.
func (cc *composer) repeat(r *Repeat, depth int) (fragment, error) {
	if r.Min < 0 || r.Min > maxComposeRepeat || r.Max > maxComposeRepeat || (r.Max >= 0 && r.Max < r.Min) || r.Max == 0 {
		return fragment{}, errf("composed grammar: repeat min %d max %d (want 0 <= min <= max, 1 <= max <= %d, or max < 0 for unbounded)", r.Min, r.Max, maxComposeRepeat)
	}
	b := cc.b
	one := func(withSep bool) (fragment, error) {
		f, err := cc.part(&r.Part, depth+1)
		if err != nil || !withSep || r.Sep == nil {
			return f, err
		}
		s, err := cc.part(r.Sep, depth+1)
		if err != nil {
			return f, err
		}
		return b.seq(s, f), nil
	}
	var fs []fragment
	for i := 0; i < r.Min; i++ {
		f, err := one(i > 0)
		if err != nil {
			return fragment{}, err
		}
		fs = append(fs, f)
	}
	switch {
	case r.Max < 0:
		f, err := one(r.Min > 0)
		if err != nil {
			return fragment{}, err
		}
		if r.Min == 0 && r.Sep != nil {
			// first item, then (sep item)*
			rest, err := one(true)
			if err != nil {
				return fragment{}, err
			}
			fs = append(fs, b.opt(b.seq(f, b.star(rest))))
		} else {
			fs = append(fs, b.star(f))
		}
	default:
		// optional tail, nested so that item k+1 needs item k: (x (x (x)?)?)?
		var tail *fragment
		for i := r.Max - 1; i >= r.Min; i-- {
			f, err := one(i > 0)
			if err != nil {
				return fragment{}, err
			}
			if tail != nil {
				f = b.seq(f, *tail)
			}
			o := b.opt(f)
			tail = &o
		}
		if tail != nil {
			fs = append(fs, *tail)
		}
	}
	return b.seq(fs...), nil
}

// schema returns the rule matching one JSON value valid against schema, compiled exactly as
// response_format compiles a schema (newSchemaCompiler): the Compiler's whitespace, strict as
// the part says (else as Options.Strict), objects closed and members written at most once.
func (cc *composer) schema(text json.RawMessage, strictPart *bool) (int32, error) {
	strict := cc.c.opts.Strict
	if strictPart != nil {
		strict = *strictPart
	}
	key := "s\x00" + string(text)
	if strict {
		key = "S\x00" + string(text)
	}
	if r, ok := cc.schemas[key]; ok {
		return r, nil
	}
	c := cc.c
	root, err := parseJSONValue(text, 2*c.opts.Limits.MaxDepth+2)
	if err != nil {
		return 0, errf("invalid schema JSON: %v", err)
	}
	if root.kind != jsonObject && root.kind != jsonBool {
		return 0, errf("invalid schema: not an object or boolean")
	}
	if err := validateSchemaDoc(root, string(text)); err != nil {
		return 0, err
	}
	sc := c.newSchemaCompiler(cc.b, root, strict)
	r := sc.ruleFor([]*jsonValue{root})
	outer := cc.b.rule
	if err := sc.drain(); err != nil {
		return 0, err
	}
	cc.b.rule = outer
	if cc.schemas == nil {
		cc.schemas = map[string]int32{}
	}
	cc.schemas[key] = r
	return r, nil
}

// freeTextDFA is the char DFA of t: a KMP automaton over the runes of Without (state i: the
// last i runes read are Without's first i; reaching len(Without) is dead), with a start state
// that refuses NotFirst's runes.
func freeTextDFA(t *FreeText) (*chardfa.DFA, error) {
	if !utf8.ValidString(t.Without) || !utf8.ValidString(t.NotFirst) {
		return nil, errf("composed grammar: free text limits must be UTF-8")
	}
	if t.MaxChars < 0 || t.MaxChars > MaxFreeTextChars {
		return nil, errf("composed grammar: free text max_chars %d (want 0 to %d)", t.MaxChars, MaxFreeTextChars)
	}
	if t.WithoutAny != nil {
		if t.NotFirst != "" {
			return nil, errf("composed grammar: free text cannot have both without_any and not_first")
		}
		pats := t.WithoutAny
		if t.Without != "" {
			pats = append(slices.Clip(pats), t.Without)
		}
		return withoutAnyDFA(pats, t.MaxChars)
	}
	w := []rune(t.Without)
	n := len(w)
	// fail[i]: the longest proper border of w[:i]
	fail := make([]int, n+1)
	for i := 1; i < n; i++ {
		k := fail[i]
		for k > 0 && w[i] != w[k] {
			k = fail[k]
		}
		if w[i] == w[k] {
			k++
		}
		fail[i+1] = k
	}
	next := func(i int, c rune) int {
		for i > 0 && w[i] != c {
			i = fail[i]
		}
		if n > 0 && w[i] == c {
			i++
		}
		return i
	}
	// runes that matter: those of w; every other rune leads to state 0
	special := slices.Compact(slices.Sorted(slices.Values(w)))
	states := max(n, 1)
	d := &chardfa.DFA{}
	edges := func(from int, refuse []rune) []chardfa.Edge {
		var out []chardfa.Edge
		lo := rune(0)
		emit := func(hi rune) {
			if lo <= hi {
				out = chardfa.AppendAny(out, lo, hi, 0)
			}
		}
		for _, c := range special {
			emit(c - 1)
			if to := next(from, c); to < n && !slices.Contains(refuse, c) {
				out = chardfa.AppendAny(out, c, c, int32(to))
			}
			lo = c + 1
		}
		emit(utf8.MaxRune)
		if len(refuse) == 0 {
			return out
		}
		// cut refused runes out of the ranges
		var cut []chardfa.Edge
		for _, e := range out {
			for _, r := range refuse {
				if r < e.Lo || r > e.Hi {
					continue
				}
				if r > e.Lo {
					cut = append(cut, chardfa.Edge{Lo: e.Lo, Hi: r - 1, To: e.To})
				}
				e.Lo = r + 1
			}
			if e.Lo <= e.Hi {
				cut = append(cut, e)
			}
		}
		return cut
	}
	for i := 0; i < states; i++ {
		d.Trans = append(d.Trans, edges(i, nil))
		d.Accept = append(d.Accept, true)
	}
	if t.NotFirst == "" {
		return counted(d, t.MaxChars), nil
	}
	// a separate start state: refused first runes, then as from state 0
	refuse := slices.Compact(slices.Sorted(slices.Values([]rune(t.NotFirst))))
	start := edges(0, refuse)
	d.Trans = append([][]chardfa.Edge{start}, d.Trans...)
	d.Accept = append([]bool{true}, d.Accept...)
	for i := range d.Trans {
		for k := range d.Trans[i] {
			d.Trans[i][k].To++
		}
	}
	return counted(d, t.MaxChars), nil
}

// counted is d limited to strings of at most max chars (max 0: d itself): the product of d with
// a counter, state s*(max+1)+c having read c chars.
func counted(d *chardfa.DFA, most int) *chardfa.DFA {
	if most <= 0 {
		return d
	}
	w := int32(most + 1)
	out := &chardfa.DFA{Trans: make([][]chardfa.Edge, len(d.Trans)*int(w)), Accept: make([]bool, len(d.Trans)*int(w))}
	for s, tr := range d.Trans {
		for c := int32(0); c < w; c++ {
			i := int32(s)*w + c
			out.Accept[i] = d.Accept[s]
			if c == w-1 {
				continue
			}
			es := make([]chardfa.Edge, len(tr))
			for k, e := range tr {
				es[k] = chardfa.Edge{Lo: e.Lo, Hi: e.Hi, To: e.To*w + c + 1}
			}
			out.Trans[i] = es
		}
	}
	return out
}

// ComposeSpec is the Spec of a composition.
func ComposeSpec(p Part) (Spec, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return Spec{}, fmt.Errorf("compose spec: %w", err)
	}
	return Spec{Kind: KindCompose, Text: string(b)}, nil
}
