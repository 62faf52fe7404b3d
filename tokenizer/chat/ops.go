package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const maxStringRepeat = 16 << 20

func binaryOp(op string, l, r any) (any, error) {
	if u, ok := l.(undefined); ok {
		return nil, u.err()
	}
	if u, ok := r.(undefined); ok {
		return nil, u.err()
	}
	li, lInt := asInt(l)
	ri, rInt := asInt(r)
	lf, lNum := asNumber(l)
	rf, rNum := asNumber(r)
	switch op {
	case "+":
		switch {
		case lInt && rInt:
			s := li + ri
			if (s > li) != (ri > 0) {
				return nil, fmt.Errorf("integer overflow")
			}
			return s, nil
		case lNum && rNum:
			return lf + rf, nil
		}
		if ls, ok := l.(string); ok {
			if rs, ok := r.(string); ok {
				return ls + rs, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(r))
		}
		if lx, ok := l.([]any); ok {
			if rx, ok := r.([]any); ok {
				return append(append(make([]any, 0, len(lx)+len(rx)), lx...), rx...), nil
			}
			return nil, fmt.Errorf("can only concatenate list (not \"%s\") to list", typeName(r))
		}
		if lx, ok := l.(tuple); ok {
			if rx, ok := r.(tuple); ok {
				return append(append(make(tuple, 0, len(lx)+len(rx)), lx...), rx...), nil
			}
		}
	case "-":
		switch {
		case lInt && rInt:
			s := li - ri
			if (s < li) != (ri > 0) {
				return nil, fmt.Errorf("integer overflow")
			}
			return s, nil
		case lNum && rNum:
			return lf - rf, nil
		}
	case "*":
		switch {
		case lInt && rInt:
			if li != 0 && ri != 0 {
				p := li * ri
				if p/ri != li || (li == -1 && ri == math.MinInt64) || (ri == -1 && li == math.MinInt64) {
					return nil, fmt.Errorf("integer overflow")
				}
				return p, nil
			}
			return int64(0), nil
		case lNum && rNum:
			return lf * rf, nil
		case rInt:
			return repeatSeq(l, ri)
		case lInt:
			return repeatSeq(r, li)
		}
	case "/":
		if lNum && rNum {
			if rf == 0 {
				return nil, fmt.Errorf("division by zero")
			}
			if lInt && rInt {
				return float64(li) / float64(ri), nil
			}
			return lf / rf, nil
		}
	case "//":
		switch {
		case lInt && rInt:
			if ri == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case lNum && rNum:
			if rf == 0 {
				return nil, fmt.Errorf("float floor division by zero")
			}
			return math.Floor(lf / rf), nil
		}
	case "%":
		if ls, ok := l.(string); ok {
			return percentFormat(ls, r)
		}
		switch {
		case lInt && rInt:
			if ri == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			m := li % ri
			if m != 0 && (m < 0) != (ri < 0) {
				m += ri
			}
			return m, nil
		case lNum && rNum:
			if rf == 0 {
				return nil, fmt.Errorf("float modulo")
			}
			m := math.Mod(lf, rf)
			if m != 0 && (m < 0) != (rf < 0) {
				m += rf
			}
			return m, nil
		}
	case "**":
		switch {
		case lInt && rInt && ri >= 0:
			result := int64(1)
			base := li
			for e := ri; e > 0; e-- {
				next := result * base
				if base != 0 && next/base != result {
					return nil, fmt.Errorf("integer overflow")
				}
				result = next
				if result == 0 || result == 1 && base == 1 {
					break
				}
			}
			return result, nil
		case lNum && rNum:
			return math.Pow(lf, rf), nil
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func repeatSeq(v any, n int64) (any, error) {
	if n < 0 {
		n = 0
	}
	switch x := v.(type) {
	case string:
		if int64(len(x))*n > maxStringRepeat {
			return nil, fmt.Errorf("string repetition result too large")
		}
		return strings.Repeat(x, int(n)), nil
	case []any, tuple:
		xs, _ := seq(x)
		if int64(len(xs))*n > maxStringRepeat {
			return nil, fmt.Errorf("sequence repetition result too large")
		}
		out := make([]any, 0, len(xs)*int(n))
		for range n {
			out = append(out, xs...)
		}
		if _, ok := x.(tuple); ok {
			return tuple(out), nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(v))
}

// Method names by receiver type. Jinja resolves `obj.name` to a Python
// attribute first, so these shadow same-named dict keys.
var (
	strMethods = setOf("startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines",
		"replace", "upper", "lower", "title", "capitalize", "swapcase", "format", "join", "find", "rfind",
		"index", "rindex", "count", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
		"isnumeric", "isdecimal", "removeprefix", "removesuffix", "zfill", "center", "ljust", "rjust", "partition", "rpartition")
	listMethods   = setOf("index", "count", "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "copy")
	dictMethods   = setOf("items", "keys", "values", "get", "copy", "pop", "popitem", "setdefault", "update", "clear")
	loopMethods   = setOf("cycle", "changed")
	unsafeMethods = setOf("append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "popitem", "setdefault", "update")
	knownMethods  = union(strMethods, listMethods, dictMethods, loopMethods)
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func union(sets ...map[string]bool) map[string]bool {
	m := map[string]bool{}
	for _, s := range sets {
		for k := range s {
			m[k] = true
		}
	}
	return m
}

// getAttr is Jinja's `obj.name`: a Python attribute (method) first, then an item.
func getAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, x.err()
	case map[string]any, *Map:
		if dictMethods[name] {
			return boundMethod{recv: obj, name: name}, nil
		}
		if v, ok := dictGet(x, name); ok {
			return v, nil
		}
	case string:
		if strMethods[name] {
			return boundMethod{recv: obj, name: name}, nil
		}
	case []any:
		if listMethods[name] {
			return boundMethod{recv: obj, name: name}, nil
		}
	case tuple:
		if name == "index" || name == "count" {
			return boundMethod{recv: obj, name: name}, nil
		}
	case *namespace:
		if v, ok := x.m.Get(name); ok {
			return v, nil
		}
	case *loopState:
		return x.attr(name), nil
	}
	return undefAttr(obj, name), nil
}

// getItem is Jinja's `obj[key]`: an item first, then an attribute.
func getItem(obj any, key any) (any, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, x.err()
	case map[string]any, *Map:
		if k, ok := key.(string); ok {
			if v, ok := dictGet(x, k); ok {
				return v, nil
			}
		}
	case []any, tuple:
		xs, _ := seq(x)
		if i, ok := asInt(key); ok {
			if i < 0 {
				i += int64(len(xs))
			}
			if i >= 0 && i < int64(len(xs)) {
				return xs[i], nil
			}
			return undefined{hint: fmt.Sprintf("%s object has no element %d", typeName(obj), i)}, nil
		}
	case string:
		if i, ok := asInt(key); ok {
			n := int64(utf8.RuneCountInString(x))
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				if n == int64(len(x)) {
					return x[i : i+1], nil
				}
				return string([]rune(x)[i]), nil
			}
			return undefined{hint: "string index out of range"}, nil
		}
	}
	if k, ok := key.(string); ok {
		return getAttr(obj, k)
	}
	return undefined{hint: fmt.Sprintf("%s object has no element %s", typeName(obj), repr(key))}, nil
}

func (l *loopState) attr(name string) any {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index0 + 1)
	case "index0":
		return int64(l.index0)
	case "revindex":
		return int64(n - l.index0)
	case "revindex0":
		return int64(n - l.index0 - 1)
	case "first":
		return l.index0 == 0
	case "last":
		return l.index0 == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.index0 > 0 {
			return l.items[l.index0-1]
		}
		return undefined{hint: "there is no previous item"}
	case "nextitem":
		if l.index0+1 < n {
			return l.items[l.index0+1]
		}
		return undefined{hint: "there is no next item"}
	case "cycle", "changed":
		return boundMethod{recv: l, name: name}
	}
	return undefAttr(l, name)
}

// callMethod calls a Python method on a built-in value. handled is false
// when recv has no such method (the caller then resolves the attribute).
func (ev *evaluator) callMethod(recv any, name string, args []any, kw *kwargs) (handled bool, v any, err error) {
	switch x := recv.(type) {
	case string:
		if !strMethods[name] {
			return false, nil, nil
		}
		v, err = strMethod(x, name, args, kw)
	case []any, tuple:
		_, isList := x.([]any)
		if !listMethods[name] || (!isList && name != "index" && name != "count") {
			return false, nil, nil
		}
		v, err = seqMethod(x, name, args)
	case map[string]any, *Map:
		if !dictMethods[name] {
			return false, nil, nil
		}
		v, err = dictMethod(x, name, args)
	case *loopState:
		if !loopMethods[name] {
			return false, nil, nil
		}
		v, err = x.method(name, args)
	default:
		return false, nil, nil
	}
	if err != nil {
		var te *TemplateError
		if !asTemplateError(err, &te) {
			err = fmt.Errorf("%s.%s(): %w", typeName(recv), name, err)
		}
	}
	return true, v, err
}

func asTemplateError(err error, te **TemplateError) bool {
	t, ok := err.(*TemplateError)
	if ok {
		*te = t
	}
	return ok
}

func (l *loopState) method(name string, args []any) (any, error) {
	switch name {
	case "cycle":
		if len(args) == 0 {
			return nil, fmt.Errorf("no items for cycling given")
		}
		return args[l.index0%len(args)], nil
	case "changed":
		v := tuple(args)
		if l.hasPrev && equal(tuple(l.changed), v) {
			return false, nil
		}
		l.changed, l.hasPrev = args, true
		return true, nil
	}
	return nil, fmt.Errorf("no method %s", name)
}

func argCount(args []any, lo, hi int) error {
	if len(args) < lo || len(args) > hi {
		if lo == hi {
			return fmt.Errorf("takes exactly %d argument(s) (%d given)", lo, len(args))
		}
		return fmt.Errorf("takes %d to %d arguments (%d given)", lo, hi, len(args))
	}
	return nil
}

func strArg(args []any, i int) (string, bool, error) {
	if i >= len(args) || args[i] == nil {
		return "", false, nil
	}
	s, ok := args[i].(string)
	if !ok {
		return "", false, fmt.Errorf("argument %d must be str, not %s", i+1, typeName(args[i]))
	}
	return s, true, nil
}

func intArg(args []any, i int, def int64) (int64, error) {
	if i >= len(args) || args[i] == nil {
		return def, nil
	}
	n, ok := asInt(args[i])
	if !ok {
		return 0, fmt.Errorf("argument %d must be int, not %s", i+1, typeName(args[i]))
	}
	return n, nil
}

// pyStrip is str.strip/lstrip/rstrip: whitespace when chars is absent.
func pyStrip(s string, chars string, hasChars bool, left, right bool) string {
	f := isPySpace
	if hasChars {
		f = func(r rune) bool { return strings.ContainsRune(chars, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s
}

func toList(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// pySplit is str.split(sep, maxsplit) including the whitespace form.
func pySplit(s, sep string, hasSep bool, maxsplit int64) ([]any, error) {
	if hasSep {
		if sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		n := -1
		if maxsplit >= 0 {
			n = int(min(maxsplit, math.MaxInt32)) + 1
		}
		return toList(strings.SplitN(s, sep, n)), nil
	}
	var out []any
	rest := strings.TrimLeftFunc(s, isPySpace)
	for rest != "" {
		if maxsplit >= 0 && int64(len(out)) == maxsplit {
			out = append(out, strings.TrimRightFunc(rest, isPySpace))
			break
		}
		end := strings.IndexFunc(rest, isPySpace)
		if end < 0 {
			out = append(out, rest)
			break
		}
		out = append(out, rest[:end])
		rest = strings.TrimLeftFunc(rest[end:], isPySpace)
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

func pyRSplit(s, sep string, hasSep bool, maxsplit int64) ([]any, error) {
	if maxsplit < 0 {
		return pySplit(s, sep, hasSep, -1)
	}
	if hasSep {
		if sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		var parts []string
		for int64(len(parts)) < maxsplit {
			i := strings.LastIndex(s, sep)
			if i < 0 {
				break
			}
			parts = append(parts, s[i+len(sep):])
			s = s[:i]
		}
		parts = append(parts, s)
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
		return toList(parts), nil
	}
	var parts []string
	rest := strings.TrimRightFunc(s, isPySpace)
	for rest != "" {
		if int64(len(parts)) == maxsplit {
			parts = append(parts, strings.TrimLeftFunc(rest, isPySpace))
			break
		}
		i := strings.LastIndexFunc(rest, isPySpace)
		if i < 0 {
			parts = append(parts, rest)
			break
		}
		_, n := utf8.DecodeRuneInString(rest[i:])
		parts = append(parts, rest[i+n:])
		rest = strings.TrimRightFunc(rest[:i], isPySpace)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return toList(parts), nil
}

// affixMatch implements startswith/endswith with a str or tuple of str.
func affixMatch(s string, arg any, fn func(string, string) bool) (bool, error) {
	switch a := arg.(type) {
	case string:
		return fn(s, a), nil
	case tuple:
		for _, e := range a {
			es, ok := e.(string)
			if !ok {
				return false, fmt.Errorf("tuple for startswith/endswith must only contain str, not %s", typeName(e))
			}
			if fn(s, es) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("first arg must be str or a tuple of str, not %s", typeName(arg))
}

func strMethod(s, name string, args []any, kw *kwargs) (any, error) {
	if kw != nil && name != "format" {
		return nil, fmt.Errorf("keyword arguments are not supported here")
	}
	switch name {
	case "startswith", "endswith":
		if err := argCount(args, 1, 1); err != nil {
			return nil, err
		}
		fn := strings.HasPrefix
		if name == "endswith" {
			fn = strings.HasSuffix
		}
		return affixMatch(s, args[0], fn)
	case "strip", "lstrip", "rstrip":
		if err := argCount(args, 0, 1); err != nil {
			return nil, err
		}
		chars, has, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		return pyStrip(s, chars, has, name != "rstrip", name != "lstrip"), nil
	case "split", "rsplit":
		if err := argCount(args, 0, 2); err != nil {
			return nil, err
		}
		sep, has, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		maxsplit, err := intArg(args, 1, -1)
		if err != nil {
			return nil, err
		}
		if name == "rsplit" {
			return pyRSplit(s, sep, has, maxsplit)
		}
		return pySplit(s, sep, has, maxsplit)
	case "splitlines":
		if err := argCount(args, 0, 1); err != nil {
			return nil, err
		}
		keep := len(args) == 1 && truthy(args[0])
		return splitLines(s, keep), nil
	case "replace":
		if err := argCount(args, 2, 3); err != nil {
			return nil, err
		}
		old, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		repl, _, err := strArg(args, 1)
		if err != nil {
			return nil, err
		}
		n, err := intArg(args, 2, -1)
		if err != nil {
			return nil, err
		}
		return pyReplace(s, old, repl, n), nil
	case "upper":
		return strings.ToUpper(s), nil
	case "lower":
		return strings.ToLower(s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "swapcase":
		return strings.Map(func(r rune) rune {
			if unicode.IsUpper(r) {
				return unicode.ToLower(r)
			}
			return unicode.ToUpper(r)
		}, s), nil
	case "format":
		return strFormat(s, args, kw)
	case "join":
		if err := argCount(args, 1, 1); err != nil {
			return nil, err
		}
		items, err := iterate(args[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			str, ok := it.(string)
			if !ok {
				return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = str
		}
		return strings.Join(parts, s), nil
	case "find", "rfind", "index", "rindex", "count":
		if err := argCount(args, 1, 1); err != nil {
			return nil, err
		}
		sub, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		if name == "count" {
			if sub == "" {
				return int64(utf8.RuneCountInString(s) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		}
		var i int
		if name == "find" || name == "index" {
			i = strings.Index(s, sub)
		} else {
			i = strings.LastIndex(s, sub)
		}
		if i < 0 {
			if name == "index" || name == "rindex" {
				return nil, fmt.Errorf("substring not found")
			}
			return int64(-1), nil
		}
		return int64(utf8.RuneCountInString(s[:i])), nil
	case "isdigit", "isnumeric", "isdecimal":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) }) < 0, nil
	case "isalpha":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) }) < 0, nil
	case "isalnum":
		return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) < 0, nil
	case "isspace":
		return s != "" && allPySpace(s), nil
	case "isupper", "islower":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) {
				cased = true
				if (name == "isupper" && !unicode.IsUpper(r)) || (name == "islower" && !unicode.IsLower(r)) {
					return false, nil
				}
			}
		}
		return cased, nil
	case "removeprefix", "removesuffix":
		if err := argCount(args, 1, 1); err != nil {
			return nil, err
		}
		a, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" {
			return strings.TrimPrefix(s, a), nil
		}
		return strings.TrimSuffix(s, a), nil
	case "zfill", "center", "ljust", "rjust":
		if err := argCount(args, 1, 2); err != nil {
			return nil, err
		}
		width, err := intArg(args, 0, 0)
		if err != nil {
			return nil, err
		}
		fill := " "
		if len(args) == 2 {
			f, _, err := strArg(args, 1)
			if err != nil || utf8.RuneCountInString(f) != 1 {
				return nil, fmt.Errorf("the fill character must be exactly one character long")
			}
			fill = f
		}
		return pad(s, name, int(min(width, maxStringRepeat)), fill), nil
	case "partition", "rpartition":
		if err := argCount(args, 1, 1); err != nil {
			return nil, err
		}
		sep, _, err := strArg(args, 0)
		if err != nil || sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		i := strings.Index(s, sep)
		if name == "rpartition" {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "rpartition" {
				return tuple{"", "", s}, nil
			}
			return tuple{s, "", ""}, nil
		}
		return tuple{s[:i], sep, s[i+len(sep):]}, nil
	}
	return nil, fmt.Errorf("no method %s", name)
}

func pad(s, how string, width int, fill string) string {
	n := utf8.RuneCountInString(s)
	if width <= n {
		return s
	}
	total := width - n
	switch how {
	case "zfill":
		sign := ""
		if s != "" && (s[0] == '+' || s[0] == '-') {
			sign, s = s[:1], s[1:]
		}
		return sign + strings.Repeat("0", total) + s
	case "ljust":
		return s + strings.Repeat(fill, total)
	case "rjust":
		return strings.Repeat(fill, total) + s
	}
	left := total / 2
	if total%2 == 1 && width%2 == 1 {
		left++
	}
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, total-left)
}

func splitLines(s string, keep bool) []any {
	out := []any{}
	start := 0
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		default:
			continue
		}
		end := i + 1
		if r == '\r' && i+1 < len(rs) && rs[i+1] == '\n' {
			end++
		}
		if keep {
			out = append(out, string(rs[start:end]))
		} else {
			out = append(out, string(rs[start:i]))
		}
		start = end
		i = end - 1
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

// pyReplace is str.replace, including the empty-pattern case.
func pyReplace(s, old, repl string, n int64) string {
	if n < 0 {
		return strings.ReplaceAll(s, old, repl)
	}
	return strings.Replace(s, old, repl, int(min(n, math.MaxInt32)))
}

// pyTitle is str.title(): uppercase after any non-cased character.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
	}
	return b.String()
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToTitle(r)) + strings.ToLower(s[n:])
}

func seqMethod(x any, name string, args []any) (any, error) {
	xs, _ := seq(x)
	if unsafeMethods[name] {
		return nil, fmt.Errorf("access to attribute '%s' of '%s' object is unsafe", name, typeName(x))
	}
	switch name {
	case "index", "count":
		if err := argCount(args, 1, 1); err != nil {
			return nil, err
		}
		n := int64(0)
		for i, e := range xs {
			if equal(e, args[0]) {
				if name == "index" {
					return int64(i), nil
				}
				n++
			}
		}
		if name == "index" {
			return nil, fmt.Errorf("%s is not in list", repr(args[0]))
		}
		return n, nil
	case "copy":
		return append([]any{}, xs...), nil
	}
	return nil, fmt.Errorf("no method %s", name)
}

func dictMethod(d any, name string, args []any) (any, error) {
	if unsafeMethods[name] {
		return nil, fmt.Errorf("access to attribute '%s' of 'dict' object is unsafe", name)
	}
	keys := dictKeys(d)
	switch name {
	case "items":
		out := make([]any, len(keys))
		for i, k := range keys {
			v, _ := dictGet(d, k)
			out[i] = tuple{k, v}
		}
		return out, nil
	case "keys":
		return toList(keys), nil
	case "values":
		out := make([]any, len(keys))
		for i, k := range keys {
			out[i], _ = dictGet(d, k)
		}
		return out, nil
	case "get":
		if err := argCount(args, 1, 2); err != nil {
			return nil, err
		}
		if k, ok := args[0].(string); ok {
			if v, ok := dictGet(d, k); ok {
				return v, nil
			}
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return nil, nil
	case "copy":
		m := NewMap()
		for _, k := range keys {
			v, _ := dictGet(d, k)
			m.Set(k, v)
		}
		return m, nil
	}
	return nil, fmt.Errorf("no method %s", name)
}

// percentFormat is Python's `fmt % args` for the common conversions.
func percentFormat(format string, arg any) (any, error) {
	var args []any
	var mapping any
	switch a := arg.(type) {
	case tuple:
		args = a
	case map[string]any, *Map:
		mapping = a
		args = []any{a}
	default:
		args = []any{arg}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, fmt.Errorf("incomplete format")
		}
		var v any
		hasV := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || mapping == nil {
				return nil, fmt.Errorf("format requires a mapping")
			}
			key := format[i+1 : i+end]
			val, ok := dictGet(mapping, key)
			if !ok {
				return nil, fmt.Errorf("key %s not found", repr(key))
			}
			v, hasV = val, true
			i += end + 1
		}
		specStart := i
		for i < len(format) && strings.IndexByte("-+ #0123456789.", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return nil, fmt.Errorf("incomplete format")
		}
		spec := format[specStart:i]
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !hasV {
			if next >= len(args) {
				return nil, fmt.Errorf("not enough arguments for format string")
			}
			v = args[next]
			next++
		}
		s, err := formatOne(spec, conv, v)
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
	}
	if mapping == nil && next < len(args) {
		return nil, fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

func formatOne(spec string, conv byte, v any) (string, error) {
	switch conv {
	case 's':
		return fmt.Sprintf("%"+spec+"s", toStr(v)), nil
	case 'r':
		return fmt.Sprintf("%"+spec+"s", repr(v)), nil
	case 'd', 'i':
		if n, ok := asInt(v); ok {
			return fmt.Sprintf("%"+spec+"d", n), nil
		}
		if f, ok := v.(float64); ok {
			return fmt.Sprintf("%"+spec+"d", int64(f)), nil
		}
	case 'f', 'F', 'e', 'E', 'g', 'G':
		if f, ok := asNumber(v); ok {
			if !strings.Contains(spec, ".") {
				spec += ".6"
			}
			return fmt.Sprintf("%"+spec+string(conv), f), nil
		}
	case 'x', 'X', 'o':
		if n, ok := asInt(v); ok {
			return fmt.Sprintf("%"+spec+string(conv), n), nil
		}
	default:
		return "", fmt.Errorf("unsupported format character '%c'", conv)
	}
	return "", fmt.Errorf("%%%c format: a real number is required, not %s", conv, typeName(v))
}

// strFormat is str.format with positional and named fields, without
// format specs or conversions.
func strFormat(s string, args []any, kw *kwargs) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("single '{' encountered in format string")
			}
			field := s[i+1 : i+end]
			if strings.ContainsAny(field, ":!.[") {
				return nil, fmt.Errorf("unsupported template feature: str.format field %q", field)
			}
			var v any
			switch {
			case field == "":
				if auto >= len(args) {
					return nil, fmt.Errorf("replacement index %d out of range", auto)
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				n, err := strconv.Atoi(field)
				if err != nil || n >= len(args) {
					return nil, fmt.Errorf("replacement index %s out of range", field)
				}
				v = args[n]
			default:
				if !kw.has(field) {
					return nil, fmt.Errorf("missing format key %q", field)
				}
				v = kw.get(field)
			}
			b.WriteString(toStr(v))
			i += end
		case c == '}':
			return nil, fmt.Errorf("single '}' encountered in format string")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
