package e2e

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAIGoResponsesTools drives Responses function tools with the official Go client
// (openai-go): a named tool_choice, whole and streamed (greedy: the same call, the argument
// deltas concatenating to it), the call validating against the schema, and a second turn with
// the call passed back (ToParam) and a function_call_output; in the default mode and with 3
// workers and --skip-detokenization.
func TestOpenAIGoResponsesTools(t *testing.T) {
	for name, o := range map[string]engineOpts{"default": {workers: 1}, "3 workers, skip detok": {workers: 3, skipDetok: true}} {
		t.Run(name, func(t *testing.T) { openAIGoResponsesTools(t, o) })
	}
}

func openAIGoResponsesTools(t *testing.T, o engineOpts) {
	e := startEngine(t, o)
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	var schema map[string]any
	if err := json.Unmarshal([]byte(weatherSchema), &schema); err != nil {
		t.Fatal(err)
	}
	user := responses.ResponseInputItemParamOfMessage("What is the weather in Paris for 3 days?", responses.EasyInputMessageRoleUser)
	params := responses.ResponseNewParams{
		Model: "pico", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}},
		Tools:             []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", schema, true)},
		ToolChoice:        responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
		ParallelToolCalls: openai.Bool(false), Temperature: openai.Float(0), MaxOutputTokens: openai.Int(200),
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "completed" || len(resp.Output) != 1 || resp.Output[0].Type != "function_call" {
		t.Fatalf("response %s: %s", resp.Status, resp.RawJSON())
	}
	call := resp.Output[0].AsFunctionCall()
	validateArgs(t, compileSchema(t, weatherSchema), "openai-go responses", call.Arguments)
	if call.Name != "get_weather" || call.CallID == "" || call.ID == "" || call.Status != "completed" {
		t.Fatalf("call %+v", call)
	}
	stream := client.Responses.NewStreaming(ctx, params)
	var deltas string
	var done responses.ResponseFunctionToolCall
	var terminal responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			deltas += ev.Delta
		case "response.output_item.done":
			if ev.Item.Type == "function_call" {
				done = ev.Item.AsFunctionCall()
			}
		case "response.completed":
			terminal = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != call.Arguments || done.Arguments != call.Arguments || done.Name != call.Name || terminal.Usage.OutputTokens != resp.Usage.OutputTokens ||
		len(terminal.Output) != 1 || terminal.Output[0].AsFunctionCall().Arguments != call.Arguments {
		t.Fatalf("streamed %q (done %+v), whole %q", deltas, done, call.Arguments)
	}
	p := call.ToParam()
	turn2, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "pico", Tools: params.Tools, Temperature: openai.Float(0), MaxOutputTokens: openai.Int(8),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user, {OfFunctionCall: &p},
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("sunny, 21 C")}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if turn2.Usage.InputTokens <= resp.Usage.InputTokens || turn2.Usage.OutputTokens == 0 {
		t.Fatalf("second turn: %s", turn2.RawJSON())
	}
}
