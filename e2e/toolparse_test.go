package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestToolParserSyntaxes: with --tool-call-parser mistral and deepseek_v3 the grammar writes
// calls in that syntax and its toolparse parser reads them back, on pico (whose template knows
// no tools, so only the grammar decides the syntax): required and named calls to functions with
// real arguments (a nested object, an enum, a bounded integer) validate against their schemas
// at temperature 1 with no key written twice, streamed == non-streamed, usage exact.
// qwen3_coder's tool_choice required is a 400 naming auto (its bare values cannot be
// constrained); with --tool-call-parser qwen3_coder and harmony (tool_choice auto) the output is
// forced to text in that syntax and the calls parsed from it are the ones forced.
func TestToolParserSyntaxes(t *testing.T) {
	weather := `{"type":"object","properties":{` +
		`"location":{"type":"object","properties":{"city":{"type":"string","maxLength":12},"country":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false},` +
		`"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},` +
		`"required":["location","unit"],"additionalProperties":false}`
	search := `{"type":"object","properties":{"query":{"type":"string","maxLength":16},"filters":{"type":"object","properties":{"lang":{"enum":["en","fr"]},"recent":{"type":"boolean"}},"additionalProperties":false}},"required":["query"],"additionalProperties":false}`
	schemas := map[string]*jsonschema.Schema{"get_weather": compileSchema(t, weather), "search": compileSchema(t, search)}
	tools := []map[string]any{
		{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": json.RawMessage(weather)}},
		{"type": "function", "function": map[string]any{"name": "search", "parameters": json.RawMessage(search)}},
	}
	for _, syntax := range []string{"mistral", "deepseek_v3"} {
		t.Run(syntax, func(t *testing.T) {
			e := startEngine(t, engineOpts{skipDetok: true, tokArgs: []string{"--tool-call-parser", syntax}})
			calls := 0
			for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
				for seed := 1; seed <= 2; seed++ {
					what := fmt.Sprintf("%s tool_choice %v seed %d", syntax, choice, seed)
					body := toolRequest(choice, seed)
					body["tools"] = tools
					whole := e.chatWhole(t, body)
					checkCalls(t, what, whole, choice, false, schemas)
					t.Logf("%s: %q(%s)", what, whole.Names, whole.Args)
					for i, args := range whole.Args {
						if err := noDuplicateKeys(args); err != nil {
							t.Fatalf("%s: call %d arguments %s: %v", what, i, args, err)
						}
					}
					streamed := e.chatStream(t, body)
					if !whole.same(streamed) {
						t.Fatalf("%s: streamed\n%v\nnon-streamed\n%v", what, streamed, whole)
					}
					calls += len(whole.Names)
				}
			}
			if calls == 0 {
				t.Fatal("no calls")
			}
		})
	}
	t.Run("qwen3_coder", func(t *testing.T) {
		e := startEngine(t, engineOpts{skipDetok: true, tokArgs: []string{"--tool-call-parser", "qwen3_coder"}})
		code, body := e.post("/v1/chat/completions", toolRequest("required", 1))
		if code != 400 || !strings.Contains(string(body), "tool_choice auto") {
			t.Fatalf("qwen3_coder required: %d %s", code, body)
		}
		// Two calls in Qwen3-Coder's XML, bare values typed by their schemas (an object, an enum
		// string, an integer, a string, a boolean inside an object).
		forced := "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=location>\n{\"city\": \"Paris\"}\n</parameter>\n" +
			"<parameter=unit>\ncelsius\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n" +
			"<tool_call>\n<function=search>\n<parameter=query>\nParis news\n</parameter>\n<parameter=filters>\n{\"lang\": \"fr\", \"recent\": true}\n</parameter>\n</function>\n</tool_call>"
		forcedCalls(t, e, tools, forced, "Checking.\n", "",
			[]string{"get_weather", "search"},
			[]string{`{"location":{"city":"Paris"},"unit":"celsius","days":3}`, `{"query":"Paris news","filters":{"lang":"fr","recent":true}}`})
	})
	t.Run("harmony", func(t *testing.T) {
		// pico's vocabulary has no harmony tokens: the constraint spells them in ordinary tokens,
		// so the text keeps them whatever skip_special_tokens says, and the parser reads the text.
		e := startEngine(t, engineOpts{tokArgs: []string{"--tool-call-parser", "harmony"}})
		forced := "<|channel|>analysis<|message|>Need the weather.<|end|>" +
			"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" +
			`{"location":{"city":"Lyon","country":"FR"},"unit":"fahrenheit","days":2}<|call|>`
		forcedCalls(t, e, tools, forced, "", "Need the weather.",
			[]string{"get_weather"}, []string{`{"location":{"city":"Lyon","country":"FR"},"unit":"fahrenheit","days":2}`})
	})
}

// forcedCalls posts tool_choice auto with the output forced to the text forced (guided_choice of
// that one string: the random model writes exactly it), streamed and whole, and checks what the
// server's parser read back: the content, the reasoning, the calls' names and their arguments
// (as JSON values), streamed == whole.
func forcedCalls(t *testing.T, e *engine, tools []map[string]any, forced, content, reasoning string, names, args []string) {
	t.Helper()
	body := map[string]any{
		"messages":      []map[string]any{{"role": "user", "content": "Weather, and news?"}},
		"tools":         tools,
		"tool_choice":   "auto",
		"guided_choice": []string{forced},
		"temperature":   1, "seed": 7, "max_tokens": 400, "return_token_ids": true,
	}
	whole := e.chatWhole(t, body)
	t.Logf("whole: %v", whole)
	streamed := e.chatStream(t, body)
	if !whole.same(streamed) {
		t.Fatalf("streamed\n%v\nwhole\n%v", streamed, whole)
	}
	if whole.Finish != "tool_calls" || whole.Content != content || whole.Reasoning != reasoning {
		t.Fatalf("want finish tool_calls, content %q, reasoning %q: %v", content, reasoning, whole)
	}
	if fmt.Sprint(whole.Names) != fmt.Sprint(names) || len(whole.Args) != len(args) {
		t.Fatalf("calls %q(%q), want %q(%q)", whole.Names, whole.Args, names, args)
	}
	for i := range args {
		var got, want any
		if err := json.Unmarshal([]byte(whole.Args[i]), &got); err != nil {
			t.Fatalf("call %d arguments %q: %v", i, whole.Args[i], err)
		}
		if err := json.Unmarshal([]byte(args[i]), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d arguments %s, want %s", i, whole.Args[i], args[i])
		}
	}
}

// noDuplicateKeys reports an object of the JSON text s that has a key twice (encoding/json keeps
// the last silently, so a validator never sees the first).
func noDuplicateKeys(s string) error {
	d := json.NewDecoder(strings.NewReader(s))
	var walk func() error
	walk = func() error {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("key %q written twice", key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = d.Token()
			return err
		case json.Delim('['):
			for d.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = d.Token()
			return err
		}
		return nil
	}
	return walk()
}

// TestNoDuplicateKeys: the checker above finds a repeated key at any depth and passes clean
// arguments.
func TestNoDuplicateKeys(t *testing.T) {
	for s, dup := range map[string]bool{
		`{"a":1,"b":{"c":[{"d":1,"e":2}]}}`: false,
		`{"a":1,"a":1}`:                     true,
		`{"a":{"b":[{"c":1,"c":2}]}}`:       true,
	} {
		if err := noDuplicateKeys(s); (err != nil) != dup {
			t.Errorf("%s: %v", s, err)
		}
	}
}
