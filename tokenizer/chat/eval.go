package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// TemplateError is the error raised by the template itself through
// raise_exception(message); Message is the template's text.
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return e.Message }

const (
	maxCallDepth = 256      // macro recursion limit (Python would hit its own)
	maxOutput    = 64 << 20 // bytes: a runaway template is an error, not an OOM
	maxRange     = 100000   // the Jinja sandbox's MAX_RANGE
)

// maxSteps bounds loop iterations plus macro calls in one render, so a
// hostile template cannot pin a CPU (nested range() loops); a variable so
// the fuzz tests can lower it.
var maxSteps = 1_000_000

type ctrl uint8

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

// frame is one variable scope. Jinja gives each for-loop iteration and
// each macro call a fresh scope; if-blocks share their parent's.
type frame struct {
	names  []string
	vals   []any
	parent *frame
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		for i := len(f.names) - 1; i >= 0; i-- {
			if f.names[i] == name {
				return f.vals[i], true
			}
		}
	}
	return nil, false
}

func (f *frame) set(name string, v any) {
	for i, n := range f.names {
		if n == name {
			f.vals[i] = v
			return
		}
	}
	f.names = append(f.names, name)
	f.vals = append(f.vals, v)
}

type evaluator struct {
	out     *strings.Builder
	globals map[string]any // caller variables, below template assignments
	depth   int
	steps   int
	opts    *Options // for strftime_now's clock; nil in plain Render
}

// loopState is the `loop` variable inside a for loop.
type loopState struct {
	items   []any
	index0  int
	changed []any
	hasPrev bool
}

func (ev *evaluator) lookup(f *frame, name string) any {
	if v, ok := f.lookup(name); ok {
		return v
	}
	if v, ok := ev.globals[name]; ok {
		return v
	}
	if b, ok := builtins[name]; ok {
		return b
	}
	return undefName(name)
}

func (ev *evaluator) step() error {
	ev.steps++
	if ev.steps > maxSteps {
		return fmt.Errorf("template exceeded %d loop iterations and macro calls", maxSteps)
	}
	return nil
}

func (ev *evaluator) write(s string) error {
	if ev.out.Len()+len(s) > maxOutput {
		return fmt.Errorf("rendered output exceeds %d bytes", maxOutput)
	}
	ev.out.WriteString(s)
	return nil
}

func (ev *evaluator) execList(body []stmt, f *frame) (ctrl, error) {
	for _, s := range body {
		c, err := ev.exec(s, f)
		if err != nil || c != ctrlNone {
			return c, err
		}
	}
	return ctrlNone, nil
}

func (ev *evaluator) exec(s stmt, f *frame) (ctrl, error) {
	switch s := s.(type) {
	case *textStmt:
		return ctrlNone, ev.write(s.text)
	case *outputStmt:
		v, err := ev.eval(s.x, f)
		if err != nil {
			return ctrlNone, err
		}
		if str, ok := v.(string); ok {
			return ctrlNone, ev.write(str)
		}
		return ctrlNone, ev.write(toStr(v))
	case *ifStmt:
		for i, cond := range s.conds {
			v, err := ev.eval(cond, f)
			if err != nil {
				return ctrlNone, err
			}
			if truthy(v) {
				return ev.execList(s.bodies[i], f)
			}
		}
		return ev.execList(s.elseBody, f)
	case *forStmt:
		return ctrlNone, ev.execFor(s, f)
	case *setStmt:
		v, err := ev.eval(s.value, f)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, ev.assign(s.target, v, f)
	case *setBlockStmt:
		text, err := ev.capture(s.body, f)
		if err != nil {
			return ctrlNone, err
		}
		var v any = text
		for _, flt := range s.filters {
			if v, err = ev.applyFilter(flt, v, f); err != nil {
				return ctrlNone, err
			}
		}
		return ctrlNone, ev.assign(s.target, v, f)
	case *macroStmt:
		f.set(s.m.name, &macroClosure{def: s.m, frame: f})
		return ctrlNone, nil
	case *withStmt:
		inner := &frame{parent: f}
		for i, t := range s.targets {
			v, err := ev.eval(s.values[i], f)
			if err != nil {
				return ctrlNone, err
			}
			if err := ev.assign(t, v, inner); err != nil {
				return ctrlNone, err
			}
		}
		return ev.execList(s.body, inner)
	case *breakStmt:
		return ctrlBreak, nil
	case *continueStmt:
		return ctrlContinue, nil
	}
	return ctrlNone, fmt.Errorf("internal error: unknown statement %T", s)
}

// capture renders body into a string instead of the output.
func (ev *evaluator) capture(body []stmt, f *frame) (string, error) {
	saved := ev.out
	var b strings.Builder
	ev.out = &b
	_, err := ev.execList(body, f)
	ev.out = saved
	return b.String(), err
}

