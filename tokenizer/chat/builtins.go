package chat

import (
	"fmt"
	"strings"
	"time"
)

// builtins are the globals Jinja and transformers provide.
var builtins map[string]builtinFunc

func init() {
	builtins = map[string]builtinFunc{
		"range":           {name: "range", fn: builtinRange},
		"dict":            {name: "dict", fn: builtinDict},
		"namespace":       {name: "namespace", fn: builtinNamespace},
		"raise_exception": {name: "raise_exception", fn: builtinRaise},
		"strftime_now":    {name: "strftime_now", fn: builtinStrftimeNow},
	}
}

// unsupportedGlobals are Jinja globals this engine does not provide;
// calling one is a compile-time UnsupportedError.
var unsupportedGlobals = setOf("cycler", "joiner", "lipsum")

func builtinRange(_ *evaluator, args []any, kw *kwargs) (any, error) {
	if kw != nil {
		return nil, fmt.Errorf("takes no keyword arguments")
	}
	if err := argCount(args, 1, 3); err != nil {
		return nil, err
	}
	ints := make([]int64, len(args))
	for i, a := range args {
		n, ok := asInt(a)
		if !ok {
			return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		ints[i] = n
	}
	start, stop, step := int64(0), ints[0], int64(1)
	if len(ints) >= 2 {
		start, stop = ints[0], ints[1]
	}
	if len(ints) == 3 {
		step = ints[2]
	}
	if step == 0 {
		return nil, fmt.Errorf("arg 3 must not be zero")
	}
	var n int64
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	if n > maxRange || n < 0 {
		return nil, fmt.Errorf("range too big; the sandbox blocks ranges larger than MAX_RANGE (%d)", maxRange)
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + int64(i)*step
	}
	return out, nil
}

func builtinDict(_ *evaluator, args []any, kw *kwargs) (any, error) {
	m := NewMap()
	switch len(args) {
	case 0:
	case 1:
		if !isDict(args[0]) {
			return nil, fmt.Errorf("unsupported template feature: dict() from %s", typeName(args[0]))
		}
		for _, k := range dictKeys(args[0]) {
			v, _ := dictGet(args[0], k)
			m.Set(k, v)
		}
	default:
		return nil, fmt.Errorf("expected at most 1 argument, got %d", len(args))
	}
	if kw != nil {
		for i, n := range kw.names {
			m.Set(n, kw.vals[i])
		}
	}
	return m, nil
}

func builtinNamespace(ev *evaluator, args []any, kw *kwargs) (any, error) {
	m, err := builtinDict(ev, args, kw)
	if err != nil {
		return nil, err
	}
	return &namespace{m: m.(*Map)}, nil
}

func builtinRaise(_ *evaluator, args []any, _ *kwargs) (any, error) {
	msg := ""
	if len(args) > 0 {
		msg = toStr(args[0])
	}
	return nil, &TemplateError{Message: msg}
}

func builtinStrftimeNow(ev *evaluator, args []any, _ *kwargs) (any, error) {
	if err := argCount(args, 1, 1); err != nil {
		return nil, err
	}
	format, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("format must be a string")
	}
	now := time.Now()
	if ev.opts != nil && !ev.opts.Now.IsZero() {
		now = ev.opts.Now
	}
	return strftime(now, format)
}

// strftime formats t with C/Python strftime directives.
func strftime(t time.Time, format string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("unsupported template feature: strftime directive %%%c", format[i])
		}
	}
	return b.String(), nil
}
