package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// jsonValue is a parsed JSON value that keeps object member order: the schema's
// "properties" order decides the order in which the grammar emits keys.
type jsonValue struct {
	kind jsonKind
	b    bool
	num  string // raw number text
	str  string
	arr  []*jsonValue
	keys []string
	vals []*jsonValue
	id   int32 // unique per document, used to key rule caches
}

type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (v *jsonValue) get(key string) *jsonValue {
	if v == nil || v.kind != jsonObject {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

// parseJSONValue parses one JSON document preserving key order.
func parseJSONValue(data []byte, maxDepth int) (*jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var next int32
	var parse func(depth int) (*jsonValue, error)
	parse = func(depth int) (*jsonValue, error) {
		if depth > maxDepth {
			return nil, fmt.Errorf("nesting deeper than %d", maxDepth)
		}
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		next++
		v := &jsonValue{id: next}
		switch x := t.(type) {
		case nil:
			v.kind = jsonNull
		case bool:
			v.kind, v.b = jsonBool, x
		case json.Number:
			v.kind, v.num = jsonNumber, string(x)
		case string:
			v.kind, v.str = jsonString, x
		case json.Delim:
			switch x {
			case '[':
				v.kind = jsonArray
				for dec.More() {
					e, err := parse(depth + 1)
					if err != nil {
						return nil, err
					}
					v.arr = append(v.arr, e)
				}
				if _, err := dec.Token(); err != nil {
					return nil, err
				}
			case '{':
				v.kind = jsonObject
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return nil, err
					}
					k, ok := kt.(string)
					if !ok {
						return nil, fmt.Errorf("object key is not a string")
					}
					e, err := parse(depth + 1)
					if err != nil {
						return nil, err
					}
					dup := false
					for i, ek := range v.keys {
						if ek == k { // last one wins, as in encoding/json
							v.vals[i] = e
							dup = true
						}
					}
					if !dup {
						v.keys = append(v.keys, k)
						v.vals = append(v.vals, e)
					}
				}
				if _, err := dec.Token(); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("unexpected %v", x)
			}
		}
		return v, nil
	}
	v, err := parse(0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// CompactJSON re-serializes a JSON document as a grammar with compact
// whitespace writes it: key order and number text kept, strings with the
// canonical escapes. Benchmarks feed documents to a matcher this way.
func CompactJSON(doc []byte) (string, error) {
	v, err := parseJSONValue(doc, 1<<16)
	if err != nil {
		return "", err
	}
	return string(appendCompact(nil, v)), nil
}

// appendCompact serializes v compactly, with the escaping the grammar
// accepts canonically (so enum/const literals match what the matcher emits).
func appendCompact(dst []byte, v *jsonValue) []byte {
	switch v.kind {
	case jsonNull:
		return append(dst, "null"...)
	case jsonBool:
		return strconv.AppendBool(dst, v.b)
	case jsonNumber:
		return append(dst, v.num...)
	case jsonString:
		return appendJSONString(dst, v.str)
	case jsonArray:
		dst = append(dst, '[')
		for i, e := range v.arr {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCompact(dst, e)
		}
		return append(dst, ']')
	default:
		dst = append(dst, '{')
		for i, k := range v.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = appendCompact(dst, v.vals[i])
		}
		return append(dst, '}')
	}
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string: only '"', '\\' and control
// characters are escaped; everything else is raw UTF-8.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			dst = append(dst, '\\', '"')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// numRat parses a JSON number exactly.
func numRat(s string) (*big.Rat, bool) {
	r, ok := new(big.Rat).SetString(strings.TrimSpace(s))
	return r, ok
}

// isIntegral reports whether the JSON number text denotes an integer value.
func isIntegral(s string) bool {
	r, ok := numRat(s)
	return ok && r.IsInt()
}

// toAny converts v to the values encoding/json with UseNumber produces
// (a later duplicate key wins, as there).
func (v *jsonValue) toAny() any {
	switch v.kind {
	case jsonBool:
		return v.b
	case jsonNumber:
		return json.Number(v.num)
	case jsonString:
		return v.str
	case jsonArray:
		a := make([]any, len(v.arr))
		for i, x := range v.arr {
			a[i] = x.toAny()
		}
		return a
	case jsonObject:
		m := make(map[string]any, len(v.keys))
		for i, k := range v.keys {
			m[k] = v.vals[i].toAny()
		}
		return m
	}
	return nil
}

// valueKey is a key equal for JSON values that are equal as JSON Schema
// compares them: numbers by value (1 and 1.0), objects whatever their key
// order, arrays item by item.
func valueKey(v *jsonValue) string {
	var sb strings.Builder
	var walk func(v *jsonValue)
	walk = func(v *jsonValue) {
		switch v.kind {
		case jsonNumber:
			if r, ok := numRat(v.num); ok {
				sb.WriteString("n" + r.RatString())
				return
			}
		case jsonObject:
			order := make([]int, len(v.keys))
			for i := range order {
				order[i] = i
			}
			sort.Slice(order, func(a, b int) bool { return v.keys[order[a]] < v.keys[order[b]] })
			sb.WriteByte('{')
			for _, i := range order {
				sb.Write(appendJSONString(nil, v.keys[i]))
				sb.WriteByte(':')
				walk(v.vals[i])
				sb.WriteByte(',')
			}
			sb.WriteByte('}')
			return
		case jsonArray:
			sb.WriteByte('[')
			for _, e := range v.arr {
				walk(e)
				sb.WriteByte(',')
			}
			sb.WriteByte(']')
			return
		}
		sb.Write(appendCompact(nil, v))
	}
	walk(v)
	return sb.String()
}
