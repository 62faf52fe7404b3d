package grammar

// Free JSON string body automaton (byte level, strict UTF-8). Substates:
const (
	bodyNormal = iota
	bodyEscape
	bodyHex4
	bodyHex3
	bodyHex2
	bodyHex1
	bodyCont1
	bodyCont2
	bodyCont3
	bodyAfterE0
	bodyAfterED
	bodyAfterF0
	bodyAfterF4
	numBodyStates
)

const (
	bodyDead   = -1
	bodyClosed = -2
)

func isHex(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
}

// bodyStep is the reference transition of a free JSON string body.
func bodyStep(q int, b byte) int {
	switch q {
	case bodyNormal:
		switch {
		case b == '"':
			return bodyClosed
		case b == '\\':
			return bodyEscape
		case b < 0x20:
			return bodyDead
		case b < 0x80:
			return bodyNormal
		case b < 0xC2:
			return bodyDead
		case b < 0xE0:
			return bodyCont1
		case b == 0xE0:
			return bodyAfterE0
		case b == 0xED:
			return bodyAfterED
		case b < 0xF0:
			return bodyCont2
		case b == 0xF0:
			return bodyAfterF0
		case b < 0xF4:
			return bodyCont3
		case b == 0xF4:
			return bodyAfterF4
		}
		return bodyDead
	case bodyEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			return bodyNormal
		case 'u':
			return bodyHex4
		}
		return bodyDead
	case bodyHex4, bodyHex3, bodyHex2:
		if isHex(b) {
			return q + 1
		}
		return bodyDead
	case bodyHex1:
		if isHex(b) {
			return bodyNormal
		}
		return bodyDead
	case bodyCont1:
		if b >= 0x80 && b <= 0xBF {
			return bodyNormal
		}
	case bodyCont2:
		if b >= 0x80 && b <= 0xBF {
			return bodyCont1
		}
	case bodyCont3:
		if b >= 0x80 && b <= 0xBF {
			return bodyCont2
		}
	case bodyAfterE0:
		if b >= 0xA0 && b <= 0xBF {
			return bodyCont1
		}
	case bodyAfterED:
		if b >= 0x80 && b <= 0x9F {
			return bodyCont1
		}
	case bodyAfterF0:
		if b >= 0x90 && b <= 0xBF {
			return bodyCont2
		}
	case bodyAfterF4:
		if b >= 0x80 && b <= 0x8F {
			return bodyCont2
		}
	}
	return bodyDead
}

// constrainedCost returns how many chars bs spells inside a constrained
// string body from a char boundary (a trailing partial char counts as one),
// or ok false when it leaves the body: a quote, a raw control char, an
// escape charRange does not emit (only \" \\ \/ \b \f \n \r \t and
// \u00[01]X), or invalid UTF-8.
func constrainedCost(bs []byte) (n int, ok bool) {
	for i := 0; i < len(bs); {
		c := bs[i]
		switch {
		case c == '"' || c < 0x20:
			return 0, false
		case c == '\\':
			if i+1 == len(bs) {
				return n + 1, true
			}
			switch bs[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for j := 2; j < 6; j++ {
					if i+j == len(bs) {
						return n + 1, true
					}
					x := bs[i+j]
					switch {
					case j <= 3 && x == '0':
					case j == 4 && (x == '0' || x == '1'):
					case j == 5 && isHex(x):
					default:
						return 0, false
					}
				}
				i += 6
			default:
				return 0, false
			}
		case c < 0x80:
			i++
		default:
			q := bodyStep(bodyNormal, c)
			if q < 0 {
				return 0, false
			}
			i++
			for q != bodyNormal {
				if i == len(bs) {
					return n + 1, true
				}
				if q = bodyStep(q, bs[i]); q < 0 {
					return 0, false
				}
				i++
			}
		}
		n++
	}
	return n, true
}

type bodyEdge struct {
	from, to int
	lo, hi   byte
}

// freeBodyEdges are the byte-range edges of the string body automaton
// (bodyStep), computed once: every free string of every grammar has them.
var freeBodyEdges = func() []bodyEdge {
	var es []bodyEdge
	for i := 0; i < numBodyStates; i++ {
		lastT, start := -100, 0
		flush := func(end int) {
			if lastT == -100 || lastT == bodyDead {
				return
			}
			es = append(es, bodyEdge{from: i, to: lastT, lo: byte(start), hi: byte(end)})
		}
		for c := 0; c < 256; c++ {
			t := bodyStep(i, byte(c))
			if t != lastT {
				flush(c - 1)
				lastT, start = t, c
			}
		}
		flush(255)
	}
	return es
}()
