package toolparse

import (
	"encoding/json"
	"strings"
)

// syntax describes how one family of templates writes calls; machine reads any of them.
type syntax struct {
	open string // opens the calls ("" : the output is a call when it starts with '{', llama3_json)
	// The name: inside the call's JSON object under "name" (nameAfter ""), or bare text after
	// nameAfter up to nameEnd.
	nameAfter, nameEnd string
	argsKey            string // JSON names: the key that holds the arguments value
	argsAfter          string // bare names: the text between the name and the arguments value
	xml                bool   // arguments are <parameter=K>V</parameter> elements (qwen3_coder)
	callEnd            string // ends one call
	next               string // opens another call after one ended
	regionEnd          string // ends the calls ("" : none)
	single             bool   // at most one call per turn
}

type state uint8

const (
	stStart      state = iota // nothing decided yet (reasoning block or not)
	stReasoning               // inside the reasoning block
	stAfterThink              // after </think>: skipping newlines
	stContent                 // content, watching for a call opener
	stCallHead                // inside a call, before its arguments
	stArgs                    // reading the arguments value
	stCallTail                // after the arguments, up to the call's end
	stBetween                 // after a call: another call or the end
	stText                    // content only, nothing more to watch for
)

// machine is the parser of the syntaxes above, after an optional <think> block.
type machine struct {
	sink
	opts   Options
	syn    syntax
	st     state
	buf    string // text received and not yet consumed
	opener string // the marker that opened the current call, given back if it was no call
	// JSON arguments: nesting depth (0: not started), inside a string, after a backslash
	argDepth   int
	inStr, esc bool
	nparams    int // xml arguments: parameters written so far in the current call
}

func newMachine(syn syntax, o Options) *machine {
	m := &machine{opts: o, syn: syn}
	if o.Reasoning == "" {
		m.st = stContent
	}
	return m
}

func init() {
	reg := func(name string, syn syntax) {
		Register(name, func(o Options) Parser { return newMachine(syn, o) })
	}
	// <tool_call>\n{"name": "f", "arguments": {..}}\n</tool_call>, calls separated by "\n"
	// (Qwen2.5, Qwen3, Hermes)
	reg("hermes", syntax{open: "<tool_call>", argsKey: "arguments", callEnd: "</tool_call>", next: "<tool_call>"})
	// {"name": "f", "parameters": {..}}, the whole output, one call (Llama 3.1 to 3.3)
	reg("llama3_json", syntax{argsKey: "parameters", callEnd: "}", single: true})
	// [TOOL_CALLS][{"name": "f", "arguments": {..}}, ...] (Mistral v3 tokenizer templates)
	reg("mistral", syntax{open: "[TOOL_CALLS]", argsKey: "arguments", callEnd: "}", next: ",", regionEnd: "]"})
	// <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{..}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
	// (DeepSeek-V3, DeepSeek-R1)
	reg("deepseek_v3", syntax{open: "<｜tool▁calls▁begin｜>", nameAfter: "<｜tool▁sep｜>", nameEnd: "\n",
		argsAfter: "```json\n", callEnd: "<｜tool▁call▁end｜>", next: "<｜tool▁call▁begin｜>", regionEnd: "<｜tool▁calls▁end｜>"})
	// <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call> (Qwen3-Coder)
	reg("qwen3_coder", syntax{open: "<tool_call>", nameAfter: "<function=", nameEnd: ">", xml: true,
		callEnd: "</tool_call>", next: "<tool_call>"})
}

// Feed implements Parser.
func (m *machine) Feed(text string) Events {
	m.buf += text
	for m.step(false) {
	}
	return m.take()
}

// Finish implements Parser.
func (m *machine) Finish() Events {
	for m.step(true) {
	}
	if n := len(m.calls); n > 0 && m.calls[n-1].Name == "" {
		m.noCall()
	}
	switch m.st {
	case stReasoning, stStart:
		if m.st == stStart && m.opts.Reasoning == ReasoningQwen3 {
			m.content(m.buf)
		} else {
			m.reasoning(m.buf)
		}
	case stArgs:
		if m.syn.xml { // cut inside the parameters: close what was written
			m.closeXML()
		}
	case stAfterThink, stContent, stText, stCallHead, stBetween:
		if strings.TrimSpace(m.buf) != "" || m.st == stContent || m.st == stText {
			m.content(m.buf)
		}
	}
	m.buf = ""
	return m.take()
}

// noCall drops the call being opened: its text (opener included) is content.
func (m *machine) noCall() {
	m.calls = m.calls[:len(m.calls)-1]
	m.buf = m.opener + m.buf
	m.st = stText
}

