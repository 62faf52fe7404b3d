package chat

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(ev *evaluator, v any, args []any, kw *kwargs) (any, error)

// noArg marks a parameter the caller did not pass.
type noArg struct{}

// bindArgs maps positional and keyword arguments onto the named
// parameters, as Python does; absent ones are noArg{}.
func bindArgs(args []any, kw *kwargs, params ...string) ([]any, error) {
	if len(args) > len(params) {
		return nil, fmt.Errorf("takes at most %d argument(s) (%d given)", len(params), len(args))
	}
	out := make([]any, len(params))
	for i := range out {
		out[i] = noArg{}
	}
	copy(out, args)
	if kw != nil {
		for i, n := range kw.names {
			idx := slices.Index(params, n)
			if idx < 0 {
				return nil, fmt.Errorf("unexpected keyword argument '%s'", n)
			}
			if idx < len(args) {
				return nil, fmt.Errorf("got multiple values for argument '%s'", n)
			}
			out[idx] = kw.vals[i]
		}
	}
	return out, nil
}

func given(v any) bool { _, missing := v.(noArg); return !missing }

func argOr(v, def any) any {
	if given(v) {
		return v
	}
	return def
}

var filters map[string]filterFunc

// jinjaFilterNames are Jinja built-in filters this engine does not
// implement: using one is a compile-time UnsupportedError.
var jinjaFilterNames = setOf("filesizeformat", "groupby", "pprint", "random", "slice", "striptags", "truncate",
	"urlencode", "urlize", "wordwrap", "xmlattr")

func init() {
	filters = map[string]filterFunc{
		"abs":         filterAbs,
		"attr":        filterAttr,
		"batch":       filterBatch,
		"capitalize":  strFilter(pyCapitalize),
		"center":      filterCenter,
		"count":       filterLength,
		"d":           filterDefault,
		"default":     filterDefault,
		"dictsort":    filterDictsort,
		"e":           filterEscape,
		"escape":      filterEscape,
		"first":       filterFirst,
		"float":       filterFloat,
		"forceescape": filterEscape,
		"format":      filterFormat,
		"indent":      filterIndent,
		"int":         filterInt,
		"items":       filterItems,
		"join":        filterJoin,
		"last":        filterLast,
		"length":      filterLength,
		"list":        filterList,
		"lower":       strFilter(strings.ToLower),
		"map":         filterMap,
		"max":         minMaxFilter(1),
		"min":         minMaxFilter(-1),
		"reject":      selectFilter(false, false),
		"rejectattr":  selectFilter(false, true),
		"replace":     filterReplace,
		"reverse":     filterReverse,
		"round":       filterRound,
		"safe":        func(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) { return toStr(v), nil },
		"select":      selectFilter(true, false),
		"selectattr":  selectFilter(true, true),
		"sort":        filterSort,
		"string":      func(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) { return toStr(v), nil },
		"sum":         filterSum,
		"title":       strFilter(jinjaTitle),
		"tojson":      filterToJSON,
		"trim":        filterTrim,
		"unique":      filterUnique,
		"upper":       strFilter(strings.ToUpper),
		"wordcount":   filterWordcount,
	}
	initTests()
}

func strFilter(fn func(string) string) filterFunc {
	return func(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
		if len(args) > 0 || kw != nil {
			return nil, fmt.Errorf("takes no arguments")
		}
		return fn(toStr(v)), nil
	}
}

func filterAbs(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	switch x := v.(type) {
	case int64:
		if x == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow")
		}
		if x < 0 {
			return -x, nil
		}
		return x, nil
	case float64:
		return math.Abs(x), nil
	case bool:
		return boolInt(x), nil
	}
	return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
}

func filterAttr(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "name")
	if err != nil {
		return nil, err
	}
	name, ok := p[0].(string)
	if !ok {
		return nil, fmt.Errorf("attribute name must be a string")
	}
	// Python's getattr only: dict keys are not attributes here.
	if isDict(v) && !dictMethods[name] {
		return undefAttr(v, name), nil
	}
	return getAttr(v, name)
}

