package e2e

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestMessagesAnthropicSDK runs e2e/node/messages_sdk.mjs (the official npm @anthropic-ai/sdk)
// against pico: text and a forced tool_use, whole and streamed (the SDK's accumulation), equal
// block for block with the same usage; the streamed text deltas and input_json deltas
// concatenate to the whole; countTokens equals the prompt the request ran; a two-turn tool
// loop; a bad request as the SDK's BadRequestError with Anthropic's error type.
func TestMessagesAnthropicSDK(t *testing.T) {
	type block struct {
		Type  string         `json:"type"`
		Text  string         `json:"text"`
		Name  string         `json:"name"`
		Input map[string]any `json:"input"`
	}
	type msg struct {
		Content    []block `json:"content"`
		StopReason string  `json:"stop_reason"`
		Usage      struct{ Input, Output int }
	}
	var res struct {
		TextWhole, TextStream, ToolWhole, ToolStream, Turn2 msg
		TextDeltas, ToolPartial                             string
		Types                                               []string
		Count                                               int
		Error                                               *struct {
			Status       int
			Type         string
			Message      string
			IsBadRequest bool
		}
	}
	out := runNodeClient(t, "messages_sdk.mjs")
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
	if !reflect.DeepEqual(res.TextWhole, res.TextStream) {
		t.Fatalf("text: whole %+v, streamed %+v", res.TextWhole, res.TextStream)
	}
	if len(res.TextWhole.Content) != 1 || res.TextWhole.Content[0].Text != res.TextDeltas || res.TextDeltas == "" {
		t.Fatalf("text deltas %q, whole %+v", res.TextDeltas, res.TextWhole)
	}
	if res.TextWhole.StopReason != "max_tokens" || res.TextWhole.Usage.Output != 24 || res.Count != res.TextWhole.Usage.Input {
		t.Fatalf("text: stop %q usage %+v, count_tokens %d", res.TextWhole.StopReason, res.TextWhole.Usage, res.Count)
	}
	for _, typ := range []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"} {
		if !strings.Contains(strings.Join(res.Types, ","), typ) {
			t.Fatalf("stream lacks %s: %v", typ, res.Types)
		}
	}
	if !reflect.DeepEqual(res.ToolWhole, res.ToolStream) {
		t.Fatalf("tool_use: whole %+v, streamed %+v", res.ToolWhole, res.ToolStream)
	}
	tw := res.ToolWhole
	if tw.StopReason != "tool_use" || len(tw.Content) != 1 || tw.Content[0].Type != "tool_use" || tw.Content[0].Name != "get_weather" {
		t.Fatalf("tool_use: %+v", tw)
	}
	var partial map[string]any
	if err := json.Unmarshal([]byte(res.ToolPartial), &partial); err != nil || !reflect.DeepEqual(partial, tw.Content[0].Input) {
		t.Fatalf("input_json deltas %q, input %v", res.ToolPartial, tw.Content[0].Input)
	}
	if city, ok := tw.Content[0].Input["city"].(string); !ok || len(city) > 12 || len(tw.Content[0].Input) != 1 {
		t.Fatalf("tool input %v does not validate", tw.Content[0].Input)
	}
	if res.Turn2.Usage.Input <= tw.Usage.Input || len(res.Turn2.Content) == 0 || res.Turn2.Content[0].Type != "text" {
		t.Fatalf("second turn: %+v", res.Turn2)
	}
	if e := res.Error; e == nil || e.Status != 400 || e.Type != "invalid_request_error" || !e.IsBadRequest || !strings.Contains(e.Message, "max_tokens") {
		t.Fatalf("bad request: %+v", res.Error)
	}
}
