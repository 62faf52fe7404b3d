package api

import (
	"encoding/json"
	"strings"
)

// chatOutput reads a chat completion's text as it streams in and splits it into reasoning,
// content and tool calls. The same reader serves streamed and non-streamed responses (the latter
// feed the whole text at once), so streamed fragments concatenate to the non-streamed fields.
// Text that might still turn into a marker (a partial "<tool_call>" or "</think>") is held back
// until the next text decides it, or the finish.
type chatOutput struct {
	reasoning string     // reasoning parser: "" (none), ReasoningQwen3 or ReasoningDeepSeekR1
	tools     bool       // read tool calls
	syn       toolSyntax // their syntax, when tools is set

	st       parseState
	buf      string // text received and not yet consumed
	calls    []toolCall
	anyText  bool // some content was emitted (llama3_json calls only open the output)
	argDepth int  // nesting depth inside the arguments value (0: not started)
	inStr    bool // inside a JSON string in the arguments
	esc      bool // after a backslash in such a string

	// what the last feed/finish produced, taken by take
	ev outputEvents
	// totals over the whole output, for the non-streamed message
	all outputEvents
	// last is what the latest streamed delta produced (readChunk), for its chunk
	last outputEvents
}

// maxSyntaxRun bounds the text held while looking for a call's name or end: the grammar makes
// both short, and an unconstrained output that never completes them is content, not a call
// (and is not rescanned forever).
const maxSyntaxRun = 4096

type parseState uint8

const (
	stStart      parseState = iota // nothing decided yet (reasoning block or not)
	stReasoning                    // inside the reasoning block
	stAfterThink                   // after </think>: skipping newlines
	stContent                      // content, watching for a call opener
	stCallHead                     // inside a call, before its arguments
	stArgs                         // streaming the arguments value
	stCallTail                     // after the arguments, up to the call's end
	stBetween                      // after a call: another call or the end
	stText                         // content only, nothing more to watch for
)

// toolCall is one call as parsed so far.
type toolCall struct {
	id, name string
	args     []byte
}

// outputEvents is what a piece of text turned into.
type outputEvents struct {
	reasoning []byte
	content   []byte
	calls     []callDelta
	// after is how many bytes at the end of content came after calls (text after the last call,
	// or a call's head cut short: /v1/responses places it after the function_call items)
	after int
}

// callDelta is new for one call: its header (the first time) and arguments text.
type callDelta struct {
	index    int
	id, name string // set on the call's first delta
	args     string
}

func newChatOutput(reasoning string, tr *toolRequest) *chatOutput {
	o := &chatOutput{reasoning: reasoning, tools: tr.active()}
	if o.tools {
		o.syn = syntaxOf(tr.syntax)
	}
	if reasoning == "" {
		o.st = stContent
	}
	return o
}

// fresh is a new parser of the same kind, for another choice of the same request.
func (o *chatOutput) fresh() *chatOutput {
	n := &chatOutput{reasoning: o.reasoning, tools: o.tools, syn: o.syn}
	if n.reasoning == "" {
		n.st = stContent
	}
	return n
}

func (ev *outputEvents) addArgs(i int, s string) {
	if s == "" {
		return
	}
	if n := len(ev.calls); n > 0 && ev.calls[n-1].index == i {
		ev.calls[n-1].args += s
		return
	}
	ev.calls = append(ev.calls, callDelta{index: i, args: s})
}

func (o *chatOutput) emitContent(s string) {
	if s != "" {
		for _, ev := range []*outputEvents{&o.ev, &o.all} {
			ev.content = append(ev.content, s...)
			if len(ev.calls) > 0 {
				ev.after += len(s)
			}
		}
		o.anyText = true
	}
}

func (o *chatOutput) emitReasoning(s string) {
	o.ev.reasoning = append(o.ev.reasoning, s...)
	o.all.reasoning = append(o.all.reasoning, s...)
}

