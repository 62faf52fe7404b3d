package toolparse

import "strings"

// Harmony tokens (gpt-oss): a message is <|start|>ROLE HEADER<|message|>BODY END, its header
// names a channel (<|channel|>analysis: reasoning; final or commentary: content) and, for a
// tool call, a recipient (to=functions.NAME) whose body is the call's JSON arguments.
const (
	hStart   = "<|start|>"
	hChannel = "<|channel|>"
	hMessage = "<|message|>"
	hEnd     = "<|end|>"
	hCall    = "<|call|>"
	hReturn  = "<|return|>"
)

// harmony reads gpt-oss's harmony messages. Output with no harmony header (its special tokens
// stripped) is content.
type harmony struct {
	sink
	opts Options
	buf  string
	// st: 0 reading a header, 1 in a body, 2 plain content
	st   uint8
	body uint8 // the open body's kind: bodyReasoning, bodyContent, bodyCall
}

const (
	bodyReasoning uint8 = iota
	bodyContent
	bodyCall
)

func init() {
	Register("harmony", func(o Options) Parser { return &harmony{opts: o} })
}

// Feed implements Parser.
func (h *harmony) Feed(text string) Events {
	h.buf += text
	for h.step(false) {
	}
	return h.take()
}

// Finish implements Parser.
func (h *harmony) Finish() Events {
	for h.step(true) {
	}
	switch {
	case h.st == 1:
		h.emit(h.buf)
	case h.st == 2 || strings.TrimSpace(h.buf) != "":
		h.content(h.buf)
	}
	h.buf = ""
	return h.take()
}

func (h *harmony) emit(s string) {
	switch h.body {
	case bodyReasoning:
		h.reasoning(s)
	case bodyCall:
		h.args(s)
	default:
		h.content(s)
	}
}

func (h *harmony) step(final bool) bool {
	switch h.st {
	case 2:
		h.content(h.buf)
		h.buf = ""
		return false
	case 1:
		i, which := indexAny(h.buf, hEnd, hCall, hReturn)
		if i < 0 {
			out, keep := holdBack(h.buf, hEnd, hCall, hReturn)
			h.emit(out)
			h.buf = keep
			return false
		}
		h.emit(h.buf[:i])
		h.buf = h.buf[i+len([]string{hEnd, hCall, hReturn}[which]):]
		h.st = 0
		return true
	}
	// a header: optional <|start|>ROLE, then up to <|message|>
	t := strings.TrimLeft(h.buf, " \r\n\t")
	if t == "" {
		return false
	}
	if t[0] != '<' || (len(t) > 1 && t[1] != '|') {
		h.st = 2 // no harmony header: plain text
		return true
	}
	w := window(t)
	i := strings.Index(w, hMessage)
	if i < 0 {
		if len(t) > maxSyntaxRun {
			h.st = 2
			return true
		}
		return false
	}
	head := w[:i]
	h.buf = t[i+len(hMessage):]
	h.st = 1
	h.body = bodyContent
	if c := strings.Index(head, hChannel); c >= 0 {
		ch := head[c+len(hChannel):]
		if j := strings.IndexAny(ch, " <"); j >= 0 {
			ch = ch[:j]
		}
		if ch == "analysis" {
			h.body = bodyReasoning
		}
	}
	if r := strings.Index(head, "to=functions."); r >= 0 && h.opts.Tools {
		name := head[r+len("to=functions."):]
		if j := strings.IndexAny(name, " <"); j >= 0 {
			name = name[:j]
		}
		if name != "" {
			h.openCall(name)
			h.body = bodyCall
		}
	}
	return true
}