func (ev *evaluator) assign(t assignTarget, v any, f *frame) error {
	if t.nsAttr != "" {
		nsv, _ := f.lookup(t.names[0])
		if nsv == nil {
			nsv = ev.globals[t.names[0]]
		}
		ns, ok := nsv.(*namespace)
		if !ok {
			return fmt.Errorf("cannot assign attribute on non-namespace object")
		}
		ns.m.Set(t.nsAttr, v)
		return nil
	}
	if !t.tuple {
		f.set(t.names[0], v)
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return fmt.Errorf("cannot unpack: %w", err)
	}
	if len(items) != len(t.names) {
		return fmt.Errorf("cannot unpack %d values into %d names", len(items), len(t.names))
	}
	for i, n := range t.names {
		f.set(n, items[i])
	}
	return nil
}

func (ev *evaluator) execFor(s *forStmt, f *frame) error {
	iv, err := ev.eval(s.iter, f)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return err
	}
	if s.cond != nil {
		var kept []any
		for _, it := range items {
			cf := &frame{parent: f}
			if err := ev.assign(s.target, it, cf); err != nil {
				return err
			}
			c, err := ev.eval(s.cond, cf)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		_, err := ev.execList(s.elseBody, f)
		return err
	}
	loop := &loopState{items: items}
	for i, it := range items {
		if err := ev.step(); err != nil {
			return err
		}
		loop.index0 = i
		// A fresh scope per iteration, as in Jinja: assignments inside the
		// body do not survive into the next iteration or after the loop.
		inner := &frame{parent: f}
		if err := ev.assign(s.target, it, inner); err != nil {
			return err
		}
		inner.set("loop", loop)
		c, err := ev.execList(s.body, inner)
		if err != nil {
			return err
		}
		if c == ctrlBreak {
			break
		}
	}
	return nil
}

// macroClosure is a macro together with the scope it was defined in.
type macroClosure struct {
	def   *macroDef
	frame *frame
}

func (ev *evaluator) callMacro(m *macroClosure, args []any, kw *kwargs) (any, error) {
	d := m.def
	if len(args) > len(d.params) {
		return nil, fmt.Errorf("macro '%s' takes not more than %d argument(s)", d.name, len(d.params))
	}
	if err := ev.step(); err != nil {
		return nil, err
	}
	if ev.depth >= maxCallDepth {
		return nil, fmt.Errorf("macro '%s': maximum recursion depth exceeded", d.name)
	}
	inner := &frame{parent: m.frame}
	for i, p := range d.params {
		switch {
		case i < len(args):
			inner.set(p, args[i])
		case kw.has(p):
			inner.set(p, kw.get(p))
		case d.defaults[i] != nil:
			v, err := ev.eval(d.defaults[i], inner)
			if err != nil {
				return nil, err
			}
			inner.set(p, v)
		default:
			inner.set(p, undefined{hint: fmt.Sprintf("parameter '%s' was not provided", p)})
		}
	}
	if kw != nil {
		for _, n := range kw.names {
			found := false
			for _, p := range d.params {
				found = found || p == n
			}
			if !found {
				return nil, fmt.Errorf("macro '%s' takes no keyword argument '%s'", d.name, n)
			}
		}
	}
	ev.depth++
	defer func() { ev.depth-- }()
	return ev.capture(d.body, inner)
}

// kwargs are keyword arguments in call order.
type kwargs struct {
	names []string
	vals  []any
}

func (k *kwargs) has(name string) bool {
	if k == nil {
		return false
	}
	for _, n := range k.names {
		if n == name {
			return true
		}
	}
	return false
}

func (k *kwargs) get(name string) any {
	if k != nil {
		for i, n := range k.names {
			if n == name {
				return k.vals[i]
			}
		}
	}
	return nil
}

func (ev *evaluator) evalArgs(args []expr, kwNames []string, kwVals []expr, f *frame) ([]any, *kwargs, error) {
	var vals []any
	if len(args) > 0 {
		var err error
		if vals, err = ev.evalList(args, f); err != nil {
			return nil, nil, err
		}
	}
	if len(kwNames) == 0 {
		return vals, nil, nil
	}
	kwv, err := ev.evalList(kwVals, f)
	if err != nil {
		return nil, nil, err
	}
	return vals, &kwargs{names: kwNames, vals: kwv}, nil
}

