package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// StructuralTag turns a structural tag (response_format type "structural_tag") into a
// composition. Two shapes are read:
//
//   - the first one vLLM and SGLang took: {"structures": [{"begin", "schema", "end"}],
//     "triggers": [...]}, free text in which each trigger starts one of the structures whose
//     begin starts with it, the structure's value valid against its schema, then free text again;
//   - the newer {"format": {...}} one, a tree of formats: const_string {value}, json_schema
//     {json_schema}, regex {pattern}, grammar {grammar} (GBNF), any_text, sequence {elements},
//     or {elements}, tag {begin, content, end}, triggered_tags {triggers, tags, at_least_one,
//     stop_after_first} and tags_with_separator {tags, separator, at_least_one,
//     stop_after_first}.
//
// raw is the whole response_format object; its "type" key is not checked here.
func StructuralTag(raw []byte) (Part, error) {
	var st struct {
		Type       string          `json:"type"`
		Structures []stStructure   `json:"structures"`
		Triggers   []string        `json:"triggers"`
		Format     json.RawMessage `json:"format"`
	}
	if err := strictUnmarshal(raw, &st); err != nil {
		return Part{}, errf("structural_tag: %v", err)
	}
	if st.Format != nil {
		if st.Structures != nil || st.Triggers != nil {
			return Part{}, errf("structural_tag: give either format or structures and triggers, not both")
		}
		return stFormat(st.Format, "format", 0, "")
	}
	if len(st.Structures) == 0 {
		return Part{}, errf("structural_tag: structures must be a non-empty array of {begin, schema, end}")
	}
	tags := make([]Part, len(st.Structures))
	begins := make([]string, len(st.Structures))
	for i, s := range st.Structures {
		if len(bytes.TrimSpace(s.Schema)) == 0 {
			return Part{}, errf("structural_tag: structures[%d].schema is required", i)
		}
		tags[i] = tagPart(s.Begin, SchemaPart(s.Schema), s.End)
		begins[i] = s.Begin
	}
	return triggered(st.Triggers, begins, tags, false, false, "structures")
}

// stStructure is one structure of the first shape.
type stStructure struct {
	Begin  string          `json:"begin"`
	Schema json.RawMessage `json:"schema"`
	End    string          `json:"end"`
}

// maxStructuralDepth bounds the nesting of formats (the composer bounds it again).
const maxStructuralDepth = 16

// stFormat converts one format at path; end is the text that ends the enclosing tag (what
// any_text runs up to).
func stFormat(raw json.RawMessage, path string, depth int, end string) (Part, error) {
	if depth > maxStructuralDepth {
		return Part{}, errf("structural_tag: %s nests deeper than %d", path, maxStructuralDepth)
	}
	var f struct {
		Type           string            `json:"type"`
		Value          *string           `json:"value"`
		JSONSchema     json.RawMessage   `json:"json_schema"`
		Pattern        *string           `json:"pattern"`
		Grammar        *string           `json:"grammar"`
		Elements       []json.RawMessage `json:"elements"`
		Begin          *string           `json:"begin"`
		Content        json.RawMessage   `json:"content"`
		End            *string           `json:"end"`
		Triggers       []string          `json:"triggers"`
		Tags           []json.RawMessage `json:"tags"`
		Separator      *string           `json:"separator"`
		AtLeastOne     bool              `json:"at_least_one"`
		StopAfterFirst bool              `json:"stop_after_first"`
	}
	if err := strictUnmarshal(raw, &f); err != nil {
		return Part{}, errf("structural_tag: %s: %v", path, err)
	}
	need := func(ok bool, field string) error {
		if !ok {
			return errf("structural_tag: %s.%s is required for type %s", path, field, f.Type)
		}
		return nil
	}
	switch f.Type {
	case "const_string":
		if err := need(f.Value != nil && *f.Value != "", "value"); err != nil {
			return Part{}, err
		}
		return Literal(*f.Value), nil
	case "json_schema":
		if err := need(len(f.JSONSchema) > 0, "json_schema"); err != nil {
			return Part{}, err
		}
		return SchemaPart(f.JSONSchema), nil
	case "regex":
		if err := need(f.Pattern != nil && *f.Pattern != "", "pattern"); err != nil {
			return Part{}, err
		}
		return Part{Regex: *f.Pattern}, nil
	case "grammar":
		if err := need(f.Grammar != nil && *f.Grammar != "", "grammar"); err != nil {
			return Part{}, err
		}
		return Part{GBNF: *f.Grammar}, nil
	case "any_text":
		return Part{Text: &FreeText{Without: end}}, nil
	case "sequence", "or":
		if err := need(len(f.Elements) > 0, "elements"); err != nil {
			return Part{}, err
		}
		ps := make([]Part, len(f.Elements))
		for i, e := range f.Elements {
			// inside a sequence only the last element runs up to the tag's end
			inner := end
			if f.Type == "sequence" && i < len(f.Elements)-1 {
				inner = ""
			}
			p, err := stFormat(e, fmt.Sprintf("%s.elements[%d]", path, i), depth+1, inner)
			if err != nil {
				return Part{}, err
			}
			ps[i] = p
		}
		if f.Type == "or" {
			return Alternatives(ps...), nil
		}
		return Sequence(ps...), nil
	case "tag":
		return stTag(raw, path, depth)
	case "triggered_tags", "tags_with_separator":
		if err := need(len(f.Tags) > 0, "tags"); err != nil {
			return Part{}, err
		}
		tags := make([]Part, len(f.Tags))
		begins := make([]string, len(f.Tags))
		for i, t := range f.Tags {
			p, err := stTag(t, fmt.Sprintf("%s.tags[%d]", path, i), depth+1)
			if err != nil {
				return Part{}, err
			}
			tags[i] = p
			var b struct {
				Begin string `json:"begin"`
			}
			_ = json.Unmarshal(t, &b) // stTag read it already
			begins[i] = b.Begin
		}
		if f.Type == "triggered_tags" {
			return triggered(f.Triggers, begins, tags, f.AtLeastOne, f.StopAfterFirst, path)
		}
		if err := need(f.Separator != nil, "separator"); err != nil {
			return Part{}, err
		}
		r := &Repeat{Part: Alternatives(tags...), Min: 0, Max: -1}
		if *f.Separator != "" {
			sep := Literal(*f.Separator)
			r.Sep = &sep
		}
		if f.AtLeastOne {
			r.Min = 1
		}
		if f.StopAfterFirst {
			r.Max = 1
		}
		return Part{Repeat: r}, nil
	case "":
		return Part{}, errf("structural_tag: %s.type is required", path)
	}
	return Part{}, errf("structural_tag: %s.type %q is not supported (const_string, json_schema, regex, grammar, any_text, sequence, or, tag, triggered_tags, tags_with_separator)", path, f.Type)
}

