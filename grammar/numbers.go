package grammar

import (
	"math/big"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
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

func ratCeil(r *big.Rat) *big.Int {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func ratFloor(r *big.Rat) *big.Int {
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	return q
}

var one = big.NewInt(1)

func (sc *schemaCompiler) numFrag(s *constraints) (fragment, error) {
	b := sc.b
	intOnly := s.types&tNum == 0
	var k *big.Int // integer multipleOf (lcm)
	fracDigits := -1
	for _, m := range s.mults {
		if m.IsInt() {
			intOnly = true
			if k == nil {
				k = new(big.Int).Set(m.Num())
			} else {
				g := new(big.Int).GCD(nil, nil, k, m.Num())
				k.Mul(k, new(big.Int).Quo(m.Num(), g))
			}
			continue
		}
		// 10^-p: at most p fraction digits.
		p := 0
		d := new(big.Int).Set(m.Denom())
		ten := big.NewInt(10)
		for d.Cmp(one) > 0 {
			q, r := new(big.Int).QuoRem(d, ten, new(big.Int))
			if r.Sign() != 0 {
				return fragment{}, errf("multipleOf %s is not supported", m.RatString())
			}
			d = q
			p++
		}
		if m.Num().Cmp(one) != 0 {
			return fragment{}, errf("multipleOf %s is not supported", m.RatString())
		}
		if fracDigits < 0 || p < fracDigits {
			fracDigits = p
		}
	}
	if k != nil && k.Cmp(one) == 0 {
		k = nil
	}
	if intOnly {
		var lo, hi *big.Int
		if s.lo != nil {
			lo = ratCeil(s.lo)
			if s.loEx && s.lo.IsInt() {
				lo.Add(lo, one)
			}
		}
		if s.hi != nil {
			hi = ratFloor(s.hi)
			if s.hiEx && s.hi.IsInt() {
				hi.Sub(hi, one)
			}
		}
		if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
			return b.never(), nil
		}
		d, err := chardfa.Regex("^(?:"+intRangeRegex(lo, hi)+")$", false)
		if err != nil {
			return fragment{}, err
		}
		if k != nil {
			if !k.IsInt64() || k.Int64() > 10000 {
				return fragment{}, errf("multipleOf %s is too large", k)
			}
			if d, err = chardfa.Intersect(d, chardfa.Multiples(int(k.Int64()))); err != nil {
				return fragment{}, err
			}
		}
		return b.rawChars(d), nil
	}
	if s.lo == nil && s.hi == nil && fracDigits < 0 {
		return sc.numberAny(), nil
	}
	fr := `(?:\.[0-9]+)?`
	nz := `\.[0-9]*[1-9][0-9]*`
	if fracDigits == 0 {
		fr, nz = "", "[]" // no fraction can be non-zero
	} else if fracDigits > 0 {
		fr = `(?:\.[0-9]{1,` + strconv.Itoa(fracDigits) + `})?`
		nz = `\.(?:[0-9]{0,` + strconv.Itoa(fracDigits-1) + `}[1-9])`
	}
	if s.lo == nil && s.hi == nil {
		return sc.rawRegex(`^-?(?:0|[1-9][0-9]*)` + fr + `$`)
	}
	var alts []string
	zero := new(big.Rat)
	// x >= 0
	if s.hi == nil || s.hi.Sign() > 0 || (s.hi.Sign() == 0 && !s.hiEx) {
		L, Lex := zero, false
		if s.lo != nil && s.lo.Sign() >= 0 {
			L, Lex = s.lo, s.loEx
		}
		if r := magRegex(L, Lex, s.hi, s.hiEx, fr, nz); r != "" {
			alts = append(alts, r)
		}
	}
	// x < 0: magnitude m = -x > 0
	if s.lo == nil || s.lo.Sign() < 0 {
		L, Lex := zero, true
		if s.hi != nil && s.hi.Sign() < 0 {
			L, Lex = new(big.Rat).Neg(s.hi), s.hiEx
		}
		var H *big.Rat
		if s.lo != nil {
			H = new(big.Rat).Neg(s.lo)
		}
		if r := magRegex(L, Lex, H, s.loEx, fr, nz); r != "" {
			alts = append(alts, "-(?:"+r+")")
		}
	}
	if len(alts) == 0 {
		return b.never(), nil
	}
	return sc.rawRegex("^(?:" + strings.Join(alts, "|") + ")$")
}

func (sc *schemaCompiler) rawRegex(re string) (fragment, error) {
	d, err := chardfa.Regex(re, false)
	if err != nil {
		return fragment{}, err
	}
	return sc.b.rawChars(d), nil
}

// magRegex matches decimal texts (no exponent) whose value m satisfies
// L <(=) m <(=) H (H nil = unbounded); it may miss some valid values.
func magRegex(L *big.Rat, Lex bool, H *big.Rat, Hex bool, fr, nz string) string {
	var alts []string
	lowAny := ratCeil(L)
	if L.IsInt() && Lex {
		lowAny = new(big.Int).Add(lowAny, one)
		// I = L with a nonzero fraction, if L+1 <= H
		if H == nil || new(big.Rat).SetInt(lowAny).Cmp(H) <= 0 {
			alts = append(alts, L.Num().String()+nz)
		}
	}
	if H == nil {
		alts = append(alts, "(?:"+intRangeRegex(lowAny, nil)+")"+fr)
		return strings.Join(alts, "|")
	}
	fh := ratFloor(H)
	if hiAny := new(big.Int).Sub(fh, one); lowAny.Cmp(hiAny) <= 0 {
		alts = append(alts, "(?:"+intRangeRegex(lowAny, hiAny)+")"+fr)
	}
	exactOK := (!H.IsInt() || !Hex) && new(big.Rat).SetInt(fh).Cmp(L) >= 0 && !(Lex && new(big.Rat).SetInt(fh).Cmp(L) == 0)
	if exactOK {
		alts = append(alts, fh.String())
	}
	return strings.Join(alts, "|")
}

// intRangeRegex matches canonical integer texts in [lo,hi] (nil = unbounded).
func intRangeRegex(lo, hi *big.Int) string {
	var alts []string
	if hi == nil || hi.Sign() >= 0 {
		a := big.NewInt(0)
		if lo != nil && lo.Sign() > 0 {
			a = lo
		}
		alts = append(alts, posRange(a, hi))
	}
	if lo == nil || lo.Sign() < 0 {
		a := big.NewInt(1)
		if hi != nil && hi.Sign() < 0 {
			a = new(big.Int).Neg(hi)
		}
		var b *big.Int
		if lo != nil {
			b = new(big.Int).Neg(lo)
		}
		alts = append(alts, "-(?:"+posRange(a, b)+")")
	}
	return strings.Join(alts, "|")
}

func posRange(a, b *big.Int) string {
	as := a.String()
	top := new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(as))), nil), one)
	if b == nil {
		return fixedRange(as, top.String()) + "|[1-9][0-9]{" + strconv.Itoa(len(as)) + ",}"
	}
	if a.Cmp(b) > 0 {
		return "[]"
	}
	bs := b.String()
	if len(as) < len(bs) {
		return fixedRange(as, top.String()) + "|" + posRange(new(big.Int).Add(top, one), b)
	}
	return fixedRange(as, bs)
}

