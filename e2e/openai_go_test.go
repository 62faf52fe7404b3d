package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// TestToolCallsOpenAIGo: the official Go client (openai-go) calls tools, required and named,
// streamed (through its ChatCompletionAccumulator) and not, against pico's fallback syntax.
func TestToolCallsOpenAIGo(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	var params shared.FunctionParameters
	if err := json.Unmarshal([]byte(weatherSchema), &params); err != nil {
		t.Fatal(err)
	}
	s := compileSchema(t, weatherSchema)
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Weather for a city"), Parameters: params})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, choice := range []openai.ChatCompletionToolChoiceOptionUnionParam{
		{OfAuto: openai.String("required")},
		openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
	} {
		p := openai.ChatCompletionNewParams{
			Model:             "pico",
			Messages:          []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris for 3 days?")},
			Tools:             []openai.ChatCompletionToolUnionParam{weather},
			ToolChoice:        choice,
			ParallelToolCalls: openai.Bool(false),
			Temperature:       openai.Float(1),
			Seed:              openai.Int(11),
			MaxTokens:         openai.Int(200),
			StreamOptions:     openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}
		whole, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		msg := whole.Choices[0].Message
		if whole.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" || msg.ToolCalls[0].ID == "" {
			t.Fatalf("openai-go: %s", whole.RawJSON())
		}
		validateArgs(t, s, "openai-go", msg.ToolCalls[0].Function.Arguments)

		stream := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		got := acc.Choices[0].Message.ToolCalls
		if len(got) != 1 || got[0].Function.Name != "get_weather" || got[0].Function.Arguments != msg.ToolCalls[0].Function.Arguments {
			t.Fatalf("openai-go streamed %+v, non-streamed %+v", got, msg.ToolCalls)
		}
		if acc.Usage.CompletionTokens != whole.Usage.CompletionTokens {
			t.Fatalf("openai-go: streamed usage %d, non-streamed %d", acc.Usage.CompletionTokens, whole.Usage.CompletionTokens)
		}
	}
}
