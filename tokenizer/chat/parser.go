package chat

import (
	"fmt"
	"strconv"
)

// UnsupportedError reports a template feature this engine does not
// implement. Compile returns it rather than render something different
// from what transformers would.
type UnsupportedError struct {
	Feature string // e.g. "{% include %}", "filter 'wordwrap'"
	Line    int
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("line %d: unsupported template feature: %s", e.Line, e.Feature)
}

// maxNesting bounds parser recursion so hostile templates cannot exhaust the stack.
const maxNesting = 200

type parser struct {
	toks  []token
	pos   int
	depth int
}

func parse(toks []token) ([]stmt, error) {
	p := &parser{toks: toks}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("unexpected '%s'", end)
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", p.cur().line, fmt.Sprintf(format, args...))
}

func (p *parser) unsupported(feature string) error {
	return &UnsupportedError{Feature: feature, Line: p.cur().line}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf("expected '%s', got %s", op, p.cur().describe())
	}
	return nil
}

func (p *parser) expectName(name string) error {
	if !p.skipName(name) {
		return p.errorf("expected '%s', got %s", name, p.cur().describe())
	}
	return nil
}

func (p *parser) expectKind(k tokenKind) (token, error) {
	if p.cur().kind != k {
		return token{}, p.errorf("expected %s, got %s", k, p.cur().describe())
	}
	return p.next(), nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errorf("template nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// subparse parses statements until a block tag whose name is in ends; it
// returns that name with the parser positioned after it (inside the tag).
func (p *parser) subparse(ends []string) ([]stmt, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			if len(ends) > 0 {
				return nil, "", p.errorf("unexpected end of template, expected %s", quoteList(ends))
			}
			return body, "", nil
		case tokText:
			p.next()
			body = append(body, &textStmt{text: t.val})
		case tokVarBegin:
			p.next()
			x, err := p.parseTuple(true, nil, false)
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tokVarEnd); err != nil {
				return nil, "", err
			}
			body = append(body, &outputStmt{x: x})
		case tokBlockBegin:
			p.next()
			name := p.cur()
			if name.kind != tokName {
				return nil, "", p.errorf("expected statement name, got %s", name.describe())
			}
			for _, e := range ends {
				if name.val == e {
					p.next()
					return body, e, nil
				}
			}
			s, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if s != nil {
				body = append(body, s)
			}
		default:
			return nil, "", p.errorf("unexpected %s", t.describe())
		}
	}
}

func quoteList(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += " or "
		}
		s += "'" + n + "'"
	}
	return s
}

func (p *parser) endTag() error {
	_, err := p.expectKind(tokBlockEnd)
	return err
}

// parseStatement parses one {% ... %} statement (cursor on its name) up to
// and including its final block end.
func (p *parser) parseStatement() (stmt, error) {
	name := p.next().val
	switch name {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "with":
		return p.parseWith()
	case "break", "continue":
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if name == "break" {
			return &breakStmt{}, nil
		}
		return &continueStmt{}, nil
	case "generation":
		// transformers' AssistantTracker extension: marks assistant text for
		// return_assistant_tokens_mask. It renders its body unchanged, in its
		// own scope (it is a call block).
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		return &withStmt{body: body}, nil
	case "include", "import", "from", "extends", "block", "call", "filter", "autoescape", "do", "trans", "pluralize", "print":
		p.pos--
		return nil, p.unsupported("{% " + name + " %}")
	}
	p.pos--
	return nil, p.errorf("unknown statement '%s'", name)
}