// evalList evaluates xs in order into a new slice.
func (ev *evaluator) evalList(xs []expr, f *frame) ([]any, error) {
	out := make([]any, len(xs))
	for i, x := range xs {
		v, err := ev.eval(x, f)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (ev *evaluator) applyFilter(x *filterExpr, v any, f *frame) (any, error) {
	args, kw, err := ev.evalArgs(x.args, x.kwNames, x.kwVals, f)
	if err != nil {
		return nil, err
	}
	out, err := x.fn(ev, v, args, kw)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, fmt.Errorf("filter %s: %w", x.name, err)
	}
	return out, nil
}

func (ev *evaluator) eval(x expr, f *frame) (any, error) {
	switch x := x.(type) {
	case *constExpr:
		return x.val, nil
	case *nameExpr:
		return ev.lookup(f, x.name), nil
	case *attrExpr:
		obj, err := ev.eval(x.obj, f)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name)
	case *itemExpr:
		obj, err := ev.eval(x.obj, f)
		if err != nil {
			return nil, err
		}
		key, err := ev.eval(x.key, f)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *sliceExpr:
		return ev.evalSlice(x, f)
	case *callExpr:
		return ev.evalCall(x, f)
	case *filterExpr:
		v, err := ev.eval(x.arg, f)
		if err != nil {
			return nil, err
		}
		return ev.applyFilter(x, v, f)
	case *testExpr:
		v, err := ev.eval(x.arg, f)
		if err != nil {
			return nil, err
		}
		args, _, err := ev.evalArgs(x.args, nil, nil, f)
		if err != nil {
			return nil, err
		}
		ok, err := x.fn(v, args)
		if err != nil {
			return nil, fmt.Errorf("test %s: %w", x.name, err)
		}
		return ok != x.negate, nil
	case *notExpr:
		v, err := ev.eval(x.x, f)
		if err != nil {
			return nil, err
		}
		return !truthy(v), nil
	case *negExpr:
		v, err := ev.eval(x.x, f)
		if err != nil {
			return nil, err
		}
		return negate(v)
	case *posExpr:
		v, err := ev.eval(x.x, f)
		if err != nil {
			return nil, err
		}
		if _, ok := asNumber(v); !ok {
			return nil, fmt.Errorf("bad operand type for unary +: '%s'", typeName(v))
		}
		if b, ok := v.(bool); ok {
			return boolInt(b), nil
		}
		return v, nil
	case *binExpr:
		l, err := ev.eval(x.l, f)
		if err != nil {
			return nil, err
		}
		r, err := ev.eval(x.r, f)
		if err != nil {
			return nil, err
		}
		return binaryOp(x.op, l, r)
	case *andExpr:
		l, err := ev.eval(x.l, f)
		if err != nil || !truthy(l) {
			return l, err
		}
		return ev.eval(x.r, f)
	case *orExpr:
		l, err := ev.eval(x.l, f)
		if err != nil || truthy(l) {
			return l, err
		}
		return ev.eval(x.r, f)
	case *concatExpr:
		var b strings.Builder
		for _, p := range x.parts {
			v, err := ev.eval(p, f)
			if err != nil {
				return nil, err
			}
			if s, ok := v.(string); ok {
				b.WriteString(s)
			} else {
				b.WriteString(toStr(v))
			}
		}
		return b.String(), nil
	case *compareExpr:
		return ev.evalCompare(x, f)
	case *condExpr:
		c, err := ev.eval(x.cond, f)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return ev.eval(x.then, f)
		}
		if x.els == nil {
			return undefined{hint: "the inline if-expression evaluated to false and no else section was defined"}, nil
		}
		return ev.eval(x.els, f)
	case *listExpr:
		out, err := ev.evalList(x.items, f)
		if err != nil {
			return nil, err
		}
		return out, nil
	case *tupleExpr:
		out, err := ev.evalList(x.items, f)
		if err != nil {
			return nil, err
		}
		return tuple(out), nil
	case *dictExpr:
		m := NewMap()
		for i, k := range x.keys {
			kv, err := ev.eval(k, f)
			if err != nil {
				return nil, err
			}
			ks, ok := kv.(string)
			if !ok {
				return nil, fmt.Errorf("unsupported template feature: dict literal with non-string key %s", repr(kv))
			}
			v, err := ev.eval(x.vals[i], f)
			if err != nil {
				return nil, err
			}
			m.Set(ks, v)
		}
		return m, nil
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", x)
}

func (ev *evaluator) evalCompare(x *compareExpr, f *frame) (any, error) {
	l, err := ev.eval(x.first, f)
	if err != nil {
		return nil, err
	}
	for i, op := range x.ops {
		r, err := ev.eval(x.rest[i], f)
		if err != nil {
			return nil, err
		}
		var ok bool
		switch op {
		case "==":
			ok = equal(l, r)
		case "!=":
			ok = !equal(l, r)
		case "in", "notin":
			in, err := contains(r, l)
			if err != nil {
				return nil, err
			}
			ok = in == (op == "in")
		default:
			c, err := compare(l, r)
			if err != nil {
				return nil, err
			}
			switch op {
			case "<":
				ok = c == -1
			case "<=":
				ok = c == -1 || c == 0
			case ">":
				ok = c == 1
			case ">=":
				ok = c == 1 || c == 0
			}
		}
		if !ok {
			return false, nil
		}
		l = r
	}
	return true, nil
}

