package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxRIDBytes bounds a client-chosen request id: it is echoed in every streamed chunk, so an
// unbounded one turns a small request into a huge response.
const maxRIDBytes = 256

// maxEchoBytes bounds how much of a client's input an error message quotes.
const maxEchoBytes = 256

// checkKeys walks data (a JSON body) alongside t, the struct it will be decoded into, and refuses
// any object key that is not exactly a field's JSON name: encoding/json matches keys
// case-insensitively, so "Max_Tokens" would silently set max_tokens. It descends into fields
// whose type is a struct, a pointer to one or a slice of them; other values are left to the
// decoder. Data that is not an object of the right shape is left to the decoder to refuse.
//
// It reads data once, without decoding or copying values (jsonObject, jsonArray): the walk
// through json.Unmarshal into maps of raw values it replaces scanned a 700 KB grammar four
// times and copied it twice, 12 ms of CPU per request before anything looked at it.
func checkKeys(data []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Struct && !(t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() == reflect.Struct) {
			return nil
		}
		items, ok := jsonArray(data)
		if !ok {
			return nil
		}
		for i, it := range items {
			if err := checkKeys(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Struct:
	default:
		return nil
	}
	if t == reflect.TypeFor[json.RawMessage]() {
		return nil
	}
	members, ok := jsonObject(data)
	if !ok {
		return nil
	}
	fields := jsonFields(t)
	for _, m := range members {
		k := m.key
		ft, ok := fields[k]
		if !ok {
			name := path + k
			for f := range fields {
				if strings.EqualFold(f, k) {
					return badRequest(clip(name), fmt.Sprintf("unknown field (JSON keys are case-sensitive: did you mean %q?)", path+f))
				}
			}
			return badRequest(clip(name), "unknown field")
		}
		if err := checkKeys(m.value, ft, path+k+"."); err != nil {
			return err
		}
	}
	return nil
}

// jsonMember is one member of a JSON object: its key, decoded, and its value's bytes.
type jsonMember struct {
	key   string
	value []byte
}

// jsonObject splits data, a JSON object, into its members (in order; a repeated key is listed
// each time). ok is false where data is not an object as far as this scan can tell; it does not
// validate the values (the decoder does), it only finds where each ends.
func jsonObject(data []byte) (members []jsonMember, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil, true
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, false
		}
		end := skipString(data, i)
		if end < 0 {
			return nil, false
		}
		key, ok := jsonKey(data[i:end])
		if !ok {
			return nil, false
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil, false
		}
		i = skipSpace(data, i+1)
		end = skipValue(data, i)
		if end < 0 {
			return nil, false
		}
		members = append(members, jsonMember{key: key, value: data[i:end]})
		i = skipSpace(data, end)
		if i >= len(data) {
			return nil, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return members, true
		default:
			return nil, false
		}
	}
}

// jsonArray splits data, a JSON array, into its items' bytes; ok as jsonObject's.
func jsonArray(data []byte) (items [][]byte, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return nil, true
	}
	for {
		end := skipValue(data, i)
		if end < 0 {
			return nil, false
		}
		items = append(items, data[i:end])
		i = skipSpace(data, end)
		if i >= len(data) {
			return nil, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			return items, true
		default:
			return nil, false
		}
	}
}

// jsonKey decodes a quoted key as encoding/json would (escapes, invalid UTF-8 replaced); the
// common plain ASCII key is a substring.
func jsonKey(quoted []byte) (string, bool) {
	plain := true
	for _, c := range quoted[1 : len(quoted)-1] {
		if c == '\\' || c >= utf8.RuneSelf || c < ' ' {
			plain = false
			break
		}
	}
	if plain {
		return string(quoted[1 : len(quoted)-1]), true
	}
	var k string
	if json.Unmarshal(quoted, &k) != nil {
		return "", false
	}
	return k, true
}

