package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxEventBytes bounds one SSE line, so a server that never sends a newline cannot exhaust memory.
const maxEventBytes = 64 << 20

// sseReader yields the payloads of the data lines of a server-sent-event stream. Each data line
// is taken as one whole event, which is how OpenAI-compatible servers send them.
type sseReader struct {
	br  *bufio.Reader
	acc []byte // a line longer than br's buffer, pieced together
}

func newSSEReader(r io.Reader, size int) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, size)}
}

// next returns the next data payload (valid until the following call) or an error; io.EOF at
// a clean end of stream.
func (r *sseReader) next() ([]byte, error) {
	for {
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			r.acc = append(r.acc[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.br.ReadSlice('\n')
				r.acc = append(r.acc, line...)
				if len(r.acc) > maxEventBytes {
					return nil, fmt.Errorf("sse line longer than %d bytes", maxEventBytes)
				}
			}
			line = r.acc
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0 {
				return nil, fmt.Errorf("stream ended inside a line: %w", io.ErrUnexpectedEOF)
			}
			return nil, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		payload, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separator, comment (":...") or a field we do not use
		}
		if len(payload) > 0 && payload[0] == ' ' {
			payload = payload[1:]
		}
		return payload, nil
	}
}

// usage is the usage object of a chunk.
type usage struct {
	PromptTokens     int64
	CompletionTokens int64
}

// chunk is what the load generator needs from one data payload. parseChunk fills it by
// scanning for a few keys instead of decoding the JSON, because it runs once per chunk on a
// machine that also runs the server.
type chunk struct {
	done       bool    // the payload was [DONE]
	errMsg     string  // set for an error event
	hasChoices bool    // choices is a non-empty array
	ids        []int32 // token_ids of the chunk, appended to the caller's slice
	finish     []byte  // finish_reason when not null
	textBytes  int     // raw (escaped) length of text or delta.content
	usage      usage
	hasUsage   bool
}

var payloadDone = []byte("[DONE]")

// parseChunk reads payload into c, reusing c.ids' storage. It walks the payload's strings once:
// a string followed by a colon is a key, and only the few keys the verifier needs are looked at;
// every other value is skipped without being decoded.
func parseChunk(payload []byte, c *chunk) error {
	*c = chunk{ids: c.ids[:0]}
	p := bytes.TrimSpace(payload)
	if bytes.Equal(p, payloadDone) {
		c.done = true
		return nil
	}
	if len(p) == 0 || p[0] != '{' {
		return fmt.Errorf("payload is not a JSON object: %.80q", p)
	}
	var sawText, inUsage, sawPrompt, sawCompletion bool
	for i := 0; ; {
		q := bytes.IndexByte(p[i:], '"')
		if q < 0 {
			break
		}
		start := i + q
		n := stringEnd(p[start:])
		if n < 0 {
			return fmt.Errorf("unterminated string at byte %d: %.80q", start, p)
		}
		end := start + n
		i = end + 1
		j := i
		for j < len(p) && (p[j] == ' ' || p[j] == '\t' || p[j] == '\n' || p[j] == '\r') {
			j++
		}
		if j == len(p) || p[j] != ':' {
			continue // a string value, skipped whole
		}
		key := p[start+1 : end]
		v := skipSpace(p[j+1:])
		i = len(p) - len(v)
		switch string(key) { // no allocation: the compiler compares in place
		case "choices":
			if len(v) == 0 || v[0] != '[' {
				return fmt.Errorf("choices is not an array: %.80q", p)
			}
			rest := skipSpace(v[1:])
			c.hasChoices = len(rest) > 0 && rest[0] != ']'
		case "token_ids":
			ids, rest, err := appendIDs(c.ids, v)
			if err != nil {
				return err
			}
			c.ids = ids
			i = len(p) - len(rest)
		case "finish_reason":
			switch {
			case bytes.HasPrefix(v, []byte("null")):
			case len(v) > 0 && v[0] == '"':
				e := stringEnd(v)
				if e < 0 {
					return fmt.Errorf("unterminated finish_reason: %.80q", p)
				}
				c.finish = v[1:e]
			default:
				return fmt.Errorf("finish_reason is neither null nor a string: %.80q", p)
			}
		case "text", "content":
			if !sawText && len(v) > 0 && v[0] == '"' {
				sawText = true
				if e := stringEnd(v); e > 0 {
					c.textBytes = e - 1
				}
			}
		case "usage":
			inUsage = len(v) > 0 && v[0] == '{'
		case "prompt_tokens", "completion_tokens":
			if !inUsage {
				continue
			}
			n, _, err := leadingInt(v)
			if err != nil {
				return fmt.Errorf("usage %s: %w", key, err)
			}
			if key[0] == 'p' {
				c.usage.PromptTokens, sawPrompt = n, true
			} else {
				c.usage.CompletionTokens, sawCompletion = n, true
			}
		case "error":
			if len(v) > 0 && v[0] == '{' {
				c.errMsg = errorMessage(p)
				return nil
			}
		case "object":
			if bytes.HasPrefix(v, []byte(`"error"`)) {
				c.errMsg = errorMessage(p)
				return nil
			}
		}
	}
	if inUsage {
		if !sawPrompt || !sawCompletion {
			return fmt.Errorf("usage lacks prompt_tokens or completion_tokens: %.120q", p)
		}
		c.hasUsage = true
	}
	return nil
}