// fixedRange matches digit strings of equal length between a and b.
func fixedRange(a, b string) string {
	if a == b {
		return a
	}
	if len(a) == 1 {
		return "[" + a + "-" + b + "]"
	}
	i := 0
	for a[i] == b[i] {
		i++
	}
	p, da, db, ra, rb := a[:i], a[i], b[i], a[i+1:], b[i+1:]
	r := len(ra)
	if ra == strings.Repeat("0", r) && rb == strings.Repeat("9", r) {
		return p + "[" + string(da) + "-" + string(db) + "][0-9]{" + strconv.Itoa(r) + "}"
	}
	var alts []string
	alts = append(alts, p+string(da)+"(?:"+fixedRange(ra, strings.Repeat("9", r))+")")
	if da+1 <= db-1 {
		alts = append(alts, p+"["+string(da+1)+"-"+string(db-1)+"][0-9]{"+strconv.Itoa(r)+"}")
	}
	alts = append(alts, p+string(db)+"(?:"+fixedRange(strings.Repeat("0", r), rb)+")")
	return strings.Join(alts, "|")
}

const (
	reDate     = `[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	reTime     = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	reLabel    = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?`
	reHost     = reLabel + `(?:\.` + reLabel + `){0,4}`
	reDomain   = reLabel + `(?:\.` + reLabel + `){0,3}\.[A-Za-z]{2,12}`
	reLocal    = `[A-Za-z0-9_+-]{1,20}(?:\.[A-Za-z0-9_+-]{1,20}){0,2}`
	reOctet    = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	reH16      = `[0-9a-fA-F]{1,4}`
	rePathChar = `[A-Za-z0-9._~!$&'()*+,;=:@-]`
)

var reIPv6 = strings.NewReplacer("h", reH16).Replace(`(?:(?:h:){7}h|(?:h:){1,7}:|(?:h:){1,6}:h|(?:h:){1,5}(?::h){1,2}|(?:h:){1,4}(?::h){1,3}|(?:h:){1,3}(?::h){1,4}|(?:h:){1,2}(?::h){1,5}|h:(?::h){1,6}|:(?:(?::h){1,7}|:))`)

var reURI = `[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::[0-9]{1,5})?(?:/` + rePathChar + `*)*(?:\?(?:` + rePathChar + `|[/?])*)?(?:#(?:` + rePathChar + `|[/?])*)?`

// formatRegex returns an anchored regex for a format; ok=false means the
// format is not one validators assert, so it is an annotation.
func formatRegex(f string) (string, bool, error) {
	switch f {
	case "date":
		return "^" + reDate + "$", true, nil
	case "time":
		return "^" + reTime + "$", true, nil
	case "date-time":
		return "^" + reDate + "T" + reTime + "$", true, nil
	case "email":
		return "^" + reLocal + "@" + reDomain + "$", true, nil
	case "hostname":
		return "^" + reHost + "$", true, nil
	case "uuid":
		return `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`, true, nil
	case "ipv4":
		return "^" + reOctet + `(?:\.` + reOctet + "){3}$", true, nil
	case "ipv6":
		return "^" + reIPv6 + "$", true, nil
	case "uri", "iri", "uri-reference", "iri-reference", "url":
		return "^" + reURI + "$", true, nil
	case "duration", "period", "json-pointer", "relative-json-pointer", "regex", "idn-hostname",
		"idn-email", "uri-template", "semver":
		return "", false, errf("format %q is not supported", f)
	}
	return "", false, nil
}
