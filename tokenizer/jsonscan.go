package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A minimal JSON reader for the large parts of tokenizer.json (vocab and merges), several times
// faster than encoding/json there. The small parts are handed to encoding/json as raw values.

type jscan struct {
	data []byte
	pos  int
	buf  []byte // scratch for strings with escapes
}

var errDepth = errors.New("json: nesting too deep")

func (j *jscan) errorf(format string, args ...any) error {
	return fmt.Errorf("json at offset %d: %s", j.pos, fmt.Sprintf(format, args...))
}

func (j *jscan) ws() {
	for j.pos < len(j.data) {
		switch j.data[j.pos] {
		case ' ', '\t', '\n', '\r':
			j.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (j *jscan) peek() byte {
	j.ws()
	if j.pos >= len(j.data) {
		return 0
	}
	return j.data[j.pos]
}

func (j *jscan) expect(c byte) error {
	if j.peek() != c {
		if j.pos >= len(j.data) {
			return j.errorf("unexpected end, want %q", c)
		}
		return j.errorf("got %q, want %q", j.data[j.pos], c)
	}
	j.pos++
	return nil
}

// str reads a string. The result aliases the scanner's scratch buffer or the input: copy it to
// keep it.
func (j *jscan) str() ([]byte, error) {
	if err := j.expect('"'); err != nil {
		return nil, err
	}
	start := j.pos
	// Fast path: no escapes, ASCII or valid UTF-8.
	for j.pos < len(j.data) {
		c := j.data[j.pos]
		if c == '"' {
			s := j.data[start:j.pos]
			j.pos++
			if !utf8.Valid(s) {
				return []byte(string([]rune(string(s)))), nil // invalid bytes -> U+FFFD, like encoding/json
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		j.pos++
	}
	j.buf = append(j.buf[:0], j.data[start:j.pos]...)
	for {
		if j.pos >= len(j.data) {
			return nil, j.errorf("unterminated string")
		}
		c := j.data[j.pos]
		switch {
		case c == '"':
			j.pos++
			if !utf8.Valid(j.buf) {
				j.buf = []byte(string([]rune(string(j.buf))))
			}
			return j.buf, nil
		case c < 0x20:
			return nil, j.errorf("control character in string")
		case c != '\\':
			j.buf = append(j.buf, c)
			j.pos++
			continue
		}
		if j.pos+1 >= len(j.data) {
			return nil, j.errorf("unterminated escape")
		}
		e := j.data[j.pos+1]
		j.pos += 2
		switch e {
		case '"', '\\', '/':
			j.buf = append(j.buf, e)
		case 'b':
			j.buf = append(j.buf, '\b')
		case 'f':
			j.buf = append(j.buf, '\f')
		case 'n':
			j.buf = append(j.buf, '\n')
		case 'r':
			j.buf = append(j.buf, '\r')
		case 't':
			j.buf = append(j.buf, '\t')
		case 'u':
			r, ok := j.hex4()
			if !ok {
				return nil, j.errorf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A valid pair decodes to one rune; a lone surrogate becomes U+FFFD.
				dec := utf8.RuneError
				if j.pos+1 < len(j.data) && j.data[j.pos] == '\\' && j.data[j.pos+1] == 'u' {
					save := j.pos
					j.pos += 2
					if r2, ok2 := j.hex4(); ok2 && utf16.DecodeRune(r, r2) != utf8.RuneError {
						dec = utf16.DecodeRune(r, r2)
					} else {
						j.pos = save
					}
				}
				r = dec
			}
			j.buf = utf8.AppendRune(j.buf, r)
		default:
			return nil, j.errorf("bad escape \\%c", e)
		}
	}
}

func (j *jscan) hex4() (rune, bool) {
	if j.pos+4 > len(j.data) {
		return 0, false
	}
	var r rune
	for _, c := range j.data[j.pos : j.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	j.pos += 4
	return r, true
}

// int reads a JSON number that must be an integer.
func (j *jscan) int() (int64, error) {
	j.ws()
	start := j.pos
	for j.pos < len(j.data) {
		c := j.data[j.pos]
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			j.pos++
			continue
		}
		break
	}
	n, err := strconv.ParseInt(string(j.data[start:j.pos]), 10, 64)
	if err != nil {
		j.pos = start
		return 0, j.errorf("want an integer")
	}
	return n, nil
}

// skip skips one value of any kind and returns its raw bytes.
func (j *jscan) skip(depth int) ([]byte, error) {
	if depth > 200 {
		return nil, errDepth
	}
	c := j.peek()
	start := j.pos
	switch {
	case c == '"':
		if _, err := j.str(); err != nil {
			return nil, err
		}
	case c == '{':
		j.pos++
		if j.peek() == '}' {
			j.pos++
			break
		}
		for {
			if _, err := j.str(); err != nil {
				return nil, err
			}
			if err := j.expect(':'); err != nil {
				return nil, err
			}
			if _, err := j.skip(depth + 1); err != nil {
				return nil, err
			}
			if j.peek() == ',' {
				j.pos++
				continue
			}
			if err := j.expect('}'); err != nil {
				return nil, err
			}
			break
		}
	case c == '[':
		j.pos++
		if j.peek() == ']' {
			j.pos++
			break
		}
		for {
			if _, err := j.skip(depth + 1); err != nil {
				return nil, err
			}
			if j.peek() == ',' {
				j.pos++
				continue
			}
			if err := j.expect(']'); err != nil {
				return nil, err
			}
			break
		}
	case c == '-' || c >= '0' && c <= '9':
		for j.pos < len(j.data) {
			d := j.data[j.pos]
			if d >= '0' && d <= '9' || d == '-' || d == '+' || d == '.' || d == 'e' || d == 'E' {
				j.pos++
				continue
			}
			break
		}
		if _, err := strconv.ParseFloat(string(j.data[start:j.pos]), 64); err != nil {
			var ne *strconv.NumError
			if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
				return nil, j.errorf("bad number")
			}
		}
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(j.data)-j.pos >= len(lit) && string(j.data[j.pos:j.pos+len(lit)]) == lit {
				j.pos += len(lit)
				return j.data[start:j.pos], nil
			}
		}
		if j.pos >= len(j.data) {
			return nil, j.errorf("unexpected end")
		}
		return nil, j.errorf("unexpected %q", j.data[j.pos])
	}
	return j.data[start:j.pos], nil
}

// object calls f for each key of an object; f must consume the value.
func (j *jscan) object(f func(key []byte) error) error {
	if err := j.expect('{'); err != nil {
		return err
	}
	if j.peek() == '}' {
		j.pos++
		return nil
	}
	for {
		k, err := j.str()
		if err != nil {
			return err
		}
		key := append([]byte(nil), k...)
		if err := j.expect(':'); err != nil {
			return err
		}
		if err := f(key); err != nil {
			return err
		}
		if j.peek() == ',' {
			j.pos++
			continue
		}
		return j.expect('}')
	}
}

// array calls f for each element of an array; f must consume the element.
func (j *jscan) array(f func() error) error {
	if err := j.expect('['); err != nil {
		return err
	}
	if j.peek() == ']' {
		j.pos++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		if j.peek() == ',' {
			j.pos++
			continue
		}
		return j.expect(']')
	}
}

// end checks that nothing but whitespace follows.
func (j *jscan) end() error {
	if j.peek() != 0 {
		return j.errorf("trailing data")
	}
	return nil
}