// skipString returns the offset just past the string that starts at data[i] (a quote), or -1.
func skipString(data []byte, i int) int {
	for i++; i < len(data); {
		j := bytes.IndexAny(data[i:], `"\`)
		if j < 0 {
			return -1
		}
		i += j
		if data[i] == '"' {
			return i + 1
		}
		i += 2 // a backslash and the byte it escapes (a \u's digits are plain bytes)
	}
	return -1
}

// skipValue returns the offset just past the JSON value that starts at data[i], or -1. Inside
// objects and arrays it only matches brackets, skipping strings whole.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				if i = skipString(data, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i // a number, true, false or null: up to the next delimiter
	for i < len(data) && !strings.ContainsRune(" \t\n\r,]}:", rune(data[i])) {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// jsonError turns a decoding error into a 400 a client can act on: the field and the JSON type
// it expects, or where the syntax breaks, never Go's type names.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		got, _, _ := strings.Cut(te.Value, " ") // "number 2.5" -> number
		what := article(got) + " " + got
		if got == "number" && isIntegerType(te.Type) && te.Value != "number" {
			what = clip(te.Value) // "number 2.5": say which number
		}
		msg := fmt.Sprintf("expected %s, got %s", jsonTypeName(te.Type), what)
		if te.Field == "" {
			msg = "the body: " + msg
		}
		return badRequest(clip(te.Field), msg) // the error names the field before the message
	case errors.As(err, &se):
		return badRequest("", fmt.Sprintf("invalid JSON body at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: ")))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "invalid JSON body: it ends before the value is complete")
	}
	return badRequest("", "invalid JSON body: "+clip(strings.TrimPrefix(err.Error(), "json: ")))
}

// jsonTypeName is the JSON type a Go type decodes from, for an error message.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[json.RawMessage]():
		return "a JSON value"
	case isIntegerType(t):
		return "an integer"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + plural(jsonTypeName(t.Elem()))
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON type"
}

// isIntegerType says whether t (or what it points to) is an integer type.
func isIntegerType(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// plural turns "a string" into "strings", "an object" into "objects".
func plural(s string) string {
	return strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ") + "s"
}

// article is "an" before a vowel, else "a".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// fieldCache maps a struct type to its JSON field names and their types.
var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// jsonFields is t's fields by exact JSON name, embedded structs' fields included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// clip shortens s for quoting in an error message (a field name, a value).
func clip(s string) string { return clipTo(s, maxEchoBytes) }

// maxMessageBytes bounds an error message, which may quote a schema, a regex or other input.
const maxMessageBytes = 1024

// clipMessage shortens an error message to maxMessageBytes.
func clipMessage(s string) string { return clipTo(s, maxMessageBytes) }

// clipTo cuts s to at most n bytes (not inside a UTF-8 sequence), saying how long it was.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}

// parseTokenIDs reads a JSON array of token ids, counting them as it goes: more than max ids is
// refused at the first one over, before the rest is read or any memory is taken for it. Each
// id must be an integer in [0, 2^31-1] (written without fraction or exponent).
func parseTokenIDs(data []byte, param string, max int) ([]int32, error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, badRequest(param, "must be an array of token ids")
	}
	ids := []int32{}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return ids, checkEnd(data, i+1, param)
	}
	for {
		if len(ids) == max {
			return nil, badRequest(param, fmt.Sprintf("more than %d token ids", max))
		}
		neg := i < len(data) && data[i] == '-'
		if neg {
			i++
		}
		start := i
		var v int64
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			v = v*10 + int64(data[i]-'0')
			if v > 1<<31-1 {
				return nil, badRequest(param, fmt.Sprintf("token id at index %d is out of range", len(ids)))
			}
			i++
		}
		if i == start || (i-start > 1 && data[start] == '0') {
			return nil, badRequest(param, fmt.Sprintf("element %d is not a token id (a non-negative integer)", len(ids)))
		}
		if neg && v != 0 { // -0 is 0, as encoding/json reads it
			return nil, badRequest(param, fmt.Sprintf("token id at index %d is negative", len(ids)))
		}
		ids = append(ids, int32(v))
		i = skipSpace(data, i)
		if i >= len(data) {
			return nil, badRequest(param, "unterminated array")
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			return ids, checkEnd(data, i+1, param)
		default:
			return nil, badRequest(param, fmt.Sprintf("element %d is not a token id (a non-negative integer)", len(ids)-1))
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

func checkEnd(data []byte, i int, param string) error {
	if skipSpace(data, i) != len(data) {
		return badRequest(param, "trailing data after the array")
	}
	return nil
}
