package chat

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values inside the evaluator are always one of: nil (None), bool, int64,
// float64, string, []any (list), tuple, map[string]any (dict, keys
// iterated in sorted order), *Map (dict in insertion order), undefined,
// *namespace, *loopState, *macroDef, builtinFunc, boundMethod. normalize
// converts caller-supplied Go values into this set.

// Map is a dict that keeps insertion order, as Python dicts do. Use it (or
// DecodeJSON, which produces it) for values whose key order reaches the
// prompt, such as tool schemas rendered with tojson.
type Map struct {
	keys []string
	vals map[string]any
}

// NewMap returns an empty ordered map.
func NewMap() *Map { return &Map{vals: map[string]any{}} }

// Set sets key to v, appending key if it is new.
func (m *Map) Set(key string, v any) {
	if _, ok := m.vals[key]; !ok {
		m.keys = append(m.keys, key)
	}
	m.vals[key] = v
}

// Get returns the value for key.
func (m *Map) Get(key string) (any, bool) {
	v, ok := m.vals[key]
	return v, ok
}

// Keys returns the keys in insertion order.
func (m *Map) Keys() []string { return m.keys }

// Len returns the number of entries.
func (m *Map) Len() int { return len(m.keys) }

// MarshalJSON writes the map in insertion order.
func (m *Map) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(m.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// tuple is a Python tuple: like a list, but printed with parentheses.
type tuple []any

// undefined is Jinja's default Undefined: prints as "", is falsy, iterates
// as empty, and fails on attribute access, calls and arithmetic.
type undefined struct{ hint string }

func (u undefined) err() error {
	if u.hint == "" {
		return fmt.Errorf("value is undefined")
	}
	return fmt.Errorf("%s", u.hint)
}

func undefName(name string) undefined { return undefined{hint: fmt.Sprintf("'%s' is undefined", name)} }

func undefAttr(obj any, name string) undefined {
	return undefined{hint: fmt.Sprintf("'%s' has no attribute '%s'", typeDesc(obj), name)}
}

// namespace is the mutable object namespace() returns.
type namespace struct{ m *Map }

// builtinFunc is a global function (range, namespace, raise_exception...).
type builtinFunc struct {
	name string
	fn   func(ev *evaluator, args []any, kw *kwargs) (any, error)
}

// boundMethod is `obj.method` referenced without being called directly.
type boundMethod struct {
	recv any
	name string
}

// typeName is Python's type name, used in error messages and tests.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case map[string]any, *Map:
		return "dict"
	case undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *loopState:
		return "LoopContext"
	case *macroDef:
		return "Macro"
	case builtinFunc, boundMethod:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

func typeDesc(v any) string { return typeName(v) + " object" }

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case tuple:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	case *Map:
		return x.Len() > 0
	case undefined:
		return false
	}
	return true
}

// toStr is Python's str().
func toStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case undefined:
		return ""
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return pyFloatRepr(x)
	}
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func repr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

// writeRepr writes Python's repr() of v.
func writeRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case string:
		writeStrRepr(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case map[string]any, *Map:
		b.WriteByte('{')
		for i, k := range dictKeys(x) {
			if i > 0 {
				b.WriteString(", ")
			}
			writeStrRepr(b, k)
			b.WriteString(": ")
			val, _ := dictGet(x, k)
			writeRepr(b, val)
		}
		b.WriteByte('}')
	case *namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.m)
		b.WriteByte('>')
	case *macroDef:
		b.WriteString("<Macro '" + x.name + "'>")
	case builtinFunc:
		b.WriteString("<function " + x.name + ">")
	case boundMethod:
		b.WriteString("<built-in method " + x.name + " of " + typeDesc(x.recv) + ">")
	case *loopState:
		b.WriteString("<LoopContext>")
	default:
		b.WriteString(toStr(v))
	}
}

