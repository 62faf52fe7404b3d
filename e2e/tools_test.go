package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// qwen3ToolModel writes a tiny random-weight Qwen3 model with the real Qwen3 tokenizer and chat
// template (testdata/tokenizer-files/qwen3) into a temporary directory: the committed 512-token
// test model's layers, and an embedding (tied to the LM head) for the tokenizer's whole
// vocabulary. Its output is noise, which is the point: the grammar alone makes tool calls valid.
func qwen3ToolModel(t *testing.T) string {
	return toolModel(t, "qwen3", "qwen3", 151936, 151643, []int{151645, 151643}, "")
}

// llama3JSONToolModel is the same over the Llama-3 tokenizer (vocabulary 128256), with the
// template in the Llama 3.1 custom-tool style of testdata/chat/llama3-json-tools.jinja.
func llama3JSONToolModel(t *testing.T) string {
	tmpl, err := os.ReadFile(filepath.Join("..", "testdata", "chat", "llama3-json-tools.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return toolModel(t, "llama32", "llama3", 128256, 128000, []int{128001, 128009}, string(tmpl))
}

// toolModel writes testdata/models/<model>'s layers with a random embedding for vocab ids, the
// tokenizer files of testdata/tokenizer-files/<tok> (chat template replaced when template is
// set) and the given BOS and EOS ids.
func toolModel(t *testing.T, model, tok string, vocab, bos int, eos []int, template string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("..", "testdata", "models", model)
	tokDir := filepath.Join("..", "testdata", "tokenizer-files", tok)
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["vocab_size"] = vocab
	cfg["bos_token_id"] = bos
	cfg["eos_token_id"] = eos[0]
	cfg["max_position_embeddings"] = 4096
	writeJSONFile(t, filepath.Join(dir, "config.json"), cfg)
	writeJSONFile(t, filepath.Join(dir, "generation_config.json"), map[string]any{"eos_token_id": eos})
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tokDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "tokenizer_config.json" && template != "" {
			var tc map[string]any
			if err := json.Unmarshal(b, &tc); err != nil {
				t.Fatal(err)
			}
			tc["chat_template"] = template
			b, _ = json.Marshal(tc)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// the source model's tensors, the embedding replaced by a vocab-sized random one
	data, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	body := data[8+n:]
	type info struct {
		DType   string `json:"dtype"`
		Shape   []int  `json:"shape"`
		Offsets [2]int `json:"data_offsets"`
	}
	out := map[string]any{}
	var blobs [][]byte
	off := 0
	for name, r := range header {
		if name == "__metadata__" {
			continue
		}
		var in info
		if err := json.Unmarshal(r, &in); err != nil {
			t.Fatal(err)
		}
		b := body[in.Offsets[0]:in.Offsets[1]]
		if name == "model.embed_tokens.weight" {
			hidden := in.Shape[1]
			rng := rand.New(rand.NewPCG(7, 7))
			b = make([]byte, 4*vocab*hidden)
			for i := 0; i < vocab*hidden; i++ {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rng.Float64()*2-1)))
			}
			in.Shape = []int{vocab, hidden}
		}
		out[name] = map[string]any{"dtype": in.DType, "shape": in.Shape, "data_offsets": []int{off, off + len(b)}}
		blobs = append(blobs, b)
		off += len(b)
	}
	head, _ := json.Marshal(out)
	for len(head)%8 != 0 {
		head = append(head, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	_ = binary.Write(w, binary.LittleEndian, uint64(len(head)))
	_, _ = w.Write(head)
	// blobs in the order their offsets were assigned
	for _, b := range blobs {
		_, _ = w.Write(b)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// toolDefs are bounded (strings, arrays and numbers have limits) so that calls sampled at
// temperature 1 end well inside max_tokens.
var toolDefs = []map[string]any{
	{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather for a city.",
		"parameters": json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":12},
			"days":{"type":"integer","minimum":1,"maximum":7},"unit":{"enum":["c","f"]}},"required":["city","days"],"additionalProperties":false}`)}},
	{"type": "function", "function": map[string]any{"name": "search",
		"parameters": json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","maxLength":16},
			"tags":{"type":"array","items":{"type":"string","enum":["news","web"]},"maxItems":2},"strict":{"type":"boolean"}},"required":["query"],"additionalProperties":false}`)}},
	{"type": "function", "function": map[string]any{"name": "noop"}},
}

