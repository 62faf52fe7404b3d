// Tool calls through real clients: the official OpenAI Node client (streamed and not) and the
// Vercel AI SDK's generateText (toolChoice 'required' and 'auto') and streamText with tools over
// @ai-sdk/openai-compatible. Prints one JSON summary for the Go test to check.
// Usage: node tools_clients.mjs BASE_URL MODEL
import OpenAI from "openai";
import { generateText, streamText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
      required: ["city", "days"],
      additionalProperties: false,
    },
  },
};
const messages = [{ role: "user", content: "What is the weather in Paris for 3 days?" }];
const out = { openai: {}, ai: {} };

// npm openai: non-streamed, then streamed with the SDK's own accumulation helper
const whole = await client.chat.completions.create({
  model, messages, tools: [weather], tool_choice: "required", parallel_tool_calls: false,
  temperature: 1, seed: 4, max_tokens: 200,
});
out.openai.whole = { finish: whole.choices[0].finish_reason, calls: whole.choices[0].message.tool_calls, usage: whole.usage };
const runner = client.chat.completions.stream({
  model, messages, tools: [weather], tool_choice: "required", parallel_tool_calls: false,
  temperature: 1, seed: 4, max_tokens: 200, stream_options: { include_usage: true },
});
const final = await runner.finalChatCompletion();
out.openai.stream = { finish: final.choices[0].finish_reason, calls: final.choices[0].message.tool_calls, usage: final.usage };

// a second turn carrying the call and its result
const call = whole.choices[0].message.tool_calls[0];
const turn2 = await client.chat.completions.create({
  model, tools: [weather], max_tokens: 8, temperature: 0,
  messages: [...messages, whole.choices[0].message, { role: "tool", tool_call_id: call.id, content: "sunny, 21 C" }],
});
out.openai.turn2 = { finish: turn2.choices[0].finish_reason, usage: turn2.usage };

// Vercel AI SDK
const provider = createOpenAICompatible({ name: "llmserve", baseURL, apiKey: "unused" });
const tools = {
  get_weather: tool({
    description: "Weather for a city",
    inputSchema: z.object({ city: z.string().max(12), days: z.number().int().min(1).max(7) }),
  }),
};
for (const toolChoice of ["required", "auto"]) {
  const r = await generateText({
    model: provider(model), tools, toolChoice, prompt: "What is the weather in Paris for 3 days?",
    temperature: 1, seed: 5, maxOutputTokens: toolChoice === "auto" ? 40 : 200,
  });
  out.ai[toolChoice] = {
    finish: r.finishReason,
    calls: r.toolCalls.map((c) => ({ name: c.toolName, input: c.input, invalid: c.invalid ?? false })),
    text: r.text,
    usage: r.usage,
  };
}
// streamText parses the streamed tool-call deltas itself
{
  const r = streamText({
    model: provider(model), tools, toolChoice: "required", prompt: "What is the weather in Paris for 3 days?",
    temperature: 1, seed: 5, maxOutputTokens: 200,
  });
  const calls = await r.toolCalls;
  out.ai.stream = {
    finish: await r.finishReason,
    calls: calls.map((c) => ({ name: c.toolName, input: c.input, invalid: c.invalid ?? false })),
    usage: await r.usage,
  };
}
console.log(JSON.stringify(out));
