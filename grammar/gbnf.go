package grammar

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// GBNF is llama.cpp's grammar syntax: rules `name ::= alternatives`, one per
// line (a rule continues inside parentheses and after `|`), string literals
// "..." and character classes [...] (with ^ ranges and escapes \n \r \t \\
// \" \] \xXX \uXXXX \UXXXXXXXX), `.` for any character, grouping, and the
// repetitions * + ? {m} {m,} {m,n}; `#` starts a comment. The start rule is
// root. It compiles into the same automaton as schemas (each GBNF rule a
// rule of the network), so masks, caches and limits are shared; left
// recursion is refused (the network would need an unbounded stack before
// reading a byte).

// gbnfKind is the kind of a parsed GBNF expression.
type gbnfKind uint8

const (
	gbnfLiteral gbnfKind = iota // text
	gbnfClass                   // one char of ranges
	gbnfRef                     // the rule name
	gbnfSeq                     // kids in order
	gbnfAlt                     // one of kids
	gbnfRepeat                  // kids[0], min to max times (max -1: unbounded)
)

// gbnfExpr is a parsed GBNF expression.
type gbnfExpr struct {
	kind     gbnfKind
	text     string          // gbnfLiteral: the bytes
	ranges   []chardfa.Range // gbnfClass: the chars
	name     string          // gbnfRef
	kids     []*gbnfExpr
	min, max int
	at       gbnfPos // where it starts, for errors
	// the analysis before building (analyze): ref, gbnfRef's rule (its index in the parse);
	// parent, the expression e is a kid of (nil for a rule's body); pending, the kids still to
	// be found nullable before e is; null, whether e may match no text
	ref     int32
	pending int32
	null    bool
	parent  *gbnfExpr
}

// gbnfPos is a 1-based line and column (in bytes).
type gbnfPos struct{ line, col int }

// gbnfRule is one parsed rule.
type gbnfRule struct {
	name string
	body *gbnfExpr
	at   gbnfPos
}

// gbnfParser reads GBNF text.
type gbnfParser struct {
	src  string
	pos  int // byte offset into src
	line int // line of pos (1-based)
	bol  int // offset where that line begins
}

// maxGBNFRepeat bounds {m,n} counts: each repetition is built out.
const maxGBNFRepeat = 1000

func (p *gbnfParser) at() gbnfPos { return gbnfPos{p.line, p.pos - p.bol + 1} }

func (p *gbnfParser) errAt(at gbnfPos, format string, a ...any) *Error {
	return errf("gbnf: line %d column %d: %s", at.line, at.col, fmt.Sprintf(format, a...))
}

func (p *gbnfParser) errf(format string, a ...any) *Error { return p.errAt(p.at(), format, a...) }

func (p *gbnfParser) eof() bool { return p.pos >= len(p.src) }

// space skips blanks and comments; newlines too when newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for !p.eof() {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == '#':
			for !p.eof() && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == '\n' && newlines:
			p.pos++
			p.line++
			p.bol = p.pos
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for !p.eof() && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// parseGBNF reads a whole grammar.
func parseGBNF(src string) ([]gbnfRule, error) {
	p := &gbnfParser{src: src, line: 1}
	var rules []gbnfRule
	for {
		p.space(true)
		if p.eof() {
			break
		}
		at := p.at()
		name := p.name()
		if name == "" {
			return nil, p.errf("expected a rule name, found %q", p.peekRune())
		}
		p.space(false)
		if !p.consume("::=") {
			return nil, p.errf("expected ::= after rule name %q", name)
		}
		p.space(true)
		body, err := p.alternatives(false)
		if err != nil {
			return nil, err
		}
		rules = append(rules, gbnfRule{name: name, body: body, at: at})
		p.space(false)
		if !p.eof() && p.src[p.pos] != '\n' {
			return nil, p.errf("unexpected %q", p.peekRune())
		}
	}
	return rules, nil
}

