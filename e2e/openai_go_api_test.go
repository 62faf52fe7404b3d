package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAIGoClient drives the issue-13 API with the official Go client (openai-go): n choices
// with logprobs streamed and whole (stream_options.include_obfuscation, which it can send, is
// accepted and named as ignored), a batch of prompts with logprobs N, the Responses API plain,
// streamed and with a json_schema format, and /v1/models/{id}.
func TestOpenAIGoClient(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	params := openai.ChatCompletionNewParams{
		Model:     "pico",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count.")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(1), Seed: openai.Int(5), N: openai.Int(3),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2),
	}
	whole, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true), IncludeObfuscation: openai.Bool(false)}
	var httpResp *http.Response
	stream := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&httpResp))
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if h := httpResp.Header.Get("X-LLMServe-Ignored-Fields"); h != "stream_options.include_obfuscation" {
		t.Fatalf("ignored header %q", h)
	}
	if len(whole.Choices) != 3 || len(acc.Choices) != 3 || acc.Usage.CompletionTokens != whole.Usage.CompletionTokens ||
		acc.Usage.PromptTokens != whole.Usage.PromptTokens {
		t.Fatalf("whole %d choices usage %+v, streamed %d choices usage %+v", len(whole.Choices), whole.Usage, len(acc.Choices), acc.Usage)
	}
	total := int64(0)
	for i, c := range whole.Choices {
		s := acc.Choices[i]
		if c.Index != int64(i) || s.Message.Content != c.Message.Content || len(c.Logprobs.Content) != len(s.Logprobs.Content) {
			t.Fatalf("choice %d: whole %q (%d logprobs), streamed %q (%d)", i, c.Message.Content, len(c.Logprobs.Content), s.Message.Content, len(s.Logprobs.Content))
		}
		for _, lp := range c.Logprobs.Content {
			if len(lp.TopLogprobs) != 2 || lp.TopLogprobs[0].Logprob < lp.TopLogprobs[1].Logprob || lp.Logprob > lp.TopLogprobs[0].Logprob+1e-6 {
				t.Fatalf("choice %d: logprob entry %+v", i, lp)
			}
		}
		total += int64(len(c.Logprobs.Content))
	}
	if whole.Usage.CompletionTokens != total {
		t.Fatalf("usage %+v, %d tokens in the choices", whole.Usage, total)
	}

	cmpl, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel("pico"),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: [][]int64{{400, 1234, 87}, {2011, 305}}},
		MaxTokens: openai.Int(3), Temperature: openai.Float(0), Logprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmpl.Choices) != 2 || cmpl.Usage.PromptTokens != 5 || cmpl.Usage.CompletionTokens != int64(len(cmpl.Choices[0].Logprobs.Tokens)+len(cmpl.Choices[1].Logprobs.Tokens)) {
		t.Fatalf("completions %+v usage %+v", cmpl.Choices, cmpl.Usage)
	}
	for i, c := range cmpl.Choices {
		lp := c.Logprobs
		if c.Index != int64(i) || len(lp.TokenLogprobs) != len(lp.Tokens) || len(lp.TopLogprobs) != len(lp.Tokens) || len(lp.TextOffset) != len(lp.Tokens) {
			t.Fatalf("choice %d logprobs %+v", i, lp)
		}
	}

	rp := responses.ResponseNewParams{
		Model: "pico", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hi.")},
		Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(8), Temperature: openai.Float(0),
	}
	resp, err := client.Responses.New(ctx, rp)
	if err != nil {
		t.Fatal(err)
	}
	rs := client.Responses.NewStreaming(ctx, rp)
	var deltas string
	var terminal responses.Response
	for rs.Next() {
		ev := rs.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.completed", "response.incomplete":
			terminal = ev.Response
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() == "" || deltas != resp.OutputText() || terminal.OutputText() != deltas || terminal.Usage.TotalTokens != resp.Usage.TotalTokens ||
		terminal.Status != resp.Status {
		t.Fatalf("whole %q %s %+v, streamed %q / %q %s %+v", resp.OutputText(), resp.Status, resp.Usage, deltas, terminal.OutputText(), terminal.Status, terminal.Usage)
	}
	js, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "pico", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("A point.")},
		MaxOutputTokens: openai.Int(48), Temperature: openai.Float(0),
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "point", Strict: openai.Bool(true),
				Schema: map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer", "minimum": 0, "maximum": 9},
					"y": map[string]any{"type": "integer", "minimum": 0, "maximum": 9}}, "required": []string{"x", "y"}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var point map[string]int
	if js.Status != "completed" || json.Unmarshal([]byte(js.OutputText()), &point) != nil || len(point) != 2 {
		t.Fatalf("json_schema response %s %q", js.Status, js.OutputText())
	}
	m, err := client.Models.Get(ctx, "pico")
	if err != nil || m.ID != "pico" {
		t.Fatalf("models.get: %v %+v", err, m)
	}
	if _, err := client.Models.Get(ctx, "nope"); err == nil {
		t.Fatal("models.get of an unknown id succeeded")
	} else if apiErr, ok := err.(*openai.Error); !ok || apiErr.StatusCode != 404 || !slices.Contains([]string{"not_found_error"}, apiErr.Type) {
		t.Fatalf("models.get nope: %v", err)
	}
}