func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && !unicode.IsPrint(r)):
			switch {
			case r < 0x100:
				fmt.Fprintf(b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

// pyFloatRepr formats f as Python's repr(float): the shortest round-trip
// digits, positional for exponents in [-4, 16), else scientific.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	var s string
	if exp >= -4 && exp < 16 {
		if exp < 0 {
			s = "0." + strings.Repeat("0", -exp-1) + digits
		} else if len(digits) <= exp+1 {
			s = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
		} else {
			s = digits[:exp+1] + "." + digits[exp+1:]
		}
	} else {
		s = digits[:1]
		if len(digits) > 1 {
			s += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		s += "e" + sign + fmt.Sprintf("%02d", exp)
	}
	if neg {
		s = "-" + s
	}
	return s
}

// dictKeys returns a dict's keys: insertion order for *Map, sorted for Go maps.
func dictKeys(d any) []string {
	switch m := d.(type) {
	case *Map:
		return m.keys
	case map[string]any:
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return keys
	}
	return nil
}

func dictGet(d any, key string) (any, bool) {
	switch m := d.(type) {
	case *Map:
		v, ok := m.vals[key]
		return v, ok
	case map[string]any:
		v, ok := m[key]
		return v, ok
	}
	return nil, false
}

func isDict(v any) bool {
	switch v.(type) {
	case map[string]any, *Map:
		return true
	}
	return false
}

func dictLen(d any) int {
	switch m := d.(type) {
	case *Map:
		return m.Len()
	case map[string]any:
		return len(m)
	}
	return 0
}

// seq returns the elements of a list or tuple.
func seq(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case tuple:
		return x, true
	}
	return nil, false
}

// iterate returns the items a for loop over v visits.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case map[string]any, *Map:
		keys := dictKeys(x)
		out := make([]any, len(keys))
		for i, k := range keys {
			out[i] = k
		}
		return out, nil
	case undefined:
		return nil, nil
	case *namespace:
		return nil, fmt.Errorf("'Namespace' object is not iterable")
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

// asNumber returns v as a float and whether it is numeric; bools count,
// as in Python.
func asNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// asInt returns v as an integer when it is an int or bool.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// equal is Python's ==.
func equal(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case nil:
		return b == nil
	case undefined:
		_, ok := b.(undefined)
		return ok
	case int64, float64, bool:
		if xi, ok := asInt(a); ok {
			if yi, ok := asInt(b); ok {
				return xi == yi
			}
		}
		xf, _ := asNumber(a)
		yf, ok := asNumber(b)
		return ok && xf == yf
	case []any, tuple:
		_, aTuple := a.(tuple)
		_, bTuple := b.(tuple)
		ys, ok := seq(b)
		xs, _ := seq(a)
		if !ok || aTuple != bTuple || len(xs) != len(ys) {
			return false
		}
		for i := range xs {
			if !equal(xs[i], ys[i]) {
				return false
			}
		}
		return true
	case map[string]any, *Map:
		if !isDict(b) || dictLen(a) != dictLen(b) {
			return false
		}
		for _, k := range dictKeys(a) {
			av, _ := dictGet(a, k)
			bv, ok := dictGet(b, k)
			if !ok || !equal(av, bv) {
				return false
			}
		}
		return true
	case *namespace:
		y, ok := b.(*namespace)
		return ok && x == y
	case *macroDef:
		y, ok := b.(*macroDef)
		return ok && x == y
	}
	return false
}