func (p *parser) parseIf() (stmt, error) {
	s := &ifStmt{}
	for {
		cond, err := p.parseTuple(false, nil, false)
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, end, err := p.subparse([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		s.conds = append(s.conds, cond)
		s.bodies = append(s.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endTag(); err != nil {
				return nil, err
			}
			s.elseBody, _, err = p.subparse([]string{"endif"})
			if err != nil {
				return nil, err
			}
		}
		return s, p.endTag()
	}
}

func (p *parser) parseFor() (stmt, error) {
	target, err := p.parseAssignTarget(false, "in")
	if err != nil {
		return nil, err
	}
	if err := p.expectName("in"); err != nil {
		return nil, err
	}
	iter, err := p.parseTuple(false, []string{"recursive"}, false)
	if err != nil {
		return nil, err
	}
	s := &forStmt{target: target, iter: iter}
	if p.skipName("if") {
		if s.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.unsupported("recursive for loops")
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	body, end, err := p.subparse([]string{"endfor", "else"})
	if err != nil {
		return nil, err
	}
	s.body = body
	if end == "else" {
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if s.elseBody, _, err = p.subparse([]string{"endfor"}); err != nil {
			return nil, err
		}
	}
	return s, p.endTag()
}

func (p *parser) parseSet() (stmt, error) {
	target, err := p.parseAssignTarget(true, "")
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		value, err := p.parseTuple(true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setStmt{target: target, value: value}, p.endTag()
	}
	s := &setBlockStmt{target: target}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		s.filters = append(s.filters, f)
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	if s.body, _, err = p.subparse([]string{"endset"}); err != nil {
		return nil, err
	}
	return s, p.endTag()
}

func (p *parser) parseMacro() (stmt, error) {
	name, err := p.expectKind(tokName)
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name.val}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.skipOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.skipOp(")") {
				break
			}
		}
		param, err := p.expectKind(tokName)
		if err != nil {
			return nil, err
		}
		var def expr
		if p.skipOp("=") {
			if def, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		} else if len(m.defaults) > 0 && m.defaults[len(m.defaults)-1] != nil {
			return nil, p.errorf("non-default argument follows default argument")
		}
		m.params = append(m.params, param.val)
		m.defaults = append(m.defaults, def)
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	if m.body, _, err = p.subparse([]string{"endmacro"}); err != nil {
		return nil, err
	}
	if p.cur().kind == tokName && p.cur().val == m.name {
		p.next()
	}
	return &macroStmt{m: m}, p.endTag()
}

func (p *parser) parseWith() (stmt, error) {
	s := &withStmt{}
	for p.cur().kind != tokBlockEnd {
		if len(s.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		target, err := p.parseAssignTarget(false, "")
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		value, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, target)
		s.values = append(s.values, value)
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	var err error
	if s.body, _, err = p.subparse([]string{"endwith"}); err != nil {
		return nil, err
	}
	return s, p.endTag()
}

// parseAssignTarget parses `name`, `a, b` or (withNamespace) `ns.attr`.
func (p *parser) parseAssignTarget(withNamespace bool, endName string) (assignTarget, error) {
	if withNamespace && p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "." {
		ns := p.next().val
		p.next()
		attr, err := p.expectKind(tokName)
		if err != nil {
			return assignTarget{}, err
		}
		return assignTarget{names: []string{ns}, nsAttr: attr.val}, nil
	}
	var t assignTarget
	paren := p.skipOp("(")
	for {
		name, err := p.expectKind(tokName)
		if err != nil {
			return assignTarget{}, p.errorf("can't assign to %s", p.cur().describe())
		}
		t.names = append(t.names, name.val)
		if !p.skipOp(",") {
			break
		}
		t.tuple = true
		if paren && p.isOp(")") || endName != "" && p.isName(endName) || p.isOp("=") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return assignTarget{}, err
		}
	}
	for _, n := range t.names {
		if n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None" {
			return assignTarget{}, p.errorf("can't assign to keyword '%s'", n)
		}
	}
	return t, nil
}

// parseTuple parses an expression or a comma-separated tuple of them.
func (p *parser) parseTuple(withCond bool, endNames []string, explicitParens bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(endNames) {
			break
		}
		x, err := p.parseExpression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.errorf("expected an expression, got %s", p.cur().describe())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) isTupleEnd(endNames []string) bool {
	t := p.cur()
	switch t.kind {
	case tokVarEnd, tokBlockEnd, tokEOF:
		return true
	case tokOp:
		return t.val == ")"
	case tokName:
		for _, n := range endNames {
			if t.val == n {
				return true
			}
		}
	}
	return false
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if withCond {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() (expr, error) {
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.skipName("else") {
			if els, err = p.parseCondExpr(); err != nil {
				return nil, err
			}
		}
		x = &condExpr{cond: cond, then: x, els: els}
	}
	return x, nil
}

// leftAssoc parses `operand (op operand)*`, joining left to right: takeOp consumes the operator
// at the cursor and returns it, or returns false where there is none.
func (p *parser) leftAssoc(operand func() (expr, error), takeOp func() (string, bool), join func(op string, l, r expr) expr) (expr, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		op, ok := takeOp()
		if !ok {
			return l, nil
		}
		r, err := operand()
		if err != nil {
			return nil, err
		}
		l = join(op, l, r)
	}
}