func (p *gbnfParser) peekRune() string {
	if p.eof() {
		return "end of grammar"
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return string(r)
}

func (p *gbnfParser) consume(s string) bool {
	if len(p.src)-p.pos >= len(s) && p.src[p.pos:p.pos+len(s)] == s {
		p.pos += len(s)
		return true
	}
	return false
}

// alternatives reads seq ("|" seq)*; nested (inside parentheses) lets
// sequences span lines.
func (p *gbnfParser) alternatives(nested bool) (*gbnfExpr, error) {
	at := p.at()
	var one *gbnfExpr    // the first alternative: most are the only one
	var alts []*gbnfExpr // all of them, from the second on
	for {
		s, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		switch {
		case one == nil:
			one = s
		case alts == nil:
			alts = []*gbnfExpr{one, s}
		default:
			alts = append(alts, s)
		}
		// a top-level rule continues on a line that starts with "|"
		save, line, bol := p.pos, p.line, p.bol
		p.space(true)
		if !p.eof() && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		if !nested {
			p.pos, p.line, p.bol = save, line, bol
		}
		break
	}
	if alts == nil {
		return one, nil
	}
	return &gbnfExpr{kind: gbnfAlt, kids: alts, at: at}, nil
}

// sequence reads items up to "|", ")" or (at top level) the end of the line.
func (p *gbnfParser) sequence(nested bool) (*gbnfExpr, error) {
	at := p.at()
	var one *gbnfExpr     // the first item: many sequences have no other
	var items []*gbnfExpr // all of them, from the second on
	for {
		p.space(nested)
		if p.eof() {
			break
		}
		c := p.src[p.pos]
		if c == '|' || c == ')' || c == '\n' {
			break
		}
		item, err := p.item(nested)
		if err != nil {
			return nil, err
		}
		if item, err = p.repetition(item); err != nil {
			return nil, err
		}
		switch {
		case one == nil:
			one = item
		case items == nil:
			items = []*gbnfExpr{one, item}
		default:
			items = append(items, item)
		}
	}
	if one != nil && items == nil {
		return one, nil
	}
	return &gbnfExpr{kind: gbnfSeq, kids: items, at: at}, nil
}

// item reads one literal, class, reference, "." or parenthesized group.
func (p *gbnfParser) item(nested bool) (*gbnfExpr, error) {
	at := p.at()
	switch c := p.src[p.pos]; {
	case c == '"':
		p.pos++
		var text []byte
		for {
			if p.eof() || p.src[p.pos] == '\n' {
				return nil, p.errAt(at, "unterminated string literal")
			}
			if p.src[p.pos] == '"' {
				p.pos++
				break
			}
			r, err := p.char()
			if err != nil {
				return nil, err
			}
			text = utf8.AppendRune(text, r)
		}
		return &gbnfExpr{kind: gbnfLiteral, text: string(text), at: at}, nil
	case c == '[':
		return p.class()
	case c == '.':
		p.pos++
		return &gbnfExpr{kind: gbnfClass, ranges: chardfa.AnyChar, at: at}, nil
	case c == '(':
		p.pos++
		p.space(true)
		e, err := p.alternatives(true)
		if err != nil {
			return nil, err
		}
		p.space(true)
		if p.eof() || p.src[p.pos] != ')' {
			return nil, p.errf("expected ) to close the group opened at line %d column %d", at.line, at.col)
		}
		p.pos++
		return e, nil
	case isNameByte(c):
		return &gbnfExpr{kind: gbnfRef, name: p.name(), at: at}, nil
	}
	return nil, p.errf("unexpected %q", p.peekRune())
}

// char reads one char of a literal or class, decoding escapes.
func (p *gbnfParser) char() (rune, error) {
	at := p.at()
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && n <= 1 {
		return 0, p.errf("invalid UTF-8")
	}
	p.pos += n
	if r != '\\' {
		return r, nil
	}
	if p.eof() {
		return 0, p.errAt(at, "trailing backslash")
	}
	e := p.src[p.pos]
	p.pos++
	switch e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^':
		return rune(e), nil
	case 'x', 'u', 'U':
		digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
		if len(p.src)-p.pos < digits {
			return 0, p.errAt(at, "short \\%c escape", e)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+digits], 16, 32)
		if err != nil || v > chardfa.MaxRune || v >= 0xD800 && v <= 0xDFFF {
			return 0, p.errAt(at, "bad \\%c escape %q", e, p.src[p.pos:p.pos+digits])
		}
		p.pos += digits
		return rune(v), nil
	}
	return 0, p.errAt(at, "unknown escape \\%c", e)
}