func filterBatch(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "linecount", "fill_with")
	if err != nil {
		return nil, err
	}
	n, ok := asInt(p[0])
	if !ok || n <= 0 {
		return nil, fmt.Errorf("linecount must be a positive integer")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var out []any
	for i := 0; i < len(items); i += int(n) {
		row := append([]any{}, items[i:min(i+int(n), len(items))]...)
		if given(p[1]) {
			for len(row) < int(n) {
				row = append(row, p[1])
			}
		}
		out = append(out, row)
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

func filterCenter(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "width")
	if err != nil {
		return nil, err
	}
	w, ok := asInt(argOr(p[0], int64(80)))
	if !ok {
		return nil, fmt.Errorf("width must be an integer")
	}
	return pad(toStr(v), "center", int(min(w, maxStringRepeat)), " "), nil
}

func filterLength(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	n, err := length(v)
	return int64(n), err
}

func filterDefault(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "default_value", "boolean")
	if err != nil {
		return nil, err
	}
	_, undef := v.(undefined)
	if undef || (given(p[1]) && truthy(p[1]) && !truthy(v)) {
		return argOr(p[0], ""), nil
	}
	return v, nil
}

func filterDictsort(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "case_sensitive", "by", "reverse")
	if err != nil {
		return nil, err
	}
	if !isDict(v) {
		return nil, fmt.Errorf("can only sort a mapping")
	}
	field := 0 // of each (key, value) item
	switch argOr(p[1], "key") {
	case "key":
	case "value":
		field = 1
	default:
		return nil, fmt.Errorf("you can only sort by either \"key\" or \"value\"")
	}
	items, _ := dictMethod(v, "items", nil)
	list := items.([]any)
	err = sortBy(list, func(a any) any { return a.(tuple)[field] }, truthy(argOr(p[0], false)), truthy(argOr(p[2], false)))
	return list, err
}

// sortBy sorts list stably by key(item), as the sort and dictsort filters do: case folded unless
// caseSensitive, descending when reverse. It returns the first comparison error.
func sortBy(list []any, key func(any) any, caseSensitive, reverse bool) error {
	var sortErr error
	slices.SortStableFunc(list, func(a, b any) int {
		x, y := key(a), key(b)
		if !caseSensitive {
			x, y = foldCase(x), foldCase(y)
		}
		c, err := compare(x, y)
		if err != nil && sortErr == nil {
			sortErr = err
		}
		return c
	})
	if reverse {
		slices.Reverse(list)
	}
	return sortErr
}

func foldCase(v any) any {
	if s, ok := v.(string); ok {
		return strings.ToLower(s)
	}
	return v
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")

func filterEscape(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	return htmlEscaper.Replace(toStr(v)), nil
}

func filterFirst(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterFloat(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "default")
	if err != nil {
		return nil, err
	}
	def := argOr(p[0], 0.0)
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case bool:
		return float64(boolInt(x)), nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return def, nil
		}
		return f, nil
	}
	return def, nil
}

func filterFormat(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	if kw != nil && len(args) > 0 {
		return nil, fmt.Errorf("can't handle positional and keyword arguments at the same time")
	}
	if kw != nil {
		m := NewMap()
		for i, n := range kw.names {
			m.Set(n, kw.vals[i])
		}
		return percentFormat(toStr(v), m)
	}
	return percentFormat(toStr(v), tuple(args))
}

func filterIndent(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "width", "first", "blank")
	if err != nil {
		return nil, err
	}
	indention := "    "
	switch w := argOr(p[0], int64(4)).(type) {
	case string:
		indention = w
	default:
		n, ok := asInt(w)
		if !ok {
			return nil, fmt.Errorf("width must be an integer or string")
		}
		indention = strings.Repeat(" ", int(max(0, min(n, 1<<16))))
	}
	lines := splitLines(toStr(v)+"\n", false)
	var rv string
	if truthy(argOr(p[2], false)) {
		parts := make([]string, len(lines))
		for i, l := range lines {
			parts[i] = l.(string)
		}
		rv = strings.Join(parts, "\n"+indention)
	} else {
		var b strings.Builder
		b.WriteString(lines[0].(string))
		for _, l := range lines[1:] {
			b.WriteByte('\n')
			if l.(string) != "" {
				b.WriteString(indention)
			}
			b.WriteString(l.(string))
		}
		rv = b.String()
	}
	if truthy(argOr(p[1], false)) {
		rv = indention + rv
	}
	return rv, nil
}

