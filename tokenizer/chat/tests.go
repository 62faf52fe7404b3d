package chat

import (
	"fmt"
	"unicode"
)

// testFunc implements a Jinja test (`x is name(args)`).
type testFunc func(v any, args []any) (bool, error)

var tests map[string]testFunc

// jinjaTestNames are Jinja built-in tests this engine does not implement.
var jinjaTestNames = setOf("escaped")

func initTests() {
	one := func(name string, fn func(v, arg any) (bool, error)) testFunc {
		return func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("%s takes exactly one argument", name)
			}
			return fn(v, args[0])
		}
	}
	noArgs := func(fn func(v any) bool) testFunc {
		return func(v any, args []any) (bool, error) {
			if len(args) != 0 {
				return false, fmt.Errorf("takes no arguments")
			}
			return fn(v), nil
		}
	}
	cmp := func(name string, want func(int) bool) testFunc {
		return one(name, func(v, arg any) (bool, error) {
			c, err := compare(v, arg)
			return err == nil && want(c), err
		})
	}
	eq := one("eq", func(v, arg any) (bool, error) { return equal(v, arg), nil })
	ne := one("ne", func(v, arg any) (bool, error) { return !equal(v, arg), nil })
	lt := cmp("lt", func(c int) bool { return c == -1 })
	le := cmp("le", func(c int) bool { return c == -1 || c == 0 })
	gt := cmp("gt", func(c int) bool { return c == 1 })
	ge := cmp("ge", func(c int) bool { return c == 1 || c == 0 })
	tests = map[string]testFunc{
		"boolean":   noArgs(func(v any) bool { _, ok := v.(bool); return ok }),
		"callable":  noArgs(isCallable),
		"defined":   noArgs(func(v any) bool { _, u := v.(undefined); return !u }),
		"undefined": noArgs(func(v any) bool { _, u := v.(undefined); return u }),
		"divisibleby": one("divisibleby", func(v, arg any) (bool, error) {
			r, err := binaryOp("%", v, arg)
			if err != nil {
				return false, err
			}
			return equal(r, int64(0)), nil
		}),
		"eq": eq, "equalto": eq, "==": eq,
		"ne": ne, "!=": ne,
		"lt": lt, "lessthan": lt, "<": lt,
		"le": le, "<=": le,
		"gt": gt, "greaterthan": gt, ">": gt,
		"ge": ge, ">=": ge,
		"even":  intTest(func(n int64) bool { return n%2 == 0 }),
		"odd":   intTest(func(n int64) bool { return n%2 != 0 }),
		"false": noArgs(func(v any) bool { b, ok := v.(bool); return ok && !b }),
		"true":  noArgs(func(v any) bool { b, ok := v.(bool); return ok && b }),
		"filter": noArgs(func(v any) bool {
			s, ok := v.(string)
			return ok && filters[s] != nil
		}),
		"test": noArgs(func(v any) bool {
			s, ok := v.(string)
			return ok && tests[s] != nil
		}),
		"float":   noArgs(func(v any) bool { _, ok := v.(float64); return ok }),
		"integer": noArgs(func(v any) bool { _, ok := v.(int64); return ok }),
		"number":  noArgs(func(v any) bool { _, ok := asNumber(v); return ok }),
		"in":      one("in", func(v, arg any) (bool, error) { return contains(arg, v) }),
		"iterable": noArgs(func(v any) bool {
			switch v.(type) {
			case string, []any, tuple, map[string]any, *Map, undefined:
				return true
			}
			return false
		}),
		"sequence": noArgs(func(v any) bool {
			switch v.(type) {
			case string, []any, tuple, map[string]any, *Map, undefined:
				return true
			}
			return false
		}),
		"mapping": noArgs(isDict),
		"none":    noArgs(func(v any) bool { return v == nil }),
		"string":  noArgs(func(v any) bool { _, ok := v.(string); return ok }),
		"lower": noArgs(func(v any) bool {
			s := toStr(v)
			return caseTest(s, unicode.IsLower)
		}),
		"upper": noArgs(func(v any) bool {
			s := toStr(v)
			return caseTest(s, unicode.IsUpper)
		}),
		"sameas": one("sameas", func(v, arg any) (bool, error) { return sameAs(v, arg), nil }),
	}
}

func intTest(fn func(int64) bool) testFunc {
	return func(v any, args []any) (bool, error) {
		if len(args) != 0 {
			return false, fmt.Errorf("takes no arguments")
		}
		n, ok := asInt(v)
		if !ok {
			if f, isF := v.(float64); isF && f == float64(int64(f)) {
				return fn(int64(f)), nil
			}
			return false, fmt.Errorf("not an integer: %s", typeName(v))
		}
		return fn(n), nil
	}
}

// caseTest is str.islower / str.isupper: at least one cased character and
// every cased character matching.
func caseTest(s string, want func(rune) bool) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) {
			if !want(r) {
				return false
			}
			cased = true
		}
	}
	return cased
}

func isCallable(v any) bool {
	switch v.(type) {
	case builtinFunc, boundMethod, *macroClosure:
		return true
	}
	return false
}

// sameAs approximates Python's `is`: identity for containers, value
// equality of the same type for scalars.
func sameAs(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *Map:
		y, ok := b.(*Map)
		return ok && x == y
	case *namespace:
		y, ok := b.(*namespace)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	}
	return false
}