// holdBack splits s into what can go out now and the longest suffix that is a proper prefix of
// marker (it might complete into the marker).
func holdBack(s, marker string) (string, string) {
	for k := min(len(s), len(marker)-1); k > 0; k-- {
		if strings.HasSuffix(s, marker[:k]) {
			return s[:len(s)-k], s[len(s)-k:]
		}
	}
	return s, ""
}

// feed reads more text.
func (o *chatOutput) feed(text string) {
	o.buf += text
	for o.step(false) {
	}
}

// finish reads the end of the output: held-back text goes out as what it was.
func (o *chatOutput) finish() {
	for o.step(true) {
	}
	if n := len(o.calls); n > 0 && o.calls[n-1].name == "" {
		// the output ended inside a call's head: no call was made, its text is content
		o.calls = o.calls[:n-1]
		o.buf = o.syn.open + o.buf
		o.st = stText
	}
	switch o.st {
	case stReasoning, stStart:
		if o.st == stStart && o.reasoning == ReasoningQwen3 {
			o.emitContent(o.buf)
		} else {
			o.emitReasoning(o.buf)
		}
	case stAfterThink, stContent, stText, stCallHead, stBetween:
		if strings.TrimSpace(o.buf) != "" || o.st == stContent || o.st == stText {
			o.emitContent(o.buf)
		}
	}
	o.buf = ""
}

// step consumes what it can of buf; it reports whether to go on.
func (o *chatOutput) step(final bool) bool {
	const think, endThink = "<think>", "</think>"
	switch o.st {
	case stStart:
		switch {
		case strings.HasPrefix(o.buf, think):
			o.buf = o.buf[len(think):]
			o.st = stReasoning
		case strings.HasPrefix(think, o.buf) && !final:
			return false // too little text to tell
		case o.reasoning == ReasoningDeepSeekR1:
			o.st = stReasoning // its template opened the block in the prompt
		default:
			o.st = stContent
		}
		return true
	case stReasoning:
		if i := strings.Index(o.buf, endThink); i >= 0 {
			o.emitReasoning(o.buf[:i])
			o.buf = o.buf[i+len(endThink):]
			o.st = stAfterThink
			return true
		}
		out, keep := holdBack(o.buf, endThink)
		o.emitReasoning(out)
		o.buf = keep
		return false
	case stAfterThink:
		o.buf = strings.TrimLeft(o.buf, "\n")
		if o.buf == "" {
			return false
		}
		o.st = stContent
		return true
	case stContent:
		if !o.tools {
			o.st = stText
			return true
		}
		if o.syn.open == "" { // llama3_json: a call is the whole output
			if o.anyText {
				o.st = stText
				return true
			}
			t := strings.TrimLeft(o.buf, " \n")
			if t == "" {
				return false
			}
			if t[0] == '{' {
				o.buf = t
				o.st = stCallHead
				o.startCall()
			} else {
				o.st = stText
			}
			return true
		}
		if i := strings.Index(o.buf, o.syn.open); i >= 0 {
			o.emitContent(o.buf[:i])
			o.buf = o.buf[i+len(o.syn.open):]
			o.st = stCallHead
			o.startCall()
			return true
		}
		out, keep := holdBack(o.buf, o.syn.open)
		o.emitContent(out)
		o.buf = keep
		return false
	case stText:
		o.emitContent(o.buf)
		o.buf = ""
		return false
	case stCallHead:
		if len(o.buf) > maxSyntaxRun && o.calls[len(o.calls)-1].name == "" {
			// not a call after all (an unconstrained output): its text is content
			o.calls = o.calls[:len(o.calls)-1]
			o.buf = o.syn.open + o.buf
			o.st = stText
			return true
		}
		return o.readHead()
	case stArgs:
		return o.readArgs()
	case stCallTail:
		i := strings.Index(o.buf, o.syn.end)
		if i < 0 {
			if len(o.buf) > maxSyntaxRun {
				o.st = stText
				return true
			}
			return false
		}
		o.buf = o.buf[i+len(o.syn.end):]
		o.st = stBetween
		return true
	case stBetween:
		if o.syn.single {
			o.st = stText
			return true
		}
		t := strings.TrimLeft(o.buf, " \n")
		switch {
		case strings.HasPrefix(t, o.syn.open):
			o.buf = t[len(o.syn.open):]
			o.st = stCallHead
			o.startCall()
			return true
		case strings.HasPrefix(o.syn.open, t) && !final:
			return false
		case t == "":
			return false
		}
		o.st = stText
		return true
	}
	return false
}