// toolSchemas compiles each tool's parameters schema with jsonschema/v6, apart from grammar/.
func toolSchemas(t *testing.T) map[string]*jsonschema.Schema {
	out := map[string]*jsonschema.Schema{}
	for _, d := range toolDefs {
		fn := d["function"].(map[string]any)
		name := fn["name"].(string)
		params, _ := fn["parameters"].(json.RawMessage)
		if params == nil {
			params = json.RawMessage(`{"type":"object","additionalProperties":false}`)
		}
		out[name] = compileSchema(t, string(params))
	}
	return out
}

// chatResult is one chat completion as a client assembles it.
type chatResult struct {
	Content   string
	Reasoning string
	Names     []string
	Args      []string
	IDs       []string
	Finish    string
	Tokens    []int32 // token_ids received
	Usage     struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		Details          struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
}

func (r chatResult) same(o chatResult) bool {
	return r.Content == o.Content && r.Reasoning == o.Reasoning && fmt.Sprint(r.Names) == fmt.Sprint(o.Names) &&
		fmt.Sprint(r.Args) == fmt.Sprint(o.Args) && r.Finish == o.Finish && r.Usage == o.Usage && fmt.Sprint(r.Tokens) == fmt.Sprint(o.Tokens)
}

func (r chatResult) String() string {
	return fmt.Sprintf("content %q reasoning %q calls %q(%q) finish %s usage %+v", r.Content, r.Reasoning, r.Names, r.Args, r.Finish, r.Usage)
}

type wireCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatWhole posts a non-streamed chat completion.
func (e *engine) chatWhole(t *testing.T, body map[string]any) chatResult {
	t.Helper()
	status, raw := e.post("/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, raw)
	}
	var resp struct {
		Choices []struct {
			Message struct {
				Content   *string    `json:"content"`
				Reasoning *string    `json:"reasoning_content"`
				ToolCalls []wireCall `json:"tool_calls"`
			} `json:"message"`
			TokenIDs []int32 `json:"token_ids"`
			Finish   string  `json:"finish_reason"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	c := resp.Choices[0]
	var r chatResult
	if c.Message.Content != nil {
		r.Content = *c.Message.Content
	}
	if c.Message.Reasoning != nil {
		r.Reasoning = *c.Message.Reasoning
	}
	for _, tc := range c.Message.ToolCalls {
		if tc.Type != "function" || tc.ID == "" {
			t.Fatalf("tool call %+v lacks its id or type", tc)
		}
		r.Names, r.Args, r.IDs = append(r.Names, tc.Function.Name), append(r.Args, tc.Function.Arguments), append(r.IDs, tc.ID)
	}
	r.Finish, r.Tokens = c.Finish, c.TokenIDs
	_ = json.Unmarshal(resp.Usage, &r.Usage)
	return r
}

// chatStream streams a chat completion and assembles it the way OpenAI clients do.
func (e *engine) chatStream(t *testing.T, body map[string]any) chatResult {
	t.Helper()
	b := map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}
	for k, v := range body {
		b[k] = v
	}
	var r chatResult
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := e.streamEvents(ctx, "/v1/chat/completions", b, func(data []byte) error {
		if string(data) == "[DONE]" {
			return nil
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content   *string    `json:"content"`
					Reasoning *string    `json:"reasoning_content"`
					ToolCalls []wireCall `json:"tool_calls"`
				} `json:"delta"`
				TokenIDs []int32 `json:"token_ids"`
				Finish   *string `json:"finish_reason"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &ch); err != nil {
			return fmt.Errorf("chunk %s: %w", data, err)
		}
		if ch.Error != nil {
			return fmt.Errorf("error event %s", ch.Error)
		}
		if ch.Usage != nil {
			_ = json.Unmarshal(ch.Usage, &r.Usage)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				r.Content += *c.Delta.Content
			}
			if c.Delta.Reasoning != nil {
				r.Reasoning += *c.Delta.Reasoning
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					if tc.Index != len(r.Names) || tc.Function.Name == "" {
						return fmt.Errorf("call %d opens out of order or without a name: %s", tc.Index, data)
					}
					r.Names, r.IDs, r.Args = append(r.Names, tc.Function.Name), append(r.IDs, tc.ID), append(r.Args, "")
				}
				if tc.Index >= len(r.Args) {
					return fmt.Errorf("arguments of call %d before its id and name: %s", tc.Index, data)
				}
				r.Args[tc.Index] += tc.Function.Arguments
			}
			r.Tokens = append(r.Tokens, c.TokenIDs...)
			if c.Finish != nil {
				r.Finish = *c.Finish
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkCalls checks one result against the request's tool choice: every call names a tool and
// its arguments parse and validate; required and named choices call, named calls that function
// once; finish_reason is tool_calls exactly when calls completed.
func checkCalls(t *testing.T, what string, r chatResult, choice any, parallel bool, schemas map[string]*jsonschema.Schema) {
	t.Helper()
	complete := len(r.Names)
	if r.Finish == "length" {
		// free text (auto) and parallel calls may run on; the calls before the last are complete
		if choice != "auto" && !parallel {
			t.Fatalf("%s: ran out of max_tokens: %v", what, r)
		}
		complete = max(0, complete-1)
	}
	for i, name := range r.Names[:complete] {
		s, ok := schemas[name]
		if !ok {
			t.Fatalf("%s: call %d names unknown function %q", what, i, name)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(r.Args[i]))
		if err != nil {
			t.Fatalf("%s: call %d arguments %q do not parse: %v", what, i, r.Args[i], err)
		}
		if err := s.Validate(inst); err != nil {
			t.Fatalf("%s: call %d arguments %s do not validate: %v", what, i, r.Args[i], err)
		}
	}
	switch c := choice.(type) {
	case string:
		if c == "required" && len(r.Names) == 0 && r.Finish != "length" {
			t.Fatalf("%s: required made no call: %v", what, r)
		}
		if c == "required" && r.Content != "" {
			t.Fatalf("%s: required wrote content %q", what, r.Content)
		}
	case map[string]any:
		want := c["function"].(map[string]any)["name"]
		if len(r.Names) != 1 || r.Names[0] != want {
			t.Fatalf("%s: named %v made calls %q", what, want, r.Names)
		}
	}
	if r.Finish != "length" && (len(r.Names) > 0) != (r.Finish == "tool_calls") {
		t.Fatalf("%s: %d calls with finish_reason %q", what, len(r.Names), r.Finish)
	}
	if len(r.Tokens) != r.Usage.CompletionTokens || r.Usage.CompletionTokens == 0 {
		t.Fatalf("%s: %d token ids received, usage says %d", what, len(r.Tokens), r.Usage.CompletionTokens)
	}
}

func toolRequest(choice any, seed int) map[string]any {
	return map[string]any{
		"messages":    []map[string]any{{"role": "user", "content": "What is the weather in Paris for 3 days? Search the news too."}},
		"tools":       toolDefs,
		"tool_choice": choice,
		"temperature": 1, "seed": seed, "max_tokens": 400, "return_token_ids": true, "parallel_tool_calls": false,
		// the random model would think forever: Qwen3 with thinking off
		"chat_template_kwargs": map[string]any{"enable_thinking": false},
	}
}

// TestToolCalls: tool_choice required, named and auto at temperature 1 over several seeds, with
// the real Qwen3 tokenizer and template, in the default mode, with --skip-detokenization and
// with 3 workers: every call validates, streamed == non-streamed, usage exact.
func TestToolCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three engines")
	}
	model := qwen3ToolModel(t)
	schemas := toolSchemas(t)
	choices := []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, "auto"}
	for _, mode := range []struct {
		name string
		o    engineOpts
	}{
		{"default", engineOpts{model: model, rankTimeout: 10 * time.Second}},
		{"skip-detokenization", engineOpts{model: model, skipDetok: true, rankTimeout: 10 * time.Second}},
		{"3-workers", engineOpts{model: model, workers: 3, rankTimeout: 10 * time.Second}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := startEngine(t, mode.o)
			calls := 0
			for _, choice := range choices {
				for seed := 1; seed <= 3; seed++ {
					what := fmt.Sprintf("tool_choice %v seed %d", choice, seed)
					body := toolRequest(choice, seed)
					if choice == "auto" {
						body["max_tokens"] = 100 // free text runs to the limit
					}
					whole := e.chatWhole(t, body)
					checkCalls(t, what, whole, choice, false, schemas)
					streamed := e.chatStream(t, body)
					checkCalls(t, what+" streamed", streamed, choice, false, schemas)
					if !whole.same(streamed) {
						t.Fatalf("%s: streamed\n%v\nnon-streamed\n%v", what, streamed, whole)
					}
					calls += len(whole.Names)
				}
			}
			t.Logf("%d calls, all valid", calls)
		})
	}
}