// takeName is a leftAssoc operator: the keyword name.
func (p *parser) takeName(name string) func() (string, bool) {
	return func() (string, bool) { return name, p.skipName(name) }
}

// takeOps is a leftAssoc operator: any of ops.
func (p *parser) takeOps(ops ...string) func() (string, bool) {
	return func() (string, bool) {
		for _, op := range ops {
			if p.isOp(op) {
				return p.next().val, true
			}
		}
		return "", false
	}
}

func binary(op string, l, r expr) expr { return &binExpr{op: op, l: l, r: r} }

func (p *parser) parseOr() (expr, error) {
	return p.leftAssoc(p.parseAnd, p.takeName("or"), func(_ string, l, r expr) expr { return &orExpr{l: l, r: r} })
}

func (p *parser) parseAnd() (expr, error) {
	return p.leftAssoc(p.parseNot, p.takeName("and"), func(_ string, l, r expr) expr { return &andExpr{l: l, r: r} })
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{x: x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tokOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tokName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tokName && t.val == "not" && p.peek().kind == tokName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	return p.leftAssoc(p.parseConcat, p.takeOps("+", "-"), binary)
}

func (p *parser) parseConcat() (expr, error) {
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return x, nil
	}
	parts := []expr{x}
	for p.skipOp("~") {
		y, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, y)
	}
	return &concatExpr{parts: parts}, nil
}

func (p *parser) parseMath2() (expr, error) {
	return p.leftAssoc(p.parsePow, p.takeOps("*", "/", "//", "%"), binary)
}

