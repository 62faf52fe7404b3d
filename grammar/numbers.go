package grammar

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

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

// numFrag builds the number texts s allows, as a regex over the JSON
// number syntax. It is sound and may be narrower than the schema:
//   - integers only (type integer, or an integer multipleOf): an exact
//     digit-range regex of [ceil(lo), floor(hi)], intersected with a mod-k
//     DFA for multipleOf k (the lcm of the integer multipleOfs); numbers
//     (not type integer) may add a zero fraction;
//   - otherwise, a multipleOf of the form 10^-p allows at most p fraction
//     digits (other fractional multipleOfs are refused), and bounds allow
//     "integer part in range + any fraction" without an exponent (magRegex),
//     except that minimum 0 alone takes exponents too;
//   - no bounds and no multipleOf: any JSON number.
func (sc *schemaCompiler) numFrag(s *constraints) (fragment, error) {
	k, fracDigits, intOnly, err := numberMultiples(s)
	if err != nil {
		return fragment{}, err
	}
	if intOnly {
		if s.fractional {
			return sc.never("type integer and not integer"), nil
		}
		f, err := sc.integerFrag(s, k)
		if err != nil || s.types&tNum == 0 {
			return f, err
		}
		// a number that an integer multipleOf makes integral may still be
		// written with a zero fraction (6000.0 is a multiple of 1)
		b := sc.b
		return b.seq(f, b.opt(b.seq(b.lit(".0"), b.star(b.lit("0"))))), nil
	}
	for _, v := range s.excluded {
		if v.kind == jsonNumber {
			// 1, 1.0 and 1e0 are one value: excluding it takes more than a text
			return fragment{}, errf("not: excluding a number from non-integer numbers is not supported")
		}
	}
	if len(s.notMults) > 0 {
		return fragment{}, errf("not: multipleOf on non-integer numbers is not supported")
	}
	return sc.decimalFrag(s, fracDigits)
}

// numberMultiples reads s's multipleOfs: k is the lcm of the integer ones
// (nil when none or 1), fracDigits the fewest fraction digits a 10^-p one
// allows (-1 none), intOnly whether only integers are allowed.
func numberMultiples(s *constraints) (k *big.Int, fracDigits int, intOnly bool, err error) {
	intOnly = s.types&tNum == 0
	fracDigits = -1
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
				return nil, 0, false, errf("multipleOf %s is not supported", m.RatString())
			}
			d = q
			p++
		}
		if m.Num().Cmp(one) != 0 {
			return nil, 0, false, errf("multipleOf %s is not supported", m.RatString())
		}
		if fracDigits < 0 || p < fracDigits {
			fracDigits = p
		}
	}
	if k != nil && k.Cmp(one) == 0 {
		k = nil
	}
	return k, fracDigits, intOnly, nil
}

// integerFrag builds the integer texts within s's bounds that k (nil: 1)
// divides.
func (sc *schemaCompiler) integerFrag(s *constraints, k *big.Int) (fragment, error) {
	b := sc.b
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
		return sc.never(fmt.Sprintf("minimum/maximum: no integer from %s to %s", s.lo.RatString(), s.hi.RatString())), nil
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
		if d.Empty() {
			return sc.never(fmt.Sprintf("multipleOf %s: no multiple within minimum/maximum", k)), nil
		}
	}
	for _, nk := range s.notMults {
		if !nk.IsInt64() || nk.Int64() > 10000 {
			return fragment{}, errf("not: multipleOf %s is too large", nk)
		}
		if d, err = chardfa.Intersect(d, chardfa.Complement(chardfa.Multiples(int(nk.Int64())))); err != nil {
			return fragment{}, err
		}
	}
	if ex := excludedIntegers(s); ex != "" {
		x, err := chardfa.Regex("^(?:"+ex+")$", false)
		if err != nil {
			return fragment{}, err
		}
		if d, err = chardfa.Intersect(d, chardfa.Complement(x)); err != nil {
			return fragment{}, err
		}
	}
	if d.Empty() {
		return sc.never("not/enum: every integer in range is excluded"), nil
	}
	return b.rawChars(d), nil
}

// excludedIntegers is a regex of the canonical texts of the integer values
// s excludes ("" none); a non-integer excluded value excludes no integer.
func excludedIntegers(s *constraints) string {
	var alts []string
	for _, v := range s.excluded {
		if r, ok := numRat(v.num); v.kind == jsonNumber && ok && r.IsInt() {
			alts = append(alts, r.Num().String())
		}
	}
	return strings.Join(alts, "|")
}

