package chat

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenKind classifies lexer output.
type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokText
	tokVarBegin   // {{
	tokVarEnd     // }}
	tokBlockBegin // {%
	tokBlockEnd   // %}
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

var tokenKindNames = [...]string{"end of template", "text", "'{{'", "'}}'", "'{%'", "'%}'", "name", "string", "integer", "float", "operator"}

func (k tokenKind) String() string { return tokenKindNames[k] }

type token struct {
	kind tokenKind
	val  string // text, name, operator, or the decoded string literal
	line int
}

func (t token) describe() string {
	switch t.kind {
	case tokName, tokOp, tokInt, tokFloat:
		return fmt.Sprintf("%q", t.val)
	case tokString:
		return "string literal"
	}
	return t.kind.String()
}

// lexer splits a template into tokens with the whitespace rules that
// transformers configures: trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False, plus explicit "-" / "+" markers.
type lexer struct {
	src    string
	pos    int
	line   int
	toks   []token
	parens []byte // open brackets inside a tag; a closing delimiter only counts when empty
}

// normalizeNewlines does what Jinja does to source text before lexing:
// \r\n and \r become \n and one trailing newline is dropped.
func normalizeNewlines(s string) string {
	if strings.IndexByte(s, '\r') >= 0 {
		s = strings.ReplaceAll(s, "\r\n", "\n")
		s = strings.ReplaceAll(s, "\r", "\n")
	}
	return strings.TrimSuffix(s, "\n")
}

func lex(src string) ([]token, error) {
	lx := &lexer{src: normalizeNewlines(src), line: 1}
	if err := lx.run(); err != nil {
		return nil, err
	}
	return lx.toks, nil
}

func (lx *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", lx.line, fmt.Sprintf(format, args...))
}

func (lx *lexer) emit(kind tokenKind, val string) {
	lx.toks = append(lx.toks, token{kind: kind, val: val, line: lx.line})
}

// advance moves pos to p, counting newlines.
func (lx *lexer) advance(p int) {
	lx.line += strings.Count(lx.src[lx.pos:p], "\n")
	lx.pos = p
}

// isPySpace reports whether r is whitespace by Python's str.isspace / \s.
func isPySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}

func pyRStrip(s string) string { return strings.TrimRightFunc(s, isPySpace) }

func allPySpace(s string) bool {
	for _, r := range s {
		if !isPySpace(r) {
			return false
		}
	}
	return true
}

// skipSpaceAt returns the index after any whitespace starting at i.
func skipSpaceAt(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isPySpace(r) {
			break
		}
		i += n
	}
	return i
}

func (lx *lexer) run() error {
	lineStarting := true
	for lx.pos < len(lx.src) {
		rest := lx.src[lx.pos:]
		i := findTagStart(rest)
		if i < 0 {
			lx.emit(tokText, rest)
			lx.advance(len(lx.src))
			break
		}
		kind := rest[i+1]
		sign := byte(0)
		if i+2 < len(rest) && (rest[i+2] == '-' || rest[i+2] == '+') {
			sign = rest[i+2]
		}
		text := rest[:i]
		isRaw, rawEnd := false, 0
		if kind == '%' {
			isRaw, rawEnd = matchRawBegin(rest[i:])
		}
		text = stripBeforeTag(text, sign, kind != '{', lineStarting)
		if text != "" {
			lx.emit(tokText, text)
		}
		tagStart := lx.pos + i
		lx.advance(tagStart)
		var err error
		switch {
		case isRaw:
			lineStarting, err = lx.lexRaw(tagStart + rawEnd)
		case kind == '#':
			lineStarting, err = lx.lexComment(tagStart + 2)
		default:
			lineStarting, err = lx.lexTag(kind, tagStart+2)
		}
		if err != nil {
			return err
		}
	}
	lx.emit(tokEOF, "")
	return nil
}

// findTagStart finds the next "{{", "{%" or "{#".
func findTagStart(s string) int {
	off := 0
	for {
		j := strings.IndexByte(s[off:], '{')
		if j < 0 || off+j+1 >= len(s) {
			return -1
		}
		j += off
		if c := s[j+1]; c == '{' || c == '%' || c == '#' {
			return j
		}
		off = j + 1
	}
}