// step consumes what it can of buf; it reports whether to go on.
func (m *machine) step(final bool) bool {
	const think, endThink = "<think>", "</think>"
	switch m.st {
	case stStart:
		switch {
		case strings.HasPrefix(m.buf, think):
			m.buf = m.buf[len(think):]
			m.st = stReasoning
		case strings.HasPrefix(think, m.buf) && !final:
			return false // too little text to tell
		case m.opts.Reasoning == ReasoningDeepSeekR1:
			m.st = stReasoning // its template opened the block in the prompt
		default:
			m.st = stContent
		}
		return true
	case stReasoning:
		if i := strings.Index(m.buf, endThink); i >= 0 {
			m.reasoning(m.buf[:i])
			m.buf = m.buf[i+len(endThink):]
			m.st = stAfterThink
			return true
		}
		out, keep := holdBack(m.buf, endThink)
		m.reasoning(out)
		m.buf = keep
		return false
	case stAfterThink:
		m.buf = strings.TrimLeft(m.buf, "\n")
		if m.buf == "" {
			return false
		}
		m.st = stContent
		return true
	case stContent:
		return m.stepContent()
	case stText:
		m.content(m.buf)
		m.buf = ""
		return false
	case stCallHead:
		return m.readHead()
	case stArgs:
		if m.syn.xml {
			return m.readXMLArgs(final)
		}
		return m.readArgs()
	case stCallTail:
		i := strings.Index(window(m.buf), m.syn.callEnd)
		if i < 0 {
			if len(m.buf) > maxSyntaxRun {
				m.st = stText
				return true
			}
			return false
		}
		m.buf = m.buf[i+len(m.syn.callEnd):]
		m.st = stBetween
		return true
	case stBetween:
		return m.stepBetween(final)
	}
	return false
}

func (m *machine) stepContent() bool {
	if !m.opts.Tools {
		m.st = stText
		return true
	}
	if m.syn.open == "" { // llama3_json: a call is the whole output
		if m.anyText {
			m.st = stText
			return true
		}
		t := strings.TrimLeft(m.buf, " \n")
		if t == "" {
			return false
		}
		if t[0] == '{' {
			m.buf = t
			m.startCall("")
		} else {
			m.st = stText
		}
		return true
	}
	if i := strings.Index(m.buf, m.syn.open); i >= 0 {
		m.content(m.buf[:i])
		m.buf = m.buf[i+len(m.syn.open):]
		m.startCall(m.syn.open)
		return true
	}
	out, keep := holdBack(m.buf, m.syn.open)
	m.content(out)
	m.buf = keep
	return false
}

func (m *machine) stepBetween(final bool) bool {
	if m.syn.single {
		m.st = stText
		return true
	}
	t := strings.TrimLeft(m.buf, " \r\n\t")
	switch {
	case m.syn.next != "" && strings.HasPrefix(t, m.syn.next):
		m.buf = t[len(m.syn.next):]
		m.startCall(m.syn.next)
		return true
	case m.syn.regionEnd != "" && strings.HasPrefix(t, m.syn.regionEnd):
		m.buf = t[len(m.syn.regionEnd):]
		m.st = stText
		return true
	case t == "":
		return false
	case !final && (strings.HasPrefix(m.syn.next, t) || strings.HasPrefix(m.syn.regionEnd, t)):
		return false
	}
	m.st = stText
	return true
}

// startCall opens the next call (its header goes out once its name is read).
func (m *machine) startCall(opener string) {
	m.calls = append(m.calls, Call{})
	m.opener = opener
	m.argDepth, m.inStr, m.esc, m.nparams = 0, false, false, 0
	m.st = stCallHead
}

// readHead reads the call's name and what precedes its arguments, and sends the header.
func (m *machine) readHead() bool {
	c := &m.calls[len(m.calls)-1]
	if c.Name == "" {
		name, rest, ok := m.readName(window(m.buf))
		if !ok {
			if len(m.buf) > maxSyntaxRun {
				m.noCall() // not a call after all (an unconstrained output): its text is content
				return true
			}
			return false
		}
		m.calls = m.calls[:len(m.calls)-1]
		m.openCall(name)
		m.buf = m.buf[len(window(m.buf))-len(rest):]
	}
	if m.syn.xml {
		m.st = stArgs
		return true
	}
	w := window(m.buf)
	var rest string
	if m.syn.nameAfter != "" {
		i := strings.Index(w, m.syn.argsAfter)
		if i < 0 {
			return false
		}
		rest = w[i+len(m.syn.argsAfter):]
	} else {
		key := `"` + m.syn.argsKey + `"`
		i := strings.Index(w, key)
		if i < 0 {
			return false
		}
		rest = strings.TrimLeft(w[i+len(key):], " \n\t")
		if rest == "" {
			return false
		}
		rest = strings.TrimLeft(strings.TrimPrefix(rest, ":"), " \n\t")
		if rest == "" {
			return false
		}
	}
	m.buf = m.buf[len(w)-len(rest):]
	m.st = stArgs
	return true
}

