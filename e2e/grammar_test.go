package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// constrainedSchemas are bounded (strings, arrays and numbers have limits) so that a random walk
// at temperature 1 ends well inside max_tokens; each exercises different keywords.
var constrainedSchemas = map[string]string{
	"person": `{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},
		"required":["name","age"],"additionalProperties":false}`,
	"refs": `{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number","minimum":-10,"maximum":10,"multipleOf":0.01},
		"y":{"type":"integer","minimum":0,"maximum":99}},"required":["x","y"],"additionalProperties":false}},
		"type":"object","properties":{"kind":{"const":"line"},"points":{"type":"array","items":{"$ref":"#/$defs/pt"},"minItems":2,"maxItems":3}},
		"required":["kind","points"],"additionalProperties":false}`,
	"union": `{"type":"object","properties":{"v":{"oneOf":[{"enum":["red","green"]},{"type":"integer","minimum":0,"maximum":9}]},
		"ok":{"type":["boolean","null"]}},"required":["v","ok"],"additionalProperties":false}`,
	"formats": `{"type":"object","properties":{"d":{"type":"string","format":"date"},"id":{"type":"string","format":"uuid"},
		"ip":{"type":"string","format":"ipv4"}},"required":["d","id","ip"],"additionalProperties":false}`,
	// Silent on additionalProperties: the engine's default --grammar-strict allows only the
	// listed keys (checked below), as users of OpenAI's strict mode expect.
	"implicit": `{"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":999},"ok":{"type":"boolean"}},
		"required":["id","ok"]}`,
}

const constrainedRegex = `[0-9]{3}-[a-z]{2,4}`

// constrainedCall is one request of the matrix and what must come back.
type constrainedCall struct {
	schema string // name in constrainedSchemas, or "" for the regex
	chat   bool
	stream bool
	seed   int
}

func (c constrainedCall) String() string {
	return fmt.Sprintf("schema=%q chat=%v stream=%v seed=%d", c.schema, c.chat, c.stream, c.seed)
}

// TestStructuredOutput samples at temperature 1 under JSON-schema and regex constraints through
// /v1/chat/completions and /generate, streamed and not, with detokd and without, with 1 and 3
// workers: every output must parse and validate, and streamed chunks must concatenate to it.
func TestStructuredOutput(t *testing.T) {
	compiled := map[string]*jsonschema.Schema{}
	for name, s := range constrainedSchemas {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if err := c.AddResource(name+".json", doc); err != nil {
			t.Fatal(err)
		}
		if compiled[name], err = c.Compile(name + ".json"); err != nil {
			t.Fatal(err)
		}
	}
	re := regexp.MustCompile(`^(?:` + constrainedRegex + `)$`)
	var calls []constrainedCall
	for _, schema := range []string{"person", "refs", "union", "formats", ""} {
		for _, chat := range []bool{false, true} {
			for _, stream := range []bool{false, true} {
				for seed := range 3 {
					calls = append(calls, constrainedCall{schema, chat, stream, seed})
				}
			}
		}
	}
	for _, m := range outputModes {
		t.Run(m.name, func(t *testing.T) {
			e := startEngine(t, engineOpts{workers: m.workers, skipDetok: m.skipDetok})
			concurrently(t, len(calls), func(i int) error {
				c := calls[i]
				text, finish, err := e.constrained(c, 1000*i+c.seed)
				if err != nil {
					return fmt.Errorf("%v: %w", c, err)
				}
				if finish != "stop" {
					return fmt.Errorf("%v: finish %q (text %q); a bounded constraint must end", c, finish, text)
				}
				if c.schema == "" {
					if !re.MatchString(text) {
						return fmt.Errorf("%v: %q does not match %s", c, text, constrainedRegex)
					}
					return nil
				}
				doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
				if err != nil {
					return fmt.Errorf("%v: output %q is not JSON: %w", c, text, err)
				}
				if err := compiled[c.schema].Validate(doc); err != nil {
					return fmt.Errorf("%v: output %q does not validate: %w", c, text, err)
				}
				if obj, ok := doc.(map[string]any); ok && c.schema == "implicit" && len(obj) != 2 {
					return fmt.Errorf("%v: output %q has keys beyond the listed properties", c, text)
				}
				return nil
			})
		})
	}
}