// TestToolCallsParallel: parallel_tool_calls false allows one call; true lets required make
// several: with min_tokens banning EOS past the first call, the grammar's only way on is another
// call (whether the random model picks EOS after a call depends on how the forced text before
// it is spelled, so without the ban it is luck); these may run to max_tokens: every call but the
// cut last one validates.
func TestToolCallsParallel(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	schemas := toolSchemas(t)
	most := 0
	for seed := 1; seed <= 6; seed++ {
		body := toolRequest("required", seed)
		body["parallel_tool_calls"] = false
		r := e.chatWhole(t, body)
		checkCalls(t, "parallel false", r, "required", false, schemas)
		if len(r.Names) != 1 {
			t.Fatalf("parallel_tool_calls false: %d calls", len(r.Names))
		}
		body["parallel_tool_calls"], body["min_tokens"] = true, 48
		r = e.chatWhole(t, body)
		checkCalls(t, "parallel true", r, "required", true, schemas)
		most = max(most, len(r.Names))
	}
	if most < 2 {
		t.Errorf("parallel_tool_calls true never made two calls")
	}
	// tool_choice none: the tools are rendered, the output is content, never read as calls
	body := toolRequest("none", 1)
	body["max_tokens"] = 30
	if r := e.chatWhole(t, body); len(r.Names) != 0 || r.Finish == "tool_calls" || r.Content == "" {
		t.Errorf("tool_choice none: %v", r)
	}
	t.Logf("at most %d calls in one response", most)
}

// TestToolConversationRendering: a conversation with tools, parallel calls and tool results
// reaches the model as Jinja2 renders Qwen3's own template (testdata/chat/gen_tools.py): the
// prompt ids /tokenize renders from the messages equal the ids of the expected prompt, and a
// chat completion counts as many prompt tokens.
func TestToolConversationRendering(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	checkRendering(t, e, "qwen3-tools-expected.json")
}