// startCall opens the next call (its header goes out once its name is read).
func (o *chatOutput) startCall() {
	o.calls = append(o.calls, toolCall{})
	o.argDepth, o.inStr, o.esc = 0, false, false
}

// readHead reads `{"name": "NAME", "<argsKey>": ` and emits the call's id and name.
func (o *chatOutput) readHead() bool {
	c := &o.calls[len(o.calls)-1]
	if c.name == "" {
		i := strings.Index(o.buf, `"name"`)
		if i < 0 {
			return false
		}
		rest := strings.TrimLeft(o.buf[i+len(`"name"`):], " \n\t")
		if rest == "" {
			return false
		}
		rest = strings.TrimLeft(strings.TrimPrefix(rest, ":"), " \n\t")
		if rest == "" || rest[0] != '"' {
			return false
		}
		end := jsonStringEnd(rest)
		if end < 0 {
			return false
		}
		var name string
		if json.Unmarshal([]byte(rest[:end]), &name) != nil || name == "" {
			return false
		}
		c.name, c.id = name, newCallID()
		idx := len(o.calls) - 1
		for _, ev := range []*outputEvents{&o.ev, &o.all} {
			ev.calls = append(ev.calls, callDelta{index: idx, id: c.id, name: name})
		}
		o.buf = rest[end:]
	}
	key := `"` + o.syn.argsKey + `"`
	i := strings.Index(o.buf, key)
	if i < 0 {
		return false
	}
	rest := strings.TrimLeft(o.buf[i+len(key):], " \n\t")
	if rest == "" {
		return false
	}
	rest = strings.TrimLeft(strings.TrimPrefix(rest, ":"), " \n\t")
	if rest == "" {
		return false
	}
	o.buf = rest
	o.st = stArgs
	return true
}

// jsonStringEnd returns the index just past the JSON string s starts with, or -1 if it is
// not complete yet.
func jsonStringEnd(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// readArgs passes the arguments value through as it arrives, until it closes.
func (o *chatOutput) readArgs() bool {
	idx := len(o.calls) - 1
	i := 0
	done := false
scan:
	for ; i < len(o.buf); i++ {
		ch := o.buf[i]
		switch {
		case o.inStr:
			switch {
			case o.esc:
				o.esc = false
			case ch == '\\':
				o.esc = true
			case ch == '"':
				o.inStr = false
			}
		case ch == '"':
			o.inStr = true
		case ch == '{' || ch == '[':
			o.argDepth++
		case ch == '}' || ch == ']':
			o.argDepth--
			if o.argDepth == 0 {
				i++
				done = true
				break scan
			}
		}
	}
	out := o.buf[:i]
	o.buf = o.buf[i:]
	o.calls[idx].args = append(o.calls[idx].args, out...)
	o.ev.addArgs(idx, out)
	o.all.addArgs(idx, out)
	if done {
		o.st = stCallTail
	}
	return done
}

// take returns what the text fed since the last take produced, and clears it.
func (o *chatOutput) take() outputEvents {
	ev := o.ev
	o.ev = outputEvents{}
	return ev
}

// hasCalls reports whether any call was opened.
func (o *chatOutput) hasCalls() bool { return len(o.calls) > 0 }