// class reads [...] or [^...].
func (p *gbnfParser) class() (*gbnfExpr, error) {
	at := p.at()
	p.pos++ // [
	neg := false
	if !p.eof() && p.src[p.pos] == '^' {
		neg = true
		p.pos++
	}
	var rs []chardfa.Range
	for {
		if p.eof() || p.src[p.pos] == '\n' {
			return nil, p.errAt(at, "unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if len(p.src)-p.pos >= 2 && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errAt(at, "character range %q-%q is reversed", lo, hi)
			}
		}
		rs = append(rs, chardfa.Range{Lo: lo, Hi: hi})
	}
	if neg {
		rs = chardfa.Negate(rs)
	}
	return &gbnfExpr{kind: gbnfClass, ranges: rs, at: at}, nil
}

// repetition reads the quantifiers after e.
func (p *gbnfParser) repetition(e *gbnfExpr) (*gbnfExpr, error) {
	for !p.eof() {
		at := p.at()
		lo, hi := 0, 0
		switch p.src[p.pos] {
		case '*':
			lo, hi = 0, -1
			p.pos++
		case '+':
			lo, hi = 1, -1
			p.pos++
		case '?':
			lo, hi = 0, 1
			p.pos++
		case '{':
			p.pos++
			var err error
			if lo, hi, err = p.braces(at); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
		e = &gbnfExpr{kind: gbnfRepeat, kids: []*gbnfExpr{e}, min: lo, max: hi, at: at}
	}
	return e, nil
}

// braces reads "m}", "m,}" or "m,n}" after "{".
func (p *gbnfParser) braces(at gbnfPos) (int, int, error) {
	num := func() (int, bool) {
		p.space(false)
		start := p.pos
		for !p.eof() && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		v, err := strconv.Atoi(p.src[start:p.pos])
		return v, err == nil
	}
	lo, ok := num()
	if !ok {
		return 0, 0, p.errf("expected a count in {}")
	}
	hi := lo
	p.space(false)
	if p.consume(",") {
		p.space(false)
		if !p.eof() && p.src[p.pos] == '}' {
			hi = -1
		} else if hi, ok = num(); !ok {
			return 0, 0, p.errf("expected a count after , in {}")
		}
	}
	p.space(false)
	if !p.consume("}") {
		return 0, 0, p.errf("expected } to close the repetition")
	}
	if hi >= 0 && hi < lo {
		return 0, 0, p.errAt(at, "repetition {%d,%d}: the maximum is below the minimum", lo, hi)
	}
	if lo > maxGBNFRepeat || hi > maxGBNFRepeat {
		return 0, 0, p.errAt(at, "repetition count over %d", maxGBNFRepeat)
	}
	return lo, hi, nil
}

// gbnfCompiler builds a parsed grammar into the automaton.
type gbnfCompiler struct {
	b     *builder
	rules map[string]int32 // GBNF rule name -> automaton rule
	// parsed is the grammar's rules in order (gbnfExpr.ref indexes it), and nullable says
	// which may match no text (analyze fills both)
	parsed   []gbnfRule
	nullable []bool
	root     int32 // root's index in parsed
}

// GBNF compiles a grammar in llama.cpp's GBNF syntax, starting at rule root.
// Malformed grammars are an *Error naming the line and column.
func (c *Compiler) GBNF(grammar string) (*Grammar, error) {
	return c.gbnf(context.Background(), grammar)
}

func (c *Compiler) gbnf(ctx context.Context, grammar string) (*Grammar, error) {
	if err := c.checkGBNFBytes(grammar); err != nil {
		return nil, err
	}
	return c.cached(ctx, "g\x00"+grammar, func(ctx context.Context) (*Grammar, error) {
		b := c.newBuilder(ctx)
		b.g.rules = []int32{-1}
		b.emptyWhat = "the grammar accepts no text"
		root, err := c.buildGBNF(b, grammar)
		if err != nil {
			return nil, err
		}
		return c.finish(b, b.call(root))
	})
}

// checkGBNFBytes refuses a GBNF text over Limits.MaxGBNFBytes before anything reads it.
func (c *Compiler) checkGBNFBytes(grammar string) error {
	if limit := c.opts.Limits.MaxGBNFBytes; len(grammar) > limit {
		return errf("GBNF grammar is %d bytes, over the %d-byte limit (--grammar-max-gbnf-bytes)", len(grammar), limit)
	}
	return nil
}

// buildGBNF parses grammar and adds its rules to b, returning the rule of root. A composition
// (compose.go) builds a grammar into its own builder this way.
func (c *Compiler) buildGBNF(b *builder, grammar string) (int32, error) {
	if err := c.checkGBNFBytes(grammar); err != nil {
		return 0, err
	}
	rules, err := parseGBNF(grammar)
	if err != nil {
		return 0, err
	}
	defer func(outer int32) { b.rule = outer }(b.rule) // empty-language reasons stay the caller's
	gc := &gbnfCompiler{b: b, rules: map[string]int32{}}
	if err := gc.analyze(rules); err != nil {
		return 0, err
	}
	if err := gc.checkSize(rules, b.maxNodes-len(b.g.nodes)); err != nil {
		return 0, err
	}
	if err := gc.checkWidth(); err != nil {
		return 0, err
	}
	for _, r := range rules {
		gc.rules[r.name] = int32(len(b.g.rules))
		b.g.rules = append(b.g.rules, -1)
	}
	for _, r := range rules {
		b.rule = gc.rules[r.name]
		f := gc.build(r.body)
		if b.over {
			return 0, b.overErr("grammar")
		}
		b.g.nodes[f.out].final = true
		b.g.rules[gc.rules[r.name]] = f.in
	}
	return gc.rules["root"], nil
}

// analyze refuses a rule defined twice, a grammar without root, references to rules that are not
// defined and left recursion, resolving each
// reference to its rule and finding what may match no text on the way. Every pass is linear in
// the grammar (a fixpoint that re-walked every rule until nothing changed took seconds for a
// chain of ten thousand rules).
func (gc *gbnfCompiler) analyze(rules []gbnfRule) error {
	gc.parsed = rules
	index := make(map[string]int32, len(rules))
	for i := range rules {
		r := &rules[i]
		if prev, ok := index[r.name]; ok {
			return errf("gbnf: line %d column %d: rule %q is already defined at line %d", r.at.line, r.at.col, r.name, rules[prev].at.line)
		}
		index[r.name] = int32(i)
	}
	root, ok := index["root"]
	if !ok {
		return errf("gbnf: no rule named root")
	}
	gc.root = root
	refsTo := make([][]*gbnfExpr, len(rules)) // the references to each rule
	var queue []*gbnfExpr                     // expressions found nullable, their parents not yet told
	nowNull := func(e *gbnfExpr) {
		if !e.null {
			e.null = true
			queue = append(queue, e)
		}
	}
	var undefined *gbnfExpr
	var walk func(e, parent *gbnfExpr)
	walk = func(e, parent *gbnfExpr) {
		e.parent, e.null = parent, false
		switch e.kind {
		case gbnfLiteral:
			if e.text == "" {
				nowNull(e)
			}
		case gbnfRef:
			i, ok := index[e.name]
			if !ok {
				if undefined == nil {
					undefined = e
				}
				return
			}
			e.ref = i
			refsTo[i] = append(refsTo[i], e)
		case gbnfSeq:
			e.pending = int32(len(e.kids)) // all of them
			if len(e.kids) == 0 {
				nowNull(e)
			}
		case gbnfAlt:
			e.pending = 1 // any of them
		case gbnfRepeat:
			e.pending = 1
			if e.min == 0 {
				nowNull(e)
			}
		}
		for _, k := range e.kids {
			walk(k, e)
		}
	}
	for i := range rules {
		walk(rules[i].body, nil)
	}
	if e := undefined; e != nil {
		return errf("gbnf: line %d column %d: undefined rule %q", e.at.line, e.at.col, e.name)
	}
	// propagate nullability up the expressions and through the references (each expression
	// is queued at most once)
	gc.nullable = make([]bool, len(rules))
	bodyOf := make(map[*gbnfExpr]int32, len(rules))
	for i := range rules {
		bodyOf[rules[i].body] = int32(i)
	}
	for len(queue) > 0 {
		e := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if p := e.parent; p != nil {
			if p.pending--; p.pending == 0 {
				nowNull(p)
			}
			continue
		}
		if i := bodyOf[e]; !gc.nullable[i] { // a rule's body: its references are nullable too
			gc.nullable[i] = true
			for _, ref := range refsTo[i] {
				nowNull(ref)
			}
		}
	}
	return gc.checkLeftRecursion()
}

// checkLeftRecursion refuses a rule that can reach itself before any byte.
func (gc *gbnfCompiler) checkLeftRecursion() error {
	rules := gc.parsed
	// first[r]: the references rule r may follow before reading a byte
	first := make([][]*gbnfExpr, len(rules))
	var starts func(e *gbnfExpr, out *[]*gbnfExpr)
	starts = func(e *gbnfExpr, out *[]*gbnfExpr) {
		switch e.kind {
		case gbnfRef:
			*out = append(*out, e)
		case gbnfSeq:
			for _, k := range e.kids {
				starts(k, out)
				if !k.null {
					return
				}
			}
		case gbnfAlt, gbnfRepeat:
			for _, k := range e.kids {
				starts(k, out)
			}
		}
	}
	for i := range rules {
		starts(rules[i].body, &first[i])
	}
	state := make([]uint8, len(rules)) // 1 on the path, 2 done
	var visit func(r int32) error
	visit = func(r int32) error {
		state[r] = 1
		for _, ref := range first[r] {
			switch state[ref.ref] {
			case 1:
				return errf("gbnf: line %d column %d: left recursion: rule %q can reach itself before any text", ref.at.line, ref.at.col, ref.name)
			case 0:
				if err := visit(ref.ref); err != nil {
					return err
				}
			}
		}
		state[r] = 2
		return nil
	}
	for i := range rules {
		if state[i] == 0 {
			if err := visit(int32(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sizeCap saturates node estimates: {1000} nested three deep is 10^9 copies.
const sizeCap = 1 << 40

// nodesOf estimates how many automaton nodes build makes for e (saturating at sizeCap), and
// reports the repetition whose expansion is the largest part of it.
func nodesOf(e *gbnfExpr, worst **gbnfExpr, worstN *int64) int64 {
	add := func(a, b int64) int64 { return min(a+b, sizeCap) }
	mul := func(a int64, k int) int64 {
		if k == 0 {
			return 0
		}
		if a > sizeCap/int64(k) {
			return sizeCap
		}
		return a * int64(k)
	}
	switch e.kind {
	case gbnfLiteral:
		return int64(len(e.text)) + 1
	case gbnfClass:
		return 2 + 3*int64(len(e.ranges)) // the UTF-8 suffix nodes of each range
	case gbnfRef:
		return 2
	case gbnfSeq, gbnfAlt:
		n := int64(2)
		for _, k := range e.kids {
			n = add(n, nodesOf(k, worst, worstN))
		}
		return n
	}
	one := nodesOf(e.kids[0], worst, worstN)
	copies := e.min
	if e.max < 0 {
		copies++
	} else {
		copies = e.max
	}
	n := add(mul(add(one, 2), copies), 2)
	if n > *worstN {
		*worst, *worstN = e, n
	}
	return n
}

// checkSize refuses, before anything is built, a grammar whose repetitions expand beyond the
// node budget left (each {m,n} is built out m..n times, so nested counts multiply: a 34-byte
// grammar can ask for 10^9 nodes).
func (gc *gbnfCompiler) checkSize(rules []gbnfRule, budget int) error {
	var total int64
	var worst *gbnfExpr
	var worstN int64
	for _, r := range rules {
		total = min(total+nodesOf(r.body, &worst, &worstN), sizeCap)
	}
	if total <= int64(budget) {
		return nil
	}
	approx := func(n int64) string {
		if n >= sizeCap {
			return "over 10^12"
		}
		return fmt.Sprintf("about %d", n)
	}
	if worst != nil {
		return errf("gbnf: line %d column %d: repetition expands to %s automaton nodes (the whole grammar to %s), over the %d node limit",
			worst.at.line, worst.at.col, approx(worstN), approx(total), budget)
	}
	return errf("gbnf: grammar expands to %s automaton nodes, over the %d node limit", approx(total), budget)
}

// copiesOf is how many copies of its operand build makes for repetition e: min, then max-min
// optional ones or one loop.
func copiesOf(e *gbnfExpr) int64 {
	if e.max < 0 {
		return int64(e.min) + 1
	}
	return int64(e.max)
}

// checkWidth refuses, before anything is built, a grammar with a point where more than
// maxStateConfigs alternatives are active at once: 30,000 `.+` rules under one alternation
// compile to a DFA state of 30,000 configurations, each closed once per trie node a mask visits,
// and would be refused by checkMaskCost anyway, but only after their automaton (and the closure)
// took a hundred megabytes. The count is that of the automaton build makes: each char class or
// literal at the start of a branch is one configuration, rules reached before any text add
// theirs (left recursion is already refused, so this ends), and every copy of a repetition that
// may be skipped adds its own. It is a lower bound of the DFA state reached there (what follows
// that point in its callers may add configurations), so a grammar it refuses has a state too
// wide to mask, whether or not checkMaskCost's probe of the first states would have met it. (The
// DFA cuts calls nested deeper than maxStackDepth: a grammar whose width needs that many nested
// rules before any text is refused here all the same.)
func (gc *gbnfCompiler) checkWidth() error {
	worst, n := gc.widest()
	if n <= maxStateConfigs {
		return nil
	}
	count := fmt.Sprint(n)
	if n >= sizeCap {
		count = "over 10^12"
	}
	return errf("gbnf: line %d column %d: grammar has %s alternatives active at once here (at most %d): a token mask would cost seconds at every step",
		worst.at.line, worst.at.col, count, maxStateConfigs)
}

// widest returns the point of the rules reachable from root where the most configurations
// are active at once, and how many (see checkWidth).
func (gc *gbnfCompiler) widest() (*gbnfExpr, int64) {
	add := func(a, b int64) int64 { return min(a+b, sizeCap) }
	mul := func(a, k int64) int64 {
		if k == 0 || a == 0 {
			return 0
		}
		if a > sizeCap/k {
			return sizeCap
		}
		return a * k
	}
	firsts := map[*gbnfExpr]int64{}
	// first is how many configurations entering e opens. It follows references only where
	// no text has been read yet, which ends: left recursion is refused.
	var first func(e *gbnfExpr) int64
	first = func(e *gbnfExpr) int64 {
		switch e.kind { // leaves are not memoized
		case gbnfLiteral:
			return int64(min(len(e.text), 1))
		case gbnfClass:
			return int64(min(len(e.ranges), 1))
		case gbnfRef:
			return first(gc.parsed[e.ref].body)
		}
		if n, ok := firsts[e]; ok {
			return n
		}
		var n int64
		switch e.kind {
		case gbnfSeq:
			for _, k := range e.kids {
				n = add(n, first(k))
				if !k.null {
					break
				}
			}
		case gbnfAlt:
			for _, k := range e.kids {
				n = add(n, first(k))
			}
		case gbnfRepeat:
			n = first(e.kids[0])
			if e.null { // every copy may be skipped: all open at once
				n = mul(n, copiesOf(e))
			}
		}
		firsts[e] = n
		return n
	}
	var worst *gbnfExpr
	var worstN int64
	note := func(e *gbnfExpr, n int64) {
		if n > worstN {
			worst, worstN = e, n
		}
	}
	// widths notes the width of each point inside e where text may resume (each suffix of a
	// sequence, each alternation, the optional tail of a repetition), not following references
	var widths func(e *gbnfExpr)
	widths = func(e *gbnfExpr) {
		switch e.kind {
		case gbnfSeq:
			var w int64
			for i := len(e.kids) - 1; i >= 0; i-- {
				k := e.kids[i]
				if k.null {
					w = add(first(k), w)
				} else {
					w = first(k)
				}
				note(k, w)
			}
		case gbnfAlt:
			note(e, first(e))
		case gbnfRepeat:
			optional := int64(1) // e*, e+: the loop
			if e.max >= 0 {
				optional = int64(e.max - e.min)
			}
			note(e, max(first(e), mul(first(e.kids[0]), optional)))
		}
		for _, k := range e.kids {
			widths(k)
		}
	}
	// the rules reachable from root, each walked once (the ones not reachable match nothing)
	seen := make([]bool, len(gc.parsed))
	seen[gc.root] = true
	todo := []int32{gc.root}
	var refs func(e *gbnfExpr)
	refs = func(e *gbnfExpr) {
		if e.kind == gbnfRef && !seen[e.ref] {
			seen[e.ref] = true
			todo = append(todo, e.ref)
		}
		for _, k := range e.kids {
			refs(k)
		}
	}
	for len(todo) > 0 {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		widths(gc.parsed[r].body)
		refs(gc.parsed[r].body)
	}
	return worst, worstN
}

// build emits the automaton of e. Once the builder is over its budget (or its compile was
// given up) it returns at once: the caller sees b.over and fails.
func (gc *gbnfCompiler) build(e *gbnfExpr) fragment {
	b := gc.b
	if b.over {
		return fragment{}
	}
	switch e.kind {
	case gbnfLiteral:
		return b.lit(e.text)
	case gbnfClass:
		return b.charClass(e.ranges)
	case gbnfRef:
		return b.call(gc.rules[e.name])
	case gbnfSeq:
		fs := make([]fragment, len(e.kids))
		for i, k := range e.kids {
			fs[i] = gc.build(k)
		}
		return b.seq(fs...)
	case gbnfAlt:
		fs := make([]fragment, len(e.kids))
		for i, k := range e.kids {
			fs[i] = gc.build(k)
		}
		return b.alt(fs...)
	}
	// repetition: min copies, then max-min optional ones or a loop
	var fs []fragment
	for range e.min {
		if b.over {
			return fragment{}
		}
		fs = append(fs, gc.build(e.kids[0]))
	}
	switch {
	case e.max < 0:
		fs = append(fs, b.star(gc.build(e.kids[0])))
	default:
		for range e.max - e.min {
			if b.over {
				return fragment{}
			}
			fs = append(fs, b.opt(gc.build(e.kids[0])))
		}
	}
	return b.seq(fs...)
}

// charClass emits one UTF-8 encoded char of ranges.
func (b *builder) charClass(ranges []chardfa.Range) fragment {
	in, out := b.node(), b.node()
	memo := map[string]int32{}
	for _, r := range ranges {
		chardfa.UTF8Ranges(r.Lo, r.Hi, func(seq [][2]byte) {
			b.edge(in, seq[0][0], seq[0][1], b.suffix(out, seq[1:], memo))
		})
	}
	return fragment{in, out}
}

// Choice compiles a grammar accepting exactly one of options (raw text, no
// quotes), vLLM's guided_choice.
func (c *Compiler) Choice(options []string) (*Grammar, error) {
	if len(options) == 0 {
		return nil, errf("choice needs at least one option")
	}
	key := []byte("c\x00")
	for _, o := range options {
		key = strconv.AppendQuote(key, o)
	}
	if len(key) > c.opts.Limits.MaxSchemaBytes {
		return nil, errf("choice is %d bytes, over the %d byte limit", len(key), c.opts.Limits.MaxSchemaBytes)
	}
	return c.cached(context.Background(), string(key), func(ctx context.Context) (*Grammar, error) {
		b := c.newBuilder(ctx)
		b.g.rules = []int32{0}
		b.emptyWhat = "choice accepts no text"
		fs := make([]fragment, len(options))
		for i, o := range options {
			if !utf8.ValidString(o) {
				return nil, errf("choice option %d is not valid UTF-8", i)
			}
			fs[i] = b.lit(o)
		}
		return c.finish(b, b.alt(fs...))
	})
}