// decimalFrag builds the number texts within s's bounds with at most
// fracDigits fraction digits (-1 any), no exponent when bounded.
func (sc *schemaCompiler) decimalFrag(s *constraints, fracDigits int) (fragment, error) {
	if s.lo == nil && s.hi == nil && fracDigits < 0 && !s.fractional {
		return sc.numberAny(), nil
	}
	fr := `(?:\.[0-9]+)?`
	if fracDigits == 0 {
		fr = "" // no fraction can be non-zero
	} else if fracDigits > 0 {
		fr = `(?:\.[0-9]{1,` + strconv.Itoa(fracDigits) + `})?`
	}
	if s.lo == nil && s.hi == nil && !s.fractional {
		return sc.rawRegex(`^-?(?:0|[1-9][0-9]*)` + fr + `$`)
	}
	fixed := `^(?:0|[1-9][0-9]*)` + fr + `$` // magnitudes with the allowed fraction digits
	if s.fractional {
		if fracDigits == 0 {
			return sc.never("not integer, and multipleOf allows no fraction"), nil
		}
		fixed = `^(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*$`
		if fracDigits > 0 {
			fixed = `^(?:0|[1-9][0-9]*)\.[0-9]{0,` + strconv.Itoa(fracDigits-1) + `}[1-9]$`
		}
	}
	var fs []fragment
	zero := new(big.Rat)
	// x >= 0
	if s.hi == nil || s.hi.Sign() > 0 || (s.hi.Sign() == 0 && !s.hiEx) {
		L, Lex := zero, false
		if s.lo != nil && s.lo.Sign() >= 0 {
			L, Lex = s.lo, s.loEx
		}
		d, err := magnitudeDFA(L, Lex, s.hi, s.hiEx, fixed)
		if err != nil {
			return fragment{}, err
		}
		if !d.Empty() {
			fs = append(fs, sc.b.rawChars(d))
		}
		// minimum 0 alone: every unsigned number qualifies, exponent or not
		// (1e-06 is >= 0), which a bound elsewhere would not allow
		if L.Sign() == 0 && !Lex && s.hi == nil && fracDigits < 0 && !s.fractional {
			f, err := sc.rawRegex(`^(?:0|[1-9][0-9]*)(?:\.[0-9]+)?[eE][-+]?[0-9]+$`)
			if err != nil {
				return fragment{}, err
			}
			fs = append(fs, f)
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
		d, err := magnitudeDFA(L, Lex, H, s.loEx, fixed)
		if err != nil {
			return fragment{}, err
		}
		if !d.Empty() {
			fs = append(fs, sc.b.seq(sc.b.lit("-"), sc.b.rawChars(d)))
		}
	}
	if len(fs) == 0 {
		return sc.never("minimum/maximum: no number in range"), nil
	}
	return sc.b.alt(fs...), nil
}

// magnitudeDFA accepts the decimal texts without sign or exponent (those
// of fixed too) whose value m satisfies L <(=) m <(=) H, H nil unbounded,
// L >= 0: exactly, digit by digit, so 0.5 passes minimum 0.1 and 10.0
// passes maximum 10.
func magnitudeDFA(L *big.Rat, Lex bool, H *big.Rat, Hex bool, fixed string) (*chardfa.DFA, error) {
	d, err := chardfa.Regex(fixed, false)
	if err != nil {
		return nil, err
	}
	bounds := []string{atLeastRegex(L, Lex)}
	if H != nil {
		bounds = append(bounds, atMostRegex(H, Hex))
	}
	for _, re := range bounds {
		b, err := chardfa.Regex("^(?:"+re+")$", false)
		if err != nil {
			return nil, err
		}
		if d, err = chardfa.Intersect(d, b); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// decimalParts splits r >= 0, a finite decimal (every JSON number is), into
// its integer part and fraction digits without trailing zeros.
func decimalParts(r *big.Rat) (*big.Int, string) {
	ip := ratFloor(r)
	frac := new(big.Rat).Sub(r, new(big.Rat).SetInt(ip))
	digits := ""
	ten := big.NewRat(10, 1)
	for frac.Sign() != 0 && len(digits) < 400 {
		frac.Mul(frac, ten)
		dg := ratFloor(frac)
		digits += dg.String()
		frac.Sub(frac, new(big.Rat).SetInt(dg))
	}
	return ip, digits
}

// digitsAbove and digitsBelow are the class of digits above / below d ("" when none).
func digitsAbove(d byte) string {
	if d == '9' {
		return ""
	}
	return "[" + string(d+1) + "-9]"
}

func digitsBelow(d byte) string {
	if d == '0' {
		return ""
	}
	return "[0-" + string(d-1) + "]"
}

// fracAtLeast matches non-empty digit strings s with 0.s >= 0.b (strict: >).
func fracAtLeast(b string, strict bool) string {
	if b == "" {
		if strict {
			return `[0-9]*[1-9][0-9]*`
		}
		return `[0-9]+`
	}
	alts := []string{}
	if c := digitsAbove(b[0]); c != "" {
		alts = append(alts, c+`[0-9]*`)
	}
	rest := fracAtLeast(b[1:], strict)
	if b[1:] == "" && !strict {
		rest = `[0-9]*` // 0.d then anything: >= 0.d
	}
	alts = append(alts, string(b[0])+"(?:"+rest+")")
	return strings.Join(alts, "|")
}

// fracAtMost matches non-empty digit strings s with 0.s <= 0.b (strict: <);
// "[]" when none.
func fracAtMost(b string, strict bool) string {
	if b == "" {
		if strict {
			return "[]"
		}
		return `0+`
	}
	alts := []string{}
	if c := digitsBelow(b[0]); c != "" {
		alts = append(alts, c+`[0-9]*`)
	}
	// after the digit b[0]: nothing more (0.b[0] < 0.b unless b[1:] is empty),
	// or a tail at most 0.b[1:]
	tail := fracAtMost(b[1:], strict)
	switch {
	case b[1:] != "":
		alts = append(alts, string(b[0])+"(?:"+tail+")?")
	case !strict:
		alts = append(alts, string(b[0])+"0*")
	}
	if len(alts) == 0 {
		return "[]"
	}
	return strings.Join(alts, "|")
}

// atLeastRegex matches magnitudes m >= L (strict: >), L >= 0.
func atLeastRegex(L *big.Rat, strict bool) string {
	ip, b := decimalParts(L)
	above := "(?:" + intRangeRegex(new(big.Int).Add(ip, one), nil) + `)(?:\.[0-9]+)?`
	same := ip.String() + `\.(?:` + fracAtLeast(b, strict) + ")"
	if b == "" && !strict {
		same = ip.String() + `(?:\.[0-9]+)?`
	}
	return above + "|" + same
}

// atMostRegex matches magnitudes m <= H (strict: <), H >= 0.
func atMostRegex(H *big.Rat, strict bool) string {
	ip, b := decimalParts(H)
	var alts []string
	if ip.Sign() > 0 {
		alts = append(alts, "(?:"+intRangeRegex(big.NewInt(0), new(big.Int).Sub(ip, one))+`)(?:\.[0-9]+)?`)
	}
	// the integer part itself: with no fraction when that is allowed, or a
	// fraction at most 0.b
	if !(strict && b == "") {
		alts = append(alts, ip.String())
	}
	if f := fracAtMost(b, strict); f != "[]" {
		alts = append(alts, ip.String()+`\.(?:`+f+")")
	}
	if len(alts) == 0 {
		return "[]"
	}
	return strings.Join(alts, "|")
}

func (sc *schemaCompiler) rawRegex(re string) (fragment, error) {
	d, err := chardfa.Regex(re, false)
	if err != nil {
		return fragment{}, err
	}
	return sc.b.rawChars(d), nil
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

func (sc *schemaCompiler) numberAny() fragment {
	b := sc.b
	intPart := b.alt(b.lit("0"), b.seq(b.lit19(), b.star(b.digit())))
	frac := b.opt(b.seq(b.lit("."), b.digit(), b.star(b.digit())))
	exp := b.opt(b.seq(b.byteSet("eE"), b.opt(b.byteSet("+-")), b.digit(), b.star(b.digit())))
	return b.seq(b.opt(b.lit("-")), intPart, frac, exp)
}

func (b *builder) digit() fragment {
	in, out := b.node(), b.node()
	b.edge(in, '0', '9', out)
	return fragment{in, out}
}

func (b *builder) lit19() fragment {
	in, out := b.node(), b.node()
	b.edge(in, '1', '9', out)
	return fragment{in, out}
}

func (b *builder) byteSet(s string) fragment {
	in, out := b.node(), b.node()
	for i := 0; i < len(s); i++ {
		b.edge(in, s[i], s[i], out)
	}
	return fragment{in, out}
}