func skipSpace(p []byte) []byte {
	for len(p) > 0 && (p[0] == ' ' || p[0] == '\t' || p[0] == '\n' || p[0] == '\r') {
		p = p[1:]
	}
	return p
}

// appendIDs parses the JSON array of integers at the start of v and returns what follows it.
func appendIDs(dst []int32, v []byte) ([]int32, []byte, error) {
	if len(v) == 0 || v[0] != '[' {
		return dst, v, fmt.Errorf("token_ids is not an array: %.40q", v)
	}
	v = skipSpace(v[1:])
	if len(v) > 0 && v[0] == ']' {
		return dst, v[1:], nil
	}
	for {
		n, rest, err := leadingInt(v)
		if err != nil {
			return dst, v, fmt.Errorf("token_ids: %w", err)
		}
		if n < 0 || n > 1<<31-1 {
			return dst, v, fmt.Errorf("token_ids: id %d out of range", n)
		}
		dst = append(dst, int32(n))
		rest = skipSpace(rest)
		if len(rest) == 0 {
			return dst, rest, errors.New("token_ids: unterminated array")
		}
		switch rest[0] {
		case ',':
			v = skipSpace(rest[1:])
		case ']':
			return dst, rest[1:], nil
		default:
			return dst, rest, fmt.Errorf("token_ids: unexpected %q", rest[0])
		}
	}
}

// leadingInt parses the decimal integer at the start of v.
func leadingInt(v []byte) (int64, []byte, error) {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	start := i
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == start || i-start > 18 {
		return 0, v, fmt.Errorf("bad integer at %.20q", v)
	}
	n, err := strconv.ParseInt(string(v[:i]), 10, 64)
	if err != nil {
		return 0, v, fmt.Errorf("bad integer at %.20q: %w", v, err)
	}
	return n, v[i:], nil
}

// stringEnd returns the index of the quote closing the JSON string that starts at v[0], or -1.
// It jumps from quote to quote; a quote preceded by an odd run of backslashes is escaped.
func stringEnd(v []byte) int {
	for i := 1; i < len(v); {
		q := bytes.IndexByte(v[i:], '"')
		if q < 0 {
			return -1
		}
		e := i + q
		bs := 0
		for k := e - 1; k >= 1 && v[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return e
		}
		i = e + 1
	}
	return -1
}

// errorMessage decodes an error event fully; errors are rare, so encoding/json is fine here.
func errorMessage(p []byte) string {
	var ev struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(p, &ev); err != nil {
		return fmt.Sprintf("undecodable error event (%v): %.200s", err, p)
	}
	switch {
	case ev.Error != nil && ev.Error.Message != "":
		return fmt.Sprintf("%s (type %s, code %v)", ev.Error.Message, ev.Error.Type, ev.Error.Code)
	case ev.Message != "":
		return ev.Message
	}
	return fmt.Sprintf("error event without a message: %.200s", p)
}