// stripBeforeTag applies "-" (strip all trailing whitespace) or, for block
// and comment tags, lstrip_blocks (strip spaces between line start and tag).
func stripBeforeTag(text string, sign byte, lstripKind, lineStarting bool) string {
	if sign == '-' {
		return pyRStrip(text)
	}
	if sign == '+' || !lstripKind {
		return text
	}
	lpos := strings.LastIndexByte(text, '\n') + 1
	if lpos > 0 || lineStarting {
		if tail := text[lpos:]; tail != "" && allPySpace(tail) {
			return text[:lpos]
		}
	}
	return text
}

// matchRawBegin matches `{%[-+]? raw (-%}\s*|%})` at the start of s.
func matchRawBegin(s string) (bool, int) {
	i := 2
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	i = skipSpaceAt(s, i)
	if !strings.HasPrefix(s[i:], "raw") {
		return false, 0
	}
	i = skipSpaceAt(s, i+3)
	if strings.HasPrefix(s[i:], "-%}") {
		return true, skipSpaceAt(s, i+3)
	}
	if strings.HasPrefix(s[i:], "%}") {
		return true, i + 2
	}
	return false, 0
}

// lexRaw emits the verbatim text up to {% endraw %}.
func (lx *lexer) lexRaw(bodyStart int) (bool, error) {
	lx.advance(bodyStart)
	s := lx.src
	for off := bodyStart; ; {
		j := strings.Index(s[off:], "{%")
		if j < 0 {
			return false, lx.errorf("missing end of raw directive")
		}
		j += off
		k := j + 2
		sign := byte(0)
		if k < len(s) && (s[k] == '-' || s[k] == '+') {
			sign = s[k]
			k++
		}
		k = skipSpaceAt(s, k)
		if !strings.HasPrefix(s[k:], "endraw") {
			off = j + 2
			continue
		}
		k = skipSpaceAt(s, k+6)
		end, ok := matchBlockEnd(s, k)
		if !ok {
			off = j + 2
			continue
		}
		// lineStarting is false here: the text follows the raw-begin tag.
		if text := stripBeforeTag(s[bodyStart:j], sign, true, false); text != "" {
			lx.emit(tokText, text)
		}
		lx.advance(end)
		return s[end-1] == '\n', nil
	}
}

// matchBlockEnd matches `+%}`, `-%}\s*` or `%}\n?` at i.
func matchBlockEnd(s string, i int) (int, bool) {
	switch {
	case strings.HasPrefix(s[i:], "+%}"):
		return i + 3, true
	case strings.HasPrefix(s[i:], "-%}"):
		return skipSpaceAt(s, i+3), true
	case strings.HasPrefix(s[i:], "%}"):
		if i+2 < len(s) && s[i+2] == '\n' {
			return i + 3, true
		}
		return i + 2, true
	}
	return 0, false
}

func (lx *lexer) lexComment(bodyStart int) (bool, error) {
	s := lx.src
	if bodyStart < len(s) && (s[bodyStart] == '-' || s[bodyStart] == '+') {
		bodyStart++ // the begin tag's whitespace sign
	}
	j := strings.Index(s[bodyStart:], "#}")
	if j < 0 {
		return false, lx.errorf("missing end of comment tag")
	}
	j += bodyStart
	// The earliest match of the end pattern wins: "-#}" and "+#}" start one
	// byte before "#}".
	var end int
	switch {
	case j > bodyStart && s[j-1] == '-':
		end = skipSpaceAt(s, j+2)
	case j > bodyStart && s[j-1] == '+':
		end = j + 2
	default:
		end = j + 2
		if end < len(s) && s[end] == '\n' {
			end++
		}
	}
	lx.advance(end)
	return s[end-1] == '\n', nil
}

