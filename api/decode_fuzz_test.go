package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// checkKeysByMaps is checkKeys as it was, through json.Unmarshal into maps of raw values: the
// reference FuzzCheckKeys holds the single-pass scan to.
func checkKeysByMaps(data []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Struct && !(t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() == reflect.Struct) {
			return nil
		}
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return nil
		}
		for i, it := range items {
			if err := checkKeysByMaps(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
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
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil
	}
	fields := jsonFields(t)
	for k, v := range obj {
		ft, ok := fields[k]
		if !ok {
			return badRequest(clip(path+k), "unknown field")
		}
		if err := checkKeysByMaps(v, ft, path+k+"."); err != nil {
			return err
		}
	}
	return nil
}

// hasDuplicateKey says whether some object in data (valid JSON) repeats a key.
func hasDuplicateKey(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj    bool
		keys   map[string]bool
		wanted bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := func() *frame {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		f := top()
		if f != nil && f.obj && f.wanted {
			if k, ok := tok.(string); ok {
				if f.keys[k] {
					return true
				}
				f.keys[k] = true
				f.wanted = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if f != nil && f.obj {
				f.wanted = true
			}
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, wanted: true})
		case json.Delim('['):
			if f != nil && f.obj {
				f.wanted = true
			}
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			if f != nil && f.obj {
				f.wanted = true
			}
		}
	}
}

// FuzzCheckKeys: the single-pass key check never panics on any bytes, and on valid JSON refuses
// whatever the map-based check refused (it may refuse more only where a key repeats: it checks
// each occurrence, the maps kept the last), for the chat and /generate request types.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
		`{"messages":[{"Role":"user"}]}`,
		`{"text":"x","sampling_params":{"max_new_tokens":4,"grammar":"root ::= \"a\"\n"}}`,
		`{"text":"x","sampling_params":{"Max_New_Tokens":4}}`,
		`{"te\u0078t":"x","sampling_params":{"temperature":0.5e1,"stop":["a","\""]}}`,
		`{"messages":[],"response_format":{"type":"json_schema","json_schema":{"Schema":{}}}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"]}{"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"X":[1,{"y":null}]}}}]}`,
		`{"messages":[{"role":"user"}], "messages":[{"Role":1}]}`,
		` { "text" : "a" , "rid" : null } `,
		`{"text":"\ud800","x":}`,
		`[{"text":1}]`,
		`{"sampling_params":{"json_schema":"{\"a\":1}"},"t\u00e9xt":true}`,
	} {
		f.Add([]byte(s))
	}
	types := []reflect.Type{reflect.TypeFor[chatRequest](), reflect.TypeFor[generateRequest]()}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range types {
			got := checkKeys(data, typ, "")
			if !json.Valid(data) {
				continue
			}
			want := checkKeysByMaps(data, typ, "")
			if want != nil && got == nil {
				t.Fatalf("%s %q: the map-based check refused it (%v), the scan did not", typ, data, want)
			}
			if got != nil && want == nil && !hasDuplicateKey(data) {
				t.Fatalf("%s %q: the scan refused it (%v), the map-based check did not, and no key repeats", typ, data, got)
			}
			if got != nil && !strings.Contains(got.Error(), "unknown field") {
				t.Fatalf("%s %q: %v", typ, data, got)
			}
		}
	})
}
