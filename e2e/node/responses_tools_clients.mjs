// Function tools on the Responses API through the Vercel AI SDK's OpenAI provider (whose default
// model API is the Responses API): generateText with toolChoice required and auto, streamText
// with required, and a two-step run whose tool executes, so its result goes back as a
// function_call_output; and LangChain's ChatOpenAI with useResponsesApi: bindTools, invoke =
// stream, and a turn with a ToolMessage. Prints one JSON summary for the Go test to check.
// Usage: node responses_tools_clients.mjs BASE_URL MODEL
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { ToolMessage } from "@langchain/core/messages";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const inputSchema = z.object({ city: z.string().max(12), days: z.number().int().min(1).max(7) });
const tools = { get_weather: tool({ description: "Weather for a city", inputSchema }) };
const prompt = "What is the weather in Paris for 3 days?";
// one call per turn: with parallel calls a random model runs on until maxOutputTokens
const providerOptions = { openai: { parallelToolCalls: false } };
const calls = (r) => r.toolCalls.map((c) => ({ name: c.toolName, input: c.input, invalid: c.invalid ?? false }));
const out = { ai: {} };
for (const toolChoice of ["required", "auto"]) {
  const r = await generateText({ model: openai(model), tools, toolChoice, prompt, providerOptions, temperature: 1, maxRetries: 0,
    maxOutputTokens: toolChoice === "auto" ? 60 : 200 });
  out.ai[toolChoice] = { finish: r.finishReason, calls: calls(r), text: r.text, usage: r.usage };
}
{
  const r = streamText({ model: openai(model), tools, toolChoice: "required", prompt, providerOptions, temperature: 0, maxRetries: 0, maxOutputTokens: 200 });
  out.ai.stream = { finish: await r.finishReason, calls: calls({ toolCalls: await r.toolCalls }), usage: await r.usage };
  const g = await generateText({ model: openai(model), tools, toolChoice: "required", prompt, providerOptions, temperature: 0, maxRetries: 0, maxOutputTokens: 200 });
  out.ai.generate0 = { finish: g.finishReason, calls: calls(g), usage: g.usage };
}
// two steps: the call executes, its result goes back, the model answers in text
{
  const executed = [];
  const r = await generateText({
    model: openai(model), prompt, providerOptions, temperature: 0, maxRetries: 0, maxOutputTokens: 200, stopWhen: stepCountIs(2),
    tools: { get_weather: tool({ description: "Weather for a city", inputSchema, execute: async (a) => { executed.push(a); return "sunny, 21 C"; } }) },
    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none", maxOutputTokens: stepNumber === 0 ? 200 : 8 }),
  });
  out.ai.steps = { steps: r.steps.length, executed, finish: r.finishReason, text: r.text,
    secondInput: r.steps[1]?.usage?.inputTokens ?? 0, firstInput: r.steps[0]?.usage?.inputTokens ?? 0 };
}
// LangChain on the Responses API
{
  const lc = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL }, maxRetries: 0, temperature: 0, maxTokens: 200, useResponsesApi: true })
    .bindTools([{ type: "function", function: { name: "get_weather", description: "Weather for a city",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
        required: ["city", "days"], additionalProperties: false } } }],
      // a named choice: @langchain/openai 1 drops the string modes ("required") on the Responses API
      { tool_choice: "get_weather", parallel_tool_calls: false });
  const msg = await lc.invoke(prompt);
  let acc;
  for await (const chunk of await lc.stream(prompt)) acc = acc ? acc.concat(chunk) : chunk;
  const turn2 = await lc.invoke([["human", prompt], msg,
    new ToolMessage({ tool_call_id: msg.tool_calls[0].id, content: "sunny, 21 C" })]);
  out.langchain = {
    invoke: msg.tool_calls.map((c) => ({ name: c.name, args: c.args })),
    invalid: msg.invalid_tool_calls?.length ?? 0,
    stream: acc.tool_calls.map((c) => ({ name: c.name, args: c.args })),
    turn2: { usage: turn2.usage_metadata, first: msg.usage_metadata },
  };
}
console.log(JSON.stringify(out));
