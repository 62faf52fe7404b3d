package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeJSON decodes JSON into template values the way Python's json.loads
// does: objects become *Map (key order kept) and numbers json.Number, which
// renders as an int or a float exactly as written (1 vs 1.0). Use it for
// tools and messages whose key order or number form reaches the prompt.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode json: trailing data after value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '{':
			m := NewMap()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				m.Set(kt.(string), v)
			}
			_, err := dec.Token()
			return m, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", x)
	}
	return t, nil // string, json.Number, bool, nil
}

// jsonOptions mirror the arguments of Python's json.dumps that
// transformers' tojson filter exposes.
type jsonOptions struct {
	indent      string // "" and !pretty: compact-line style
	pretty      bool
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
}

// pyJSONDumps renders v as Python's json.dumps would with opts.
func pyJSONDumps(v any, opts jsonOptions) (string, error) {
	var b strings.Builder
	if err := writePyJSON(&b, v, opts, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writePyJSON(b *strings.Builder, v any, o jsonOptions, depth int) error {
	if depth > 1000 {
		return fmt.Errorf("tojson: value nested too deeply")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case []any, tuple:
		xs, _ := seq(x)
		if len(xs) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range xs {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			writeJSONIndent(b, o, depth+1)
			if err := writePyJSON(b, e, o, depth+1); err != nil {
				return err
			}
		}
		writeJSONIndent(b, o, depth)
		b.WriteByte(']')
	case map[string]any, *Map:
		keys := dictKeys(x)
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		if o.sortKeys {
			if _, ordered := x.(*Map); ordered {
				keys = append([]string(nil), keys...)
				slices.Sort(keys)
			}
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			writeJSONIndent(b, o, depth+1)
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			e, _ := dictGet(x, k)
			if err := writePyJSON(b, e, o, depth+1); err != nil {
				return err
			}
		}
		writeJSONIndent(b, o, depth)
		b.WriteByte('}')
	case *namespace:
		return fmt.Errorf("tojson: Object of type Namespace is not JSON serializable")
	default:
		return fmt.Errorf("tojson: Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONIndent(b *strings.Builder, o jsonOptions, depth int) {
	if !o.pretty {
		return
	}
	b.WriteByte('\n')
	for range depth {
		b.WriteString(o.indent)
	}
}

// writeJSONString escapes like Python's json encoder: \" \\ \n \r \t \b \f,
// other control characters as \u00XX, and with ensureASCII every
// non-ASCII character as \uXXXX (surrogate pairs above the BMP).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 || (ensureASCII && c == 0x7f) {
					fmt.Fprintf(b, `\u%04x`, c)
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if ensureASCII {
			if r >= 0x10000 {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
}
