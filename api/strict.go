package api

// Per-request strict mode for JSON Schema constraints. The grammar compiler applies one strict
// setting server-wide (--grammar-strict); a request whose response_format.json_schema.strict
// differs gets its schema rewritten so that the server's setting has the effect the request
// asked for: closing (strict true on a permissive server) writes additionalProperties/items/
// additionalItems false where the schema leaves them open; opening (strict false on a strict
// server) writes them true, which the compiler's strict mode then leaves alone. The rules are
// the compiler's (grammar.Options.Strict): an object schema that lists properties and says
// nothing of additionalProperties or patternProperties, unless it requires a name it does not
// list; a tuple (prefixItems without items, or an items array without additionalItems).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// jsonNode is a JSON value that keeps its object keys in order (property order decides the order
// a constrained generation writes them in).
type jsonNode struct {
	kind byte            // '{' object, '[' array, 0 scalar
	keys []string        // object keys, in order
	vals []*jsonNode     // object values (parallel to keys) or array elements
	raw  json.RawMessage // a scalar's encoding
}

func (n *jsonNode) get(key string) *jsonNode {
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

func (n *jsonNode) set(key string, v *jsonNode) {
	n.keys = append(n.keys, key)
	n.vals = append(n.vals, v)
}

func parseJSONNode(data []byte) (*jsonNode, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := readJSONNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the schema")
	}
	return n, nil
}

func readJSONNode(dec *json.Decoder) (*jsonNode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &jsonNode{kind: byte(t)}
		for dec.More() {
			if n.kind == '{' {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, kt.(string))
			}
			v, err := readJSONNode(dec)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	default:
		raw, err := json.Marshal(t)
		return &jsonNode{raw: raw}, err
	}
}

func (n *jsonNode) append(dst []byte) []byte {
	switch n.kind {
	case '{':
		dst = append(dst, '{')
		for i, k := range n.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = n.vals[i].append(dst)
		}
		return append(dst, '}')
	case '[':
		dst = append(dst, '[')
		for i, v := range n.vals {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = v.append(dst)
		}
		return append(dst, ']')
	}
	return append(dst, n.raw...)
}

// Keywords whose value is a schema, a map of schemas, or a schema or an array of schemas.
var (
	schemaKeywords    = []string{"additionalProperties", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames", "unevaluatedProperties", "unevaluatedItems"}
	schemaMapKeywords = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
	schemaListKeyword = []string{"items", "prefixItems", "allOf", "anyOf", "oneOf"}
)

// rewriteStrict returns schema with every implicitly open object and tuple closed (strict) or
// made explicitly open (!strict).
func rewriteStrict(schema []byte, strict bool) ([]byte, error) {
	root, err := parseJSONNode(schema)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	rewriteSchema(root, strict)
	return root.append(nil), nil
}

func rewriteSchema(n *jsonNode, strict bool) {
	if n == nil || n.kind != '{' {
		return // true, false, or not a schema
	}
	for _, k := range schemaKeywords {
		rewriteSchema(n.get(k), strict)
	}
	for _, k := range schemaMapKeywords {
		if m := n.get(k); m != nil && m.kind == '{' {
			for _, v := range m.vals {
				rewriteSchema(v, strict)
			}
		}
	}
	for _, k := range schemaListKeyword {
		if v := n.get(k); v != nil && v.kind == '[' {
			for _, e := range v.vals {
				rewriteSchema(e, strict)
			}
		} else {
			rewriteSchema(v, strict)
		}
	}
	value := &jsonNode{raw: json.RawMessage(fmt.Sprint(!strict))}
	if props := n.get("properties"); props != nil && n.get("additionalProperties") == nil && n.get("patternProperties") == nil {
		listed := true
		if req := n.get("required"); req != nil && req.kind == '[' && props.kind == '{' {
			for _, r := range req.vals {
				var name string
				if json.Unmarshal(r.raw, &name) == nil && props.get(name) == nil {
					listed = false
				}
			}
		}
		if listed {
			n.set("additionalProperties", value)
		}
	}
	items := n.get("items")
	switch {
	case n.get("prefixItems") != nil && items == nil:
		n.set("items", value)
	case items != nil && items.kind == '[' && n.get("additionalItems") == nil:
		n.set("additionalItems", value)
	}
}