// stTag converts a tag format: begin, content up to end, end.
func stTag(raw json.RawMessage, path string, depth int) (Part, error) {
	var t struct {
		Type    string          `json:"type"`
		Begin   *string         `json:"begin"`
		Content json.RawMessage `json:"content"`
		End     *string         `json:"end"`
	}
	if err := strictUnmarshal(raw, &t); err != nil {
		return Part{}, errf("structural_tag: %s: %v", path, err)
	}
	if t.Type != "" && t.Type != "tag" {
		return Part{}, errf("structural_tag: %s.type is %q; a tag here has type tag", path, t.Type)
	}
	if t.Begin == nil || t.End == nil || len(t.Content) == 0 {
		return Part{}, errf("structural_tag: %s needs begin, content and end", path)
	}
	content, err := stFormat(t.Content, path+".content", depth+1, *t.End)
	if err != nil {
		return Part{}, err
	}
	return tagPart(*t.Begin, content, *t.End), nil
}

// tagPart is begin, content, end (empty literals left out).
func tagPart(begin string, content Part, end string) Part {
	var ps []Part
	if begin != "" {
		ps = append(ps, Literal(begin))
	}
	ps = append(ps, content)
	if end != "" {
		ps = append(ps, Literal(end))
	}
	return Sequence(ps...)
}

// triggered is free text holding no trigger, in which a trigger may only start one of tags
// (each tag's begin starts with a trigger), then free text again; at least one tag when
// atLeastOne, and nothing after the first tag when stopAfterFirst.
func triggered(triggers, begins []string, tags []Part, atLeastOne, stopAfterFirst bool, path string) (Part, error) {
	if len(triggers) == 0 {
		return Part{}, errf("structural_tag: %s: triggers must be a non-empty array of strings", path)
	}
	for i, t := range triggers {
		if t == "" {
			return Part{}, errf("structural_tag: %s: triggers[%d] is empty", path, i)
		}
	}
	for i, b := range begins {
		ok := false
		for _, t := range triggers {
			ok = ok || strings.HasPrefix(b, t)
		}
		if !ok {
			return Part{}, errf("structural_tag: %s[%d].begin %q starts with none of the triggers %q", path, i, b, triggers)
		}
	}
	text := func() Part { return Part{Text: &FreeText{WithoutAny: triggers}} }
	tag := Alternatives(tags...)
	if stopAfterFirst {
		r := &Repeat{Part: tag, Min: 0, Max: 1}
		if atLeastOne {
			r.Min = 1
		}
		return Sequence(text(), Part{Repeat: r}), nil
	}
	r := &Repeat{Part: Sequence(tag, text()), Min: 0, Max: -1}
	if atLeastOne {
		r.Min = 1
	}
	return Sequence(text(), Part{Repeat: r}), nil
}

// strictUnmarshal decodes raw into v, refusing keys v does not have (a misspelt key would
// otherwise silently drop a constraint).
func strictUnmarshal(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}