// parsePow is left-associative, as Jinja's is (2 ** 3 ** 2 is 64).
func (p *parser) parsePow() (expr, error) {
	return p.leftAssoc(func() (expr, error) { return p.parseUnary(true) }, p.takeOps("**"), binary)
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var x expr
	var err error
	switch {
	case p.skipOp("-"):
		var inner expr
		if inner, err = p.parseUnary(false); err == nil {
			x = &negExpr{x: inner}
		}
	case p.skipOp("+"):
		var inner expr
		if inner, err = p.parseUnary(false); err == nil {
			x = &posExpr{x: inner}
		}
	default:
		x, err = p.parsePrimary()
	}
	if err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{val: true}, nil
		case "false", "False":
			return &constExpr{val: false}, nil
		case "none", "None":
			return &constExpr{val: nil}, nil
		}
		return &nameExpr{name: t.val}, nil
	case tokString:
		s := p.next().val
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &constExpr{val: s}, nil
	case tokInt:
		p.next()
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, p.unsupported("integer literal " + t.val + " beyond 64 bits")
		}
		return &constExpr{val: n}, nil
	case tokFloat:
		p.next()
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.errorf("bad float literal %s", t.val)
		}
		return &constExpr{val: f}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.parseTuple(true, nil, true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			for !p.skipOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.skipOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.skipOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.skipOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			return d, nil
		}
	}
	return nil, p.errorf("unexpected %s", t.describe())
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			x, err = p.parseSubscript(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.skipOp("|"):
			x, err = p.parseFilter(x)
		case p.isName("is"):
			x, err = p.parseTest(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	if p.skipOp(".") {
		t := p.next()
		switch t.kind {
		case tokName:
			return &attrExpr{obj: x, name: t.val}, nil
		case tokInt:
			n, err := strconv.ParseInt(t.val, 10, 64)
			if err != nil {
				return nil, p.errorf("bad index %s", t.val)
			}
			return &itemExpr{obj: x, key: &constExpr{val: n}}, nil
		}
		return nil, p.errorf("expected name or number after '.'")
	}
	p.next() // [
	var keys []expr
	for !p.skipOp("]") {
		if len(keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.skipOp("]") {
				break
			}
		}
		k, err := p.parseSubscribed(x, len(keys) == 0)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	switch len(keys) {
	case 0:
		return nil, p.errorf("expected subscript expression")
	case 1:
		if s, ok := keys[0].(*sliceExpr); ok {
			return s, nil
		}
		return &itemExpr{obj: x, key: keys[0]}, nil
	}
	return nil, p.unsupported("tuple subscripts")
}

// parseSubscribed parses one subscript: an expression or a slice a:b:c.
func (p *parser) parseSubscribed(obj expr, first bool) (expr, error) {
	var parts [3]expr
	var err error
	if !p.isOp(":") {
		if parts[0], err = p.parseExpression(true); err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return parts[0], nil
		}
	}
	p.next() // first ':'
	if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
		if parts[1], err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.skipOp(":") && !p.isOp("]") && !p.isOp(",") {
		if parts[2], err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if !first {
		return nil, p.unsupported("multi-dimensional slices")
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

// parseArgs parses `(a, b, k=v)` with the cursor on "(".
func (p *parser) parseArgs() (args []expr, kwNames []string, kwVals []expr, err error) {
	if err = p.expectOp("("); err != nil {
		return
	}
	for !p.skipOp(")") {
		if len(args)+len(kwNames) > 0 {
			if err = p.expectOp(","); err != nil {
				return
			}
			if p.skipOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			err = p.unsupported("*args and **kwargs in calls")
			return
		}
		if p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			var v expr
			if v, err = p.parseExpression(true); err != nil {
				return
			}
			kwNames = append(kwNames, name)
			kwVals = append(kwVals, v)
			continue
		}
		if len(kwNames) > 0 {
			err = p.errorf("positional argument follows keyword argument")
			return
		}
		var v expr
		if v, err = p.parseExpression(true); err != nil {
			return
		}
		args = append(args, v)
	}
	return
}

func (p *parser) parseCall(fn expr) (expr, error) {
	if a, ok := fn.(*attrExpr); ok && !knownMethods[a.name] {
		return nil, p.unsupported("method '" + a.name + "()'")
	}
	if n, ok := fn.(*nameExpr); ok && unsupportedGlobals[n.name] {
		return nil, p.unsupported("global '" + n.name + "()'")
	}
	args, kwNames, kwVals, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwNames: kwNames, kwVals: kwVals}, nil
}

func (p *parser) parseFilter(arg expr) (*filterExpr, error) {
	t, err := p.expectKind(tokName)
	if err != nil {
		return nil, err
	}
	name := t.val
	for p.isOp(".") && p.peek().kind == tokName {
		p.next()
		name += "." + p.next().val
	}
	fn, ok := filters[name]
	if !ok {
		if _, known := jinjaFilterNames[name]; known {
			return nil, p.unsupported("filter '" + name + "'")
		}
		return nil, p.errorf("no filter named '%s'", name)
	}
	f := &filterExpr{arg: arg, name: name, fn: fn}
	if p.isOp("(") {
		if f.args, f.kwNames, f.kwVals, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(arg expr) (expr, error) {
	p.next() // is
	negate := p.skipName("not")
	t, err := p.expectKind(tokName)
	if err != nil {
		return nil, err
	}
	name := t.val
	for p.isOp(".") && p.peek().kind == tokName {
		p.next()
		name += "." + p.next().val
	}
	fn, ok := tests[name]
	if !ok {
		if _, known := jinjaTestNames[name]; known {
			return nil, p.unsupported("test '" + name + "'")
		}
		return nil, p.errorf("no test named '%s'", name)
	}
	x := &testExpr{arg: arg, name: name, fn: fn, negate: negate}
	c := p.cur()
	switch {
	case c.kind == tokOp && c.val == "(":
		args, kwNames, _, err := p.parseArgs()
		if err != nil {
			return nil, err
		}
		if len(kwNames) > 0 {
			return nil, p.unsupported("keyword arguments to tests")
		}
		x.args = args
	case c.kind == tokString || c.kind == tokInt || c.kind == tokFloat ||
		c.kind == tokOp && (c.val == "[" || c.val == "{") ||
		c.kind == tokName && c.val != "else" && c.val != "or" && c.val != "and":
		if c.kind == tokName && c.val == "is" {
			return nil, p.errorf("you cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		x.args = []expr{a}
	}
	return x, nil
}