// constrained sends one request of the matrix and returns the generated text (for streams, the
// concatenated deltas, checked against the ids' count) and the finish reason.
func (e *engine) constrained(c constrainedCall, seed int) (string, string, error) {
	body := map[string]any{"temperature": 1, "seed": seed, "max_tokens": 300, "stream": c.stream}
	path := "/v1/chat/completions"
	if c.chat {
		body["messages"] = []map[string]string{{"role": "user", "content": "Answer in JSON."}}
		body["model"] = "pico"
		if c.schema == "" {
			body["regex"] = constrainedRegex
		} else {
			body["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": c.schema, "strict": true, "schema": json.RawMessage(constrainedSchemas[c.schema])}}
		}
		if c.stream {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
	} else {
		path = "/generate"
		sp := map[string]any{"temperature": 1, "seed": seed, "max_new_tokens": 300}
		if c.schema == "" {
			sp["regex"] = constrainedRegex
		} else {
			sp["json_schema"] = constrainedSchemas[c.schema]
		}
		body = map[string]any{"text": "Answer in JSON: ", "sampling_params": sp, "stream": c.stream}
	}
	return e.sendConstrained(path, body, c.chat, c.stream)
}

// sendConstrained posts body to path (chat: an OpenAI chat body, else a /generate body) and
// returns the generated text (for streams, the concatenated deltas, checked against the ids'
// count) and the finish reason.
func (e *engine) sendConstrained(path string, body map[string]any, chat, stream bool) (string, string, error) {
	if !stream {
		code, out := postWith(http.DefaultClient, e.base+path, body)
		if code != 200 {
			return "", "", fmt.Errorf("status %d: %s", code, out)
		}
		resp := []byte(out)
		if chat {
			var r struct {
				Choices []struct {
					Message      struct{ Content string } `json:"message"`
					FinishReason string                   `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(resp, &r); err != nil || len(r.Choices) != 1 {
				return "", "", fmt.Errorf("response %s: %v", resp, err)
			}
			return r.Choices[0].Message.Content, r.Choices[0].FinishReason, nil
		}
		var r generateResp
		if err := json.Unmarshal(resp, &r); err != nil {
			return "", "", fmt.Errorf("response %s: %v", resp, err)
		}
		var fr struct{ Type string }
		_ = json.Unmarshal(r.MetaInfo.FinishReason, &fr)
		if r.MetaInfo.CompletionTokens != len(r.OutputIDs) {
			return "", "", fmt.Errorf("completion_tokens %d for %d ids", r.MetaInfo.CompletionTokens, len(r.OutputIDs))
		}
		return r.Text, fr.Type, nil
	}
	events, err := e.sseEvents(context.Background(), path, body)
	if err != nil {
		return "", "", err
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		return "", "", fmt.Errorf("stream did not end with [DONE]: %q", events)
	}
	var text, finish string
	ids, usage := 0, -1
	for _, ev := range events[:len(events)-1] {
		if strings.Contains(ev, `"error"`) {
			return "", "", fmt.Errorf("error event %s", ev)
		}
		var ch struct {
			Text      string  `json:"text"`
			OutputIDs []int32 `json:"output_ids"`
			MetaInfo  struct {
				CompletionTokens int             `json:"completion_tokens"`
				FinishReason     json.RawMessage `json:"finish_reason"`
			} `json:"meta_info"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			return "", "", fmt.Errorf("chunk %q: %w", ev, err)
		}
		if chat {
			for _, x := range ch.Choices {
				text += x.Delta.Content
				if x.FinishReason != nil {
					finish = *x.FinishReason
				}
			}
			if ch.Usage != nil {
				usage = ch.Usage.CompletionTokens
			}
			continue
		}
		text += ch.Text
		ids += len(ch.OutputIDs)
		usage = ch.MetaInfo.CompletionTokens
		var fr struct{ Type string }
		if json.Unmarshal(ch.MetaInfo.FinishReason, &fr) == nil && fr.Type != "" {
			finish = fr.Type
		}
	}
	if !chat && ids != usage {
		return "", "", fmt.Errorf("stream carried %d ids, completion_tokens %d", ids, usage)
	}
	if usage <= 0 {
		return "", "", fmt.Errorf("stream reported no usage (%d)", usage)
	}
	return text, finish, nil
}

// TestStructuredOutputBadInput: each bad constraint is a 400 with the reason, and the engine
// keeps serving; limits are flags.
func TestStructuredOutputBadInput(t *testing.T) {
	e := startEngine(t, engineOpts{tokArgs: []string{"--grammar-max-schema-bytes", "2000", "--grammar-max-depth", "8"}})
	deep := strings.Repeat(`{"type":"array","items":`, 20) + `{"type":"integer"}` + strings.Repeat(`}`, 20)
	large := `{"enum":[` + strings.TrimSuffix(strings.Repeat(`"abcdefghijklmnopqrstuvwxyz",`, 100), ",") + `]}`
	cases := []struct {
		name   string
		sp     map[string]any
		reason string
	}{
		{"invalid schema", map[string]any{"json_schema": `{"type":"strin"}`}, "invalid schema"},
		{"schema not JSON", map[string]any{"json_schema": `{"type":`}, "schema"},
		{"unsupported keyword", map[string]any{"json_schema": `{"type":"array","uniqueItems":true}`}, "uniqueItems"},
		{"bad regex", map[string]any{"regex": `[0-9`}, "regex"},
		{"too large", map[string]any{"json_schema": large}, "limit"},
		{"too deep", map[string]any{"json_schema": deep}, "deep"},
		// Schemas that accept no document are refused when compiled, never a 500 after dispatch.
		{"schema false", map[string]any{"json_schema": `false`}, "false"},
		{"minimum over maximum", map[string]any{"json_schema": `{"type":"integer","minimum":5,"maximum":1}`}, "minimum"},
		{"conflicting allOf", map[string]any{"json_schema": `{"allOf":[{"type":"string"},{"type":"integer"}]}`}, "type"},
		{"required key forbidden", map[string]any{"json_schema": `{"type":"object","additionalProperties":false,"required":["a"]}`}, "required"},
	}
	for _, c := range cases {
		c.sp["max_new_tokens"] = 8
		code, b := e.post("/generate", map[string]any{"text": "x", "sampling_params": c.sp})
		if code != 400 || !strings.Contains(strings.ToLower(string(b)), strings.ToLower(c.reason)) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", c.name, code, b, c.reason)
		}
	}
	code, b := e.post("/v1/chat/completions", map[string]any{"model": "pico", "max_tokens": 8,
		"messages":        []map[string]string{{"role": "user", "content": "x"}},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{"not": map[string]any{}}}}})
	if code != 400 || !strings.Contains(string(b), "not") {
		t.Errorf("chat with unsupported keyword: %d %s", code, b)
	}
	// Everything else still works, constrained or not.
	r := generate(t, e, map[string]any{"text": "x", "sampling_params": map[string]any{"max_new_tokens": 40, "regex": "(yes|no)"}})
	if r.Text != "yes" && r.Text != "no" {
		t.Errorf("regex (yes|no) after bad requests gave %q", r.Text)
	}
	r = generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 4, "ignore_eos": true}})
	if len(r.OutputIDs) != 4 {
		t.Errorf("plain request after bad ones: %+v", r)
	}
}

// TestStructuredOutputSkipTokenizerInit: a constrained request needs the tokenizer.
func TestStructuredOutputSkipTokenizerInit(t *testing.T) {
	e := startEngine(t, engineOpts{skipTokInit: true})
	for _, sp := range []map[string]any{{"json_schema": `{"type":"integer"}`}, {"regex": "a+"}, {"grammar": `root ::= "a"+`}} {
		sp["max_new_tokens"] = 4
		code, b := e.post("/generate", map[string]any{"input_ids": promptIDs, "sampling_params": sp})
		if code != 400 || !strings.Contains(string(b), "--skip-tokenizer-init") {
			t.Errorf("%v under --skip-tokenizer-init: %d %s, want 400 naming the flag", sp, code, b)
		}
	}
}