// compare orders a and b like Python's < on numbers, strings and sequences.
func compare(a, b any) (int, error) {
	if xi, ok := asInt(a); ok {
		if yi, ok := asInt(b); ok {
			return cmpOrdered(xi, yi), nil
		}
	}
	if xf, ok := asNumber(a); ok {
		if yf, ok := asNumber(b); ok {
			if math.IsNaN(xf) || math.IsNaN(yf) {
				return 2, nil // unordered: every comparison is false
			}
			return cmpOrdered(xf, yf), nil
		}
	}
	if xs, ok := a.(string); ok {
		if ys, ok := b.(string); ok {
			return strings.Compare(xs, ys), nil
		}
	}
	_, aTuple := a.(tuple)
	_, bTuple := b.(tuple)
	if xs, ok := seq(a); ok && aTuple == bTuple {
		if ys, ok := seq(b); ok {
			for i := 0; i < len(xs) && i < len(ys); i++ {
				if equal(xs[i], ys[i]) {
					continue
				}
				return compare(xs[i], ys[i])
			}
			return cmpOrdered(len(xs), len(ys)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// contains is Python's `item in container`.
func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []any, tuple:
		xs, _ := seq(c)
		for _, x := range xs {
			if equal(x, item) {
				return true, nil
			}
		}
		return false, nil
	case map[string]any, *Map:
		k, ok := item.(string)
		if !ok {
			return false, nil
		}
		_, found := dictGet(c, k)
		return found, nil
	case undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

// length is Python's len().
func length(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case tuple:
		return len(x), nil
	case map[string]any, *Map:
		return dictLen(x), nil
	case undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// normalize converts caller-supplied Go values into evaluator values.
// Integral float64 values become ints, because JSON decoded by
// encoding/json into `any` loses the int/float distinction that Python
// keeps (use json.Number, DecodeJSON or *Map to keep it exact).
func normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, string, tuple, undefined, *namespace, builtinFunc:
		return v, nil
	case *Map:
		var out *Map
		for i, k := range x.keys {
			e := x.vals[k]
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			if out == nil && !sameValue(n, e) {
				out = &Map{keys: x.keys, vals: make(map[string]any, len(x.vals))}
				for _, pk := range x.keys[:i] {
					out.vals[pk] = x.vals[pk]
				}
			}
			if out != nil {
				out.vals[k] = n
			}
		}
		if out == nil {
			return x, nil
		}
		return out, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
		return x, nil
	case float32:
		return normalize(float64(x))
	case json.Number:
		// Python's json keeps "1" an int and "1.0" a float.
		if !strings.ContainsAny(string(x), ".eE") {
			if n, err := x.Int64(); err == nil {
				return n, nil
			}
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("bad json.Number %q", string(x))
		}
		return f, nil
	case json.RawMessage:
		v, err := DecodeJSON(x)
		if err != nil {
			return nil, err
		}
		return normalize(v)
	case []any:
		return normalizeSlice(x)
	case map[string]any:
		for _, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			if !sameValue(n, e) {
				return copyNormalizedMap(x)
			}
		}
		return x, nil
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out, nil
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = e
		}
		return out, nil
	}
	return normalizeReflect(v)
}

// sameValue reports whether normalize left e unchanged (cheap identity
// check for the scalar types it may convert).
func sameValue(n, e any) bool {
	switch e.(type) {
	case nil, bool, int64, string, tuple:
		return true
	case *Map:
		return n.(*Map) == e.(*Map)
	case float64, int, int32, float32, json.Number, json.RawMessage, []string, map[string]string, []map[string]any:
		return false
	case []any, map[string]any:
		return reflect.ValueOf(n).UnsafePointer() == reflect.ValueOf(e).UnsafePointer()
	}
	return false
}

func normalizeSlice(x []any) (any, error) {
	var out []any
	for i, e := range x {
		n, err := normalize(e)
		if err != nil {
			return nil, err
		}
		if out == nil && !sameValue(n, e) {
			out = make([]any, len(x))
			copy(out, x[:i])
		}
		if out != nil {
			out[i] = n
		}
	}
	if out == nil {
		return x, nil
	}
	return out, nil
}

func copyNormalizedMap(x map[string]any) (any, error) {
	out := make(map[string]any, len(x))
	for k, e := range x {
		n, err := normalize(e)
		if err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, nil
}

// normalizeReflect handles other slices, string-keyed maps and numbers.
func normalizeReflect(v any) (any, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), nil
	case reflect.Float32, reflect.Float64:
		return normalize(rv.Float())
	case reflect.String:
		return rv.String(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return []any{}, nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			n, err := normalize(rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("unsupported map key type %s in template variables", rv.Type().Key())
		}
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			n, err := normalize(it.Value().Interface())
			if err != nil {
				return nil, err
			}
			out[it.Key().String()] = n
		}
		return out, nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return normalize(rv.Elem().Interface())
	}
	return nil, fmt.Errorf("unsupported Go type %T in template variables", v)
}
