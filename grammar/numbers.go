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
//     DFA for multipleOf k (the lcm of the integer multipleOfs);
//   - otherwise, a multipleOf of the form 10^-p allows at most p fraction
//     digits (other fractional multipleOfs are refused), and bounds allow
//     "integer part in range + any fraction" without an exponent (magRegex);
//   - no bounds and no multipleOf: any JSON number.
func (sc *schemaCompiler) numFrag(s *constraints) (fragment, error) {
	k, fracDigits, intOnly, err := numberMultiples(s)
	if err != nil {
		return fragment{}, err
	}
	if intOnly {
		return sc.integerFrag(s, k)
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
	return b.rawChars(d), nil
}

// decimalFrag builds the number texts within s's bounds with at most
// fracDigits fraction digits (-1 any), no exponent when bounded.
func (sc *schemaCompiler) decimalFrag(s *constraints, fracDigits int) (fragment, error) {
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
		return sc.never("minimum/maximum: no number in range"), nil
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