func filterInt(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "default", "base")
	if err != nil {
		return nil, err
	}
	def := argOr(p[0], int64(0))
	base, ok := asInt(argOr(p[1], int64(10)))
	if !ok {
		return nil, fmt.Errorf("base must be an integer")
	}
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		return boolInt(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > math.MaxInt64/2 {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.ReplaceAll(strings.TrimFunc(x, isPySpace), "_", "")
		if n, err := strconv.ParseInt(s, int(base), 64); err == nil && base >= 2 && base <= 36 {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < math.MaxInt64/2 {
			return int64(f), nil
		}
	}
	return def, nil
}

func filterItems(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	if _, ok := v.(undefined); ok {
		return []any{}, nil
	}
	if !isDict(v) {
		return nil, fmt.Errorf("can only get item pairs from a mapping")
	}
	return dictMethod(v, "items", nil)
}

func filterJoin(ev *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "d", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	sep := toStr(argOr(p[0], ""))
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		if given(p[1]) {
			if it, err = attrPath(it, p[1]); err != nil {
				return nil, err
			}
		}
		b.WriteString(toStr(it))
	}
	return b.String(), nil
}

// attrPath resolves Jinja's attribute argument: "a.b" or an integer index.
func attrPath(v any, attr any) (any, error) {
	if n, ok := attr.(int64); ok {
		return getItem(v, n)
	}
	s, ok := attr.(string)
	if !ok {
		return nil, fmt.Errorf("attribute must be a string or integer")
	}
	for part := range strings.SplitSeq(s, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func filterList(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func filterMap(ev *evaluator, v any, args []any, kw *kwargs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(items))
	if len(args) == 0 && kw.has("attribute") {
		def, hasDef := kw.get("default"), kw.has("default")
		for _, it := range items {
			x, err := attrPath(it, kw.get("attribute"))
			if err != nil {
				return nil, err
			}
			if _, undef := x.(undefined); undef && hasDef {
				x = def
			}
			out = append(out, x)
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("map requires a filter name or attribute=")
	}
	name, ok := args[0].(string)
	fn, found := filters[name]
	if !ok || !found {
		return nil, fmt.Errorf("unsupported template feature: map with filter %v", args[0])
	}
	for _, it := range items {
		x, err := fn(ev, it, args[1:], kw)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func minMaxFilter(sign int) filterFunc {
	return func(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
		p, err := bindArgs(args, kw, "case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{hint: "No aggregated item, sequence was empty."}, nil
		}
		key := func(x any) (any, error) {
			if given(p[1]) {
				var err error
				if x, err = attrPath(x, p[1]); err != nil {
					return nil, err
				}
			}
			if !truthy(argOr(p[0], false)) {
				x = foldCase(x)
			}
			return x, nil
		}
		best := items[0]
		bestKey, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			c, err := compare(k, bestKey)
			if err != nil {
				return nil, err
			}
			if c == sign {
				best, bestKey = it, k
			}
		}
		return best, nil
	}
}

// selectFilter builds select/reject (withAttr false) and selectattr/rejectattr.
func selectFilter(keep, withAttr bool) filterFunc {
	return func(ev *evaluator, v any, args []any, kw *kwargs) (any, error) {
		if kw != nil {
			return nil, fmt.Errorf("takes no keyword arguments")
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr any
		if withAttr {
			if len(args) == 0 {
				return nil, fmt.Errorf("missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		var test testFunc
		if len(args) > 0 {
			name, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("test name must be a string")
			}
			if test = tests[name]; test == nil {
				return nil, fmt.Errorf("unsupported template feature: test '%s'", name)
			}
			args = args[1:]
		}
		out := []any{}
		for _, it := range items {
			x := it
			if withAttr {
				if x, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(x)
			if test != nil {
				if ok, err = test(x, args); err != nil {
					return nil, err
				}
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func filterReplace(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "old", "new", "count")
	if err != nil {
		return nil, err
	}
	if !given(p[0]) || !given(p[1]) {
		return nil, fmt.Errorf("replace needs old and new")
	}
	n := int64(-1)
	if given(p[2]) && p[2] != nil {
		var ok bool
		if n, ok = asInt(p[2]); !ok {
			return nil, fmt.Errorf("count must be an integer")
		}
	}
	return pyReplace(toStr(v), toStr(p[0]), toStr(p[1]), n), nil
}

func filterReverse(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	if s, ok := v.(string); ok {
		r := []rune(s)
		slices.Reverse(r)
		return string(r), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, fmt.Errorf("argument must be iterable")
	}
	out := append([]any{}, items...)
	slices.Reverse(out)
	return out, nil
}

func filterRound(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "precision", "method")
	if err != nil {
		return nil, err
	}
	f, ok := asNumber(v)
	if !ok {
		return nil, fmt.Errorf("must be a number")
	}
	prec, ok := asInt(argOr(p[0], int64(0)))
	if !ok {
		return nil, fmt.Errorf("precision must be an integer")
	}
	scale := math.Pow(10, float64(prec))
	switch argOr(p[1], "common") {
	case "common":
		if i, isInt := v.(int64); isInt && prec >= 0 {
			return i, nil // Python's round(int, n) stays an int
		}
		return math.RoundToEven(f*scale) / scale, nil
	case "ceil":
		return math.Ceil(f*scale) / scale, nil
	case "floor":
		return math.Floor(f*scale) / scale, nil
	}
	return nil, fmt.Errorf("method must be common, ceil or floor")
}

func filterSort(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := append([]any{}, items...)
	key := func(a any) any {
		if given(p[2]) {
			a, _ = attrPath(a, p[2])
		}
		return a
	}
	err = sortBy(out, key, truthy(argOr(p[1], false)), truthy(argOr(p[0], false)))
	return out, err
}

func filterSum(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "attribute", "start")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	total := argOr(p[1], int64(0))
	for _, it := range items {
		if given(p[0]) {
			if it, err = attrPath(it, p[0]); err != nil {
				return nil, err
			}
		}
		if total, err = binaryOp("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

var titleSplit = regexp.MustCompile(`[-\s({\[<]+`)

// jinjaTitle is Jinja's title filter: capitalize each word, where words
// start after whitespace, dashes and opening brackets.
func jinjaTitle(s string) string {
	var b strings.Builder
	last := 0
	for _, loc := range titleSplit.FindAllStringIndex(s, -1) {
		b.WriteString(titleWord(s[last:loc[0]]))
		b.WriteString(s[loc[0]:loc[1]])
		last = loc[1]
	}
	b.WriteString(titleWord(s[last:]))
	return b.String()
}

func titleWord(w string) string {
	if w == "" {
		return w
	}
	r, n := utf8.DecodeRuneInString(w)
	return string(unicode.ToUpper(r)) + strings.ToLower(w[n:])
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys), without
// Jinja's HTML escaping.
func filterToJSON(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return nil, err
	}
	o := jsonOptions{itemSep: ", ", keySep: ": ", ensureASCII: truthy(argOr(p[0], false)), sortKeys: truthy(argOr(p[3], false))}
	if ind := argOr(p[1], nil); ind != nil {
		o.pretty = true
		o.itemSep = ","
		switch x := ind.(type) {
		case string:
			o.indent = x
		default:
			n, ok := asInt(x)
			if !ok {
				return nil, fmt.Errorf("indent must be an integer or string")
			}
			o.indent = strings.Repeat(" ", int(max(0, min(n, 1<<10))))
		}
	}
	if sep := argOr(p[2], nil); sep != nil {
		xs, ok := seq(sep)
		if !ok || len(xs) != 2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		is, ok1 := xs[0].(string)
		ks, ok2 := xs[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		o.itemSep, o.keySep = is, ks
	}
	return pyJSONDumps(v, o)
}

func filterTrim(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "chars")
	if err != nil {
		return nil, err
	}
	chars := argOr(p[0], nil)
	if chars == nil {
		return pyStrip(toStr(v), "", false, true, true), nil
	}
	cs, ok := chars.(string)
	if !ok {
		return nil, fmt.Errorf("strip arg must be None or str")
	}
	return pyStrip(toStr(v), cs, true, true, true), nil
}

func filterUnique(_ *evaluator, v any, args []any, kw *kwargs) (any, error) {
	p, err := bindArgs(args, kw, "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var out, seen []any
	for _, it := range items {
		k := it
		if given(p[1]) {
			if k, err = attrPath(it, p[1]); err != nil {
				return nil, err
			}
		}
		if !truthy(argOr(p[0], false)) {
			k = foldCase(k)
		}
		if !slices.ContainsFunc(seen, func(s any) bool { return equal(s, k) }) {
			seen = append(seen, k)
			out = append(out, it)
		}
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

var wordRe = regexp.MustCompile(`[\p{L}\p{N}_]+`)

func filterWordcount(_ *evaluator, v any, _ []any, _ *kwargs) (any, error) {
	return int64(len(wordRe.FindAllStringIndex(toStr(v), -1))), nil
}