// lexTag tokenizes the inside of a {{ }} or {% %} tag.
func (lx *lexer) lexTag(kind byte, start int) (bool, error) {
	s := lx.src
	if kind == '{' {
		lx.emit(tokVarBegin, "")
	} else {
		lx.emit(tokBlockBegin, "")
	}
	i := start
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	lx.parens = lx.parens[:0]
	for {
		i = skipSpaceAt(s, i)
		lx.advance(i)
		if i >= len(s) {
			return false, lx.errorf("unexpected end of template, expected end of tag")
		}
		if len(lx.parens) == 0 {
			if kind == '{' {
				if strings.HasPrefix(s[i:], "-}}") {
					lx.emit(tokVarEnd, "")
					end := skipSpaceAt(s, i+3)
					lx.advance(end)
					return s[end-1] == '\n', nil
				}
				if strings.HasPrefix(s[i:], "}}") {
					lx.emit(tokVarEnd, "")
					lx.advance(i + 2)
					return false, nil
				}
			} else if end, ok := matchBlockEnd(s, i); ok {
				lx.emit(tokBlockEnd, "")
				lx.advance(end)
				return s[end-1] == '\n', nil
			}
		}
		n, err := lx.lexOne(i)
		if err != nil {
			return false, err
		}
		i = n
	}
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isNameStart(c byte) bool  { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isNameByte(c byte) bool   { return isNameStart(c) || isDigit(c) }
func isOpenParen(c byte) bool  { return c == '(' || c == '[' || c == '{' }
func isCloseParen(c byte) bool { return c == ')' || c == ']' || c == '}' }

// scanDigits matches `(\d+_)*\d+` at i and returns the end, or i if none.
func scanDigits(s string, i int) int {
	j := i
	for {
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k == j {
			return j
		}
		j = k
		if j+1 < len(s) && s[j] == '_' && isDigit(s[j+1]) {
			j++
			continue
		}
		return j
	}
}

// lexOne lexes one token inside a tag starting at i and returns its end.
func (lx *lexer) lexOne(i int) (int, error) {
	s := lx.src
	c := s[i]
	switch {
	case isDigit(c):
		return lx.lexNumber(i), nil
	case isNameStart(c):
		j := i + 1
		for j < len(s) && isNameByte(s[j]) {
			j++
		}
		lx.emit(tokName, s[i:j])
		return j, nil
	case c == '\'' || c == '"':
		return lx.lexString(i)
	}
	for _, op := range [...]string{"//", "**", "==", "!=", ">=", "<="} {
		if strings.HasPrefix(s[i:], op) {
			lx.emit(tokOp, op)
			return i + 2, nil
		}
	}
	if strings.IndexByte("+-/*%~[](){}><=.:|,;", c) < 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return 0, lx.errorf("unexpected character %q", r)
	}
	if isOpenParen(c) {
		lx.parens = append(lx.parens, c)
	} else if isCloseParen(c) {
		if len(lx.parens) == 0 {
			return 0, lx.errorf("unexpected %q", c)
		}
		open := lx.parens[len(lx.parens)-1]
		if want := map[byte]byte{'(': ')', '[': ']', '{': '}'}[open]; want != c {
			return 0, lx.errorf("unexpected %q, expected %q", c, want)
		}
		lx.parens = lx.parens[:len(lx.parens)-1]
	}
	lx.emit(tokOp, string(c))
	return i + 1, nil
}

// lexNumber follows Jinja's float and integer patterns (underscores allowed
// between digit groups).
func (lx *lexer) lexNumber(i int) int {
	s := lx.src
	j := scanDigits(s, i)
	isFloat := false
	if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		j = scanDigits(s, j+1)
		isFloat = true
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if e := scanDigits(s, k); e > k {
			j = e
			isFloat = true
		}
	}
	text := strings.ReplaceAll(s[i:j], "_", "")
	if isFloat {
		lx.emit(tokFloat, text)
	} else {
		lx.emit(tokInt, text)
	}
	return j
}

// lexString scans a quoted literal and decodes it like Python's
// unicode-escape codec (unknown escapes are kept verbatim).
func (lx *lexer) lexString(i int) (int, error) {
	s := lx.src
	q := s[i]
	j := i + 1
	for j < len(s) && s[j] != q {
		if s[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(s) {
		return 0, lx.errorf("unterminated string literal")
	}
	val, err := unescapePy(s[i+1 : j])
	if err != nil {
		return 0, lx.errorf("string literal: %v", err)
	}
	lx.emit(tokString, val)
	return j + 1, nil
}

func unescapePy(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
			// line continuation
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			var r rune
			for k := 1; k <= n; k++ {
				if i+k >= len(s) {
					return "", fmt.Errorf("truncated \\%c escape", e)
				}
				d := hexVal(s[i+k])
				if d < 0 {
					return "", fmt.Errorf("truncated \\%c escape", e)
				}
				r = r<<4 | rune(d)
			}
			if r > unicode.MaxRune || (r >= 0xd800 && r < 0xe000) {
				return "", fmt.Errorf("illegal Unicode character in \\%c escape", e)
			}
			b.WriteRune(r)
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			r := rune(e - '0')
			for k := 1; k < 3 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; k++ {
				i++
				r = r<<3 | rune(s[i]-'0')
			}
			b.WriteRune(r)
		case 'N':
			return "", fmt.Errorf("\\N{...} escapes are not supported")
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