// checkRendering compares the prompts the engine renders for fixture's conversations with
// Jinja2's.
func checkRendering(t *testing.T, e *engine, fixture string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "chat", fixture))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name           string            `json:"name"`
		Messages       []json.RawMessage `json:"messages"`
		Tools          json.RawMessage   `json:"tools"`
		EnableThinking *bool             `json:"enable_thinking"`
		Prompt         string            `json:"prompt"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		tok := map[string]any{"messages": c.Messages, "tools": c.Tools}
		req := map[string]any{"messages": c.Messages, "tools": c.Tools, "max_tokens": 1}
		if c.EnableThinking != nil {
			tok["chat_template_kwargs"] = map[string]any{"enable_thinking": *c.EnableThinking}
			req["chat_template_kwargs"] = tok["chat_template_kwargs"]
		}
		var got, want struct {
			Tokens []int32 `json:"tokens"`
		}
		status, body := e.post("/tokenize", tok)
		if status != 200 || json.Unmarshal(body, &got) != nil {
			t.Fatalf("%s: /tokenize: %d %s", c.Name, status, body)
		}
		status, body = e.post("/tokenize", map[string]any{"text": c.Prompt, "add_special_tokens": false})
		if status != 200 || json.Unmarshal(body, &want) != nil {
			t.Fatalf("%s: /tokenize text: %d %s", c.Name, status, body)
		}
		if fmt.Sprint(got.Tokens) != fmt.Sprint(want.Tokens) {
			t.Fatalf("%s: rendered prompt ids differ from the template's own rendering", c.Name)
		}
		r := e.chatWhole(t, req)
		if r.Usage.PromptTokens != len(want.Tokens) {
			t.Fatalf("%s: prompt_tokens %d, want %d", c.Name, r.Usage.PromptTokens, len(want.Tokens))
		}
	}
}

// TestToolCallsBadInput: what a client can get wrong is a 400 that says what.
func TestToolCallsBadInput(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	user := []map[string]any{{"role": "user", "content": "hi"}}
	badSchema := []map[string]any{{"type": "function", "function": map[string]any{"name": "broken",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "nope"}}}}}}
	call := map[string]any{"id": "call_a", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"x","days":1}`}}
	for _, c := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"unknown named tool", map[string]any{"messages": user, "tools": toolDefs,
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}}, `\"nope\" is not among the request's tools`},
		{"invalid schema", map[string]any{"messages": user, "tools": badSchema, "tool_choice": "required"}, `function \"broken\"`},
		{"tool message without a call", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"},
			{"role": "tool", "tool_call_id": "call_zz", "content": "42"}}, "tools": toolDefs}, `\"call_zz\" answers no tool call`},
		{"tool message with another call's id", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"},
			{"role": "assistant", "tool_calls": []any{call}}, {"role": "tool", "tool_call_id": "call_b", "content": "42"}}, "tools": toolDefs}, `\"call_b\" answers no tool call`},
		{"required without tools", map[string]any{"messages": user, "tool_choice": "required"}, "needs tools"},
		{"unknown mode", map[string]any{"messages": user, "tools": toolDefs, "tool_choice": "sometimes"}, `unknown mode \"sometimes\"`},
		{"non-object parameters", map[string]any{"messages": user, "tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f",
			"parameters": map[string]any{"type": "string"}}}}}, "must describe an object"},
		{"tools and response_format", map[string]any{"messages": user, "tools": toolDefs, "tool_choice": "required",
			"response_format": map[string]any{"type": "json_object"}}, "cannot be combined"},
	} {
		status, body := e.post("/v1/chat/completions", c.body)
		if status != 400 || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 with %s", c.name, status, body, c.want)
		}
	}
}

// TestToolCallsLlama3JSON: the Llama-3 JSON syntax ({"name": ..., "parameters": ...}, one call
// per turn), detected from a template in the Llama 3.1 custom-tool style, over the real Llama-3
// tokenizer: rendering as Jinja2's, and required, named and auto calls valid, streamed ==
// non-streamed.
func TestToolCallsLlama3JSON(t *testing.T) {
	e := startEngine(t, engineOpts{model: llama3JSONToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	checkRendering(t, e, "llama3-json-tools-expected.json")
	schemas := toolSchemas(t)
	calls := 0
	for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "search"}}, "auto"} {
		for seed := 1; seed <= 3; seed++ {
			what := fmt.Sprintf("llama3_json tool_choice %v seed %d", choice, seed)
			body := toolRequest(choice, seed)
			body["parallel_tool_calls"] = true // the syntax allows one call all the same
			delete(body, "chat_template_kwargs")
			if choice == "auto" {
				body["max_tokens"] = 60
			}
			whole := e.chatWhole(t, body)
			checkCalls(t, what, whole, choice, false, schemas)
			if len(whole.Names) > 1 {
				t.Fatalf("%s: %d calls in one turn", what, len(whole.Names))
			}
			streamed := e.chatStream(t, body)
			if !whole.same(streamed) {
				t.Fatalf("%s: streamed\n%v\nnon-streamed\n%v", what, streamed, whole)
			}
			calls += len(whole.Names)
		}
	}
	t.Logf("%d calls, all valid", calls)
}