// readName finds the call's name in w; rest is what follows it.
func (m *machine) readName(w string) (name, rest string, ok bool) {
	if m.syn.nameAfter != "" {
		i := strings.Index(w, m.syn.nameAfter)
		if i < 0 {
			return "", "", false
		}
		r := w[i+len(m.syn.nameAfter):]
		j := strings.Index(r, m.syn.nameEnd)
		if j <= 0 {
			return "", "", false
		}
		return strings.TrimSpace(r[:j]), r[j+len(m.syn.nameEnd):], strings.TrimSpace(r[:j]) != ""
	}
	i := strings.Index(w, `"name"`)
	if i < 0 {
		return "", "", false
	}
	r := strings.TrimLeft(w[i+len(`"name"`):], " \n\t")
	if r == "" {
		return "", "", false
	}
	r = strings.TrimLeft(strings.TrimPrefix(r, ":"), " \n\t")
	if r == "" || r[0] != '"' {
		return "", "", false
	}
	end := jsonStringEnd(r)
	if end < 0 {
		return "", "", false
	}
	if json.Unmarshal([]byte(r[:end]), &name) != nil || name == "" {
		return "", "", false
	}
	return name, r[end:], true
}

// readArgs passes a JSON arguments value through as it arrives, until it closes.
func (m *machine) readArgs() bool {
	i := 0
	done := false
scan:
	for ; i < len(m.buf); i++ {
		ch := m.buf[i]
		switch {
		case m.inStr:
			switch {
			case m.esc:
				m.esc = false
			case ch == '\\':
				m.esc = true
			case ch == '"':
				m.inStr = false
			}
		case ch == '"':
			m.inStr = true
		case ch == '{' || ch == '[':
			m.argDepth++
		case ch == '}' || ch == ']':
			m.argDepth--
			if m.argDepth == 0 {
				i++
				done = true
				break scan
			}
		}
	}
	m.args(m.buf[:i])
	m.buf = m.buf[i:]
	if done {
		m.st = stCallTail
	}
	return done
}

// readXMLArgs reads <parameter=K>\nV\n</parameter> elements up to </function>, writing each as
// a member of the arguments object once it is complete (a value's type is only known then).
func (m *machine) readXMLArgs(final bool) bool {
	const param, paramEnd, fnEnd = "<parameter=", "</parameter>", "</function>"
	t := strings.TrimLeft(m.buf, " \r\n\t")
	switch {
	case strings.HasPrefix(t, param):
		r := t[len(param):]
		gt := strings.Index(window(r), ">")
		if gt < 0 {
			if len(r) > maxSyntaxRun {
				break
			}
			return false
		}
		end := strings.Index(r[gt+1:], paramEnd)
		if end < 0 {
			return false
		}
		key, val := r[:gt], r[gt+1:gt+1+end]
		val = strings.TrimPrefix(val, "\n")
		val = strings.TrimSuffix(val, "\n")
		sep := ","
		if m.nparams == 0 {
			sep = "{"
		}
		m.nparams++
		m.args(sep + jsonString(key) + ":" + m.paramValue(key, val))
		m.buf = r[gt+1+end+len(paramEnd):]
		return true
	case strings.HasPrefix(t, fnEnd):
		m.closeXML()
		m.buf = t[len(fnEnd):]
		m.st = stCallTail
		return true
	case t == "" || (!final && (strings.HasPrefix(param, t) || strings.HasPrefix(fnEnd, t))):
		return false
	}
	// not the syntax: close the call and read the rest as content
	m.closeXML()
	m.st = stText
	return true
}

func (m *machine) closeXML() {
	if m.nparams == 0 {
		m.args("{")
	}
	m.args("}")
	m.nparams = -1 // closed
}

// paramValue is a bare parameter value as JSON: a string unless its schema type is another one
// and the text is JSON of that kind.
func (m *machine) paramValue(key, val string) string {
	name := m.calls[len(m.calls)-1].Name
	typ := m.opts.ParamTypes[name][key]
	if typ != "" && typ != "string" {
		v := strings.TrimSpace(val)
		if json.Valid([]byte(v)) {
			return v
		}
	}
	return jsonString(val)
}

// jsonString is s as a JSON string, without the HTML escapes json.Marshal adds (the model's
// "<" stays "<").
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
