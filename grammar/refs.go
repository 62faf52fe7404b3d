package grammar

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// index records $id and $anchor locations and each schema's base URI.
func (sc *schemaCompiler) index(j *jsonValue, base string, depth int) {
	if depth > 200 {
		return
	}
	switch j.kind {
	case jsonObject:
		if id := j.get("$id"); id != nil && id.kind == jsonString {
			base = resolveURI(base, id.str)
			sc.addID(stripFrag(base), j)
		} else if id := j.get("id"); id != nil && id.kind == jsonString && !strings.HasPrefix(id.str, "#") {
			base = resolveURI(base, id.str)
			sc.addID(stripFrag(base), j)
		}
		if a := j.get("$anchor"); a != nil && a.kind == jsonString {
			sc.anchors[stripFrag(base)+"#"+a.str] = j
		}
		if id := j.get("id"); id != nil && id.kind == jsonString && strings.HasPrefix(id.str, "#") {
			sc.anchors[stripFrag(base)+id.str] = j
		}
		sc.base[j] = base
		if depth == 0 {
			sc.addID(stripFrag(base), j)
		}
		for _, v := range j.vals {
			sc.index(v, base, depth+1)
		}
	case jsonArray:
		for _, v := range j.arr {
			sc.index(v, base, depth+1)
		}
	}
}

// inKeyword names the schema keyword a compile error comes from.
func inKeyword(kw string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return errf("%s: %s", kw, e.Reason)
	}
	return fmt.Errorf("%s: %w", kw, err)
}

// addID records j as the schema identified by uri. Generated schemas often
// repeat an $id (e.g. "#" or a path copied into several properties); that
// is harmless unless a $ref names it, which resolveRef then refuses.
func (sc *schemaCompiler) addID(uri string, j *jsonValue) {
	if prev := sc.ids[uri]; prev != nil && prev != j {
		sc.dupIDs[uri] = true
	}
	sc.ids[uri] = j
}

func stripFrag(u string) string {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		return u[:i]
	}
	return u
}

func resolveURI(base, ref string) string {
	b, err := url.Parse(base)
	if err != nil {
		return ref
	}
	r, err := url.Parse(ref)
	if err != nil {
		return ref
	}
	return b.ResolveReference(r).String()
}

func (sc *schemaCompiler) resolveRef(from *jsonValue, ref string) (*jsonValue, error) {
	base := sc.base[from]
	if base == "" {
		base = "urn:grammar:root"
	}
	full := resolveURI(base, ref)
	if strings.HasPrefix(ref, "#") {
		full = stripFrag(base) + ref
	}
	doc := sc.ids[stripFrag(full)]
	if doc == nil {
		return nil, errf("unresolvable $ref %q", ref)
	}
	if sc.dupIDs[stripFrag(full)] {
		return nil, errf("$ref %q: more than one schema has the $id %q", ref, stripFrag(full))
	}
	frag := ""
	if i := strings.IndexByte(full, '#'); i >= 0 {
		frag = full[i+1:]
	}
	if frag == "" {
		return doc, nil
	}
	if !strings.HasPrefix(frag, "/") {
		if a := sc.anchors[stripFrag(full)+"#"+frag]; a != nil {
			return a, nil
		}
		return nil, errf("unresolvable $ref %q", ref)
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil, errf("bad $ref %q", ref)
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur.kind {
		case jsonObject:
			cur = cur.get(tok)
		case jsonArray:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur.arr) {
				return nil, errf("unresolvable $ref %q", ref)
			}
			cur = cur.arr[i]
		default:
			cur = nil
		}
		if cur == nil {
			return nil, errf("unresolvable $ref %q", ref)
		}
	}
	if cur.kind != jsonObject && cur.kind != jsonBool {
		return nil, errf("$ref %q does not point to a schema", ref)
	}
	return cur, nil
}
