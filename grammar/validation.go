package grammar

import (
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validateSchemaDoc checks the schema against its draft's metaschema.
// The document is the tree compileSchema already parsed, converted (not
// parsed again). A schema naming one of the drafts in its root $schema (or
// none: 2020-12) is validated against that draft's metaschema, compiled
// once per process; compiling the schema itself with the validator library
// as well would cost large schemas a good part of their compile for checks
// the grammar compiler makes anyway (it resolves every $ref it reaches and
// compiles every pattern). Other $schema values, and documents with more
// than one $schema, are compiled by the library as a whole.
func validateSchemaDoc(root *jsonValue, text string) error {
	doc := root.toAny()
	url := "https://json-schema.org/draft/2020-12/schema"
	if s := root.get("$schema"); s != nil && s.kind == jsonString {
		url = s.str
	}
	if meta := metaschema(url); meta != nil && strings.Count(text, `"$schema"`) <= 1 {
		if err := meta.Validate(doc); err != nil {
			return errf("invalid schema: %v", compactErr(err.Error()))
		}
		return nil
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource("urn:grammar:root", doc); err != nil {
		return errf("invalid schema: %v", err)
	}
	if _, err := c.Compile("urn:grammar:root"); err != nil {
		return errf("invalid schema: %v", compactErr(err.Error()))
	}
	return nil
}

var (
	metaMu      sync.Mutex
	metaschemas = map[string]*jsonschema.Schema{}
)

// metaschema is the compiled metaschema of the draft url names, or nil
// when url is not one of the drafts the validator library ships.
func metaschema(url string) *jsonschema.Schema {
	u := strings.TrimSuffix(url, "#")
	if rest, ok := strings.CutPrefix(u, "http://"); ok {
		u = rest
	} else {
		u = strings.TrimPrefix(u, "https://")
	}
	switch u {
	case "json-schema.org/draft/2020-12/schema", "json-schema.org/draft/2019-09/schema",
		"json-schema.org/draft-07/schema", "json-schema.org/draft-06/schema", "json-schema.org/draft-04/schema":
	default:
		return nil
	}
	metaMu.Lock()
	defer metaMu.Unlock()
	if m, ok := metaschemas[u]; ok {
		return m
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	m, err := c.Compile("https://" + u)
	if err != nil {
		m = nil // not shipped after all: the caller compiles the schema instead
	}
	metaschemas[u] = m
	return m
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errf("remote $ref %q is not allowed", url)
}

// compactErr folds a multi-line validator error into one line.
func compactErr(s string) string {
	fields := strings.Fields(strings.ReplaceAll(s, "\n", " ; "))
	out := strings.Join(fields, " ")
	if len(out) > 400 {
		out = out[:400] + "..."
	}
	return out
}