func (ev *evaluator) evalCall(x *callExpr, f *frame) (any, error) {
	if a, ok := x.fn.(*attrExpr); ok {
		recv, err := ev.eval(a.obj, f)
		if err != nil {
			return nil, err
		}
		args, kw, err := ev.evalArgs(x.args, x.kwNames, x.kwVals, f)
		if err != nil {
			return nil, err
		}
		if handled, v, err := ev.callMethod(recv, a.name, args, kw); handled {
			return v, err
		}
		fn, err := getAttr(recv, a.name)
		if err != nil {
			return nil, err
		}
		return ev.callValue(fn, args, kw)
	}
	fn, err := ev.eval(x.fn, f)
	if err != nil {
		return nil, err
	}
	args, kw, err := ev.evalArgs(x.args, x.kwNames, x.kwVals, f)
	if err != nil {
		return nil, err
	}
	return ev.callValue(fn, args, kw)
}

func (ev *evaluator) callValue(fn any, args []any, kw *kwargs) (any, error) {
	switch c := fn.(type) {
	case builtinFunc:
		v, err := c.fn(ev, args, kw)
		if err != nil {
			var te *TemplateError
			if errors.As(err, &te) {
				return nil, err
			}
			return nil, fmt.Errorf("%s(): %w", c.name, err)
		}
		return v, nil
	case *macroClosure:
		return ev.callMacro(c, args, kw)
	case boundMethod:
		if handled, v, err := ev.callMethod(c.recv, c.name, args, kw); handled {
			return v, err
		}
	case undefined:
		return nil, c.err()
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (ev *evaluator) evalSlice(x *sliceExpr, f *frame) (any, error) {
	obj, err := ev.eval(x.obj, f)
	if err != nil {
		return nil, err
	}
	var bounds [3]any
	for i, e := range [3]expr{x.start, x.stop, x.step} {
		if e == nil {
			continue
		}
		if bounds[i], err = ev.eval(e, f); err != nil {
			return nil, err
		}
	}
	return sliceValue(obj, bounds[0], bounds[1], bounds[2])
}

// sliceValue is Python's obj[start:stop:step].
func sliceValue(obj, start, stop, step any) (any, error) {
	if u, ok := obj.(undefined); ok {
		return nil, u.err()
	}
	var n int
	var runes []rune
	s, isStr := obj.(string)
	xs, isSeq := seq(obj)
	switch {
	case isStr:
		runes = []rune(s)
		n = len(runes)
	case isSeq:
		n = len(xs)
	default:
		return undefined{hint: fmt.Sprintf("'%s' object is not subscriptable", typeName(obj))}, nil
	}
	idx := func(v any, def int) (int, bool, error) {
		if v == nil {
			return def, false, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, false, fmt.Errorf("slice indices must be integers or None")
		}
		if i > math.MaxInt32 {
			i = math.MaxInt32
		} else if i < -math.MaxInt32 {
			i = -math.MaxInt32
		}
		return int(i), true, nil
	}
	st, _, err := idx(step, 1)
	if err != nil {
		return nil, err
	}
	if st == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	lo, hasLo, err := idx(start, 0)
	if err != nil {
		return nil, err
	}
	hi, hasHi, err := idx(stop, 0)
	if err != nil {
		return nil, err
	}
	clamp := func(i int, has bool, def int) int {
		if !has {
			return def
		}
		if i < 0 {
			i += n
			if i < 0 {
				if st < 0 {
					return -1
				}
				return 0
			}
		}
		if i >= n {
			if st < 0 {
				return n - 1
			}
			return n
		}
		return i
	}
	var picks []int
	if st > 0 {
		lo, hi = clamp(lo, hasLo, 0), clamp(hi, hasHi, n)
		for i := lo; i < hi; i += st {
			picks = append(picks, i)
		}
	} else {
		lo, hi = clamp(lo, hasLo, n-1), clamp(hi, hasHi, -1)
		for i := lo; i > hi; i += st {
			picks = append(picks, i)
		}
	}
	if isStr {
		out := make([]rune, len(picks))
		for i, p := range picks {
			out[i] = runes[p]
		}
		return string(out), nil
	}
	out := make([]any, len(picks))
	for i, p := range picks {
		out[i] = xs[p]
	}
	if _, ok := obj.(tuple); ok {
		return tuple(out), nil
	}
	return out, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func negate(v any) (any, error) {
	switch x := v.(type) {
	case int64:
		if x == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow")
		}
		return -x, nil
	case float64:
		return -x, nil
	case bool:
		return -boolInt(x), nil
	case undefined:
		return nil, x.err()
	}
	return nil, fmt.Errorf("bad operand type for unary -: '%s'", typeName(v))
}
