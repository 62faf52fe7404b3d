// Function tools through the official OpenAI Node client: the Responses API (responses.create
// and responses.stream with tool_choice required, named and auto, and a second turn carrying
// the call and its function_call_output) and chat completions with n=3 tool calls, streamed and
// not. Prints one JSON summary for the Go test to check.
// Usage: node responses_tools.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });

const parameters = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
  required: ["city", "days"],
  additionalProperties: false,
};
const tools = [{ type: "function", name: "get_weather", description: "Weather for a city", parameters, strict: true }];
const input = [{ role: "user", content: "What is the weather in Paris for 3 days?" }];
const calls = (r) => r.output.filter((o) => o.type === "function_call")
  .map((o) => ({ id: o.id, call_id: o.call_id, name: o.name, arguments: o.arguments, status: o.status }));
const out = { responses: {}, chat: {} };

// Responses: greedy, whole and streamed (the SDK's own accumulation), which must agree
const base = { model, input, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_output_tokens: 200 };
const whole = await client.responses.create(base);
out.responses.whole = { status: whole.status, calls: calls(whole), usage: whole.usage, types: whole.output.map((o) => o.type) };
const rs = client.responses.stream(base);
const types = [];
let argDeltas = "";
for await (const ev of rs) {
  types.push(ev.type);
  if (ev.type === "response.function_call_arguments.delta") argDeltas += ev.delta;
}
const final = await rs.finalResponse();
out.responses.stream = { status: final.status, calls: calls(final), usage: final.usage, argDeltas, types: [...new Set(types)] };

// at temperature 1, several times: required, named and auto
out.responses.sampled = [];
for (let i = 0; i < 4; i++) {
  for (const tool_choice of ["required", { type: "function", name: "get_weather" }, "auto"]) {
    const r = await client.responses.create({ ...base, tool_choice, temperature: 1, max_output_tokens: tool_choice === "auto" ? 60 : 200 });
    out.responses.sampled.push({ choice: tool_choice, status: r.status, calls: calls(r), text: r.output_text });
  }
}

// a second turn: the first turn's output items and the function's result
const call = whole.output.find((o) => o.type === "function_call");
const turn2 = await client.responses.create({
  model, tools, max_output_tokens: 8, temperature: 0,
  input: [...input, ...whole.output, { type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" }],
});
out.responses.turn2 = { status: turn2.status, text: turn2.output_text, usage: turn2.usage };

// chat completions, n=3 tool calls at temperature 1: per choice index, streamed == whole
const chatBase = {
  model, messages: input, n: 3, temperature: 1, seed: 21, max_tokens: 200, tool_choice: "required", parallel_tool_calls: false,
  tools: [{ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters } }],
};
const cw = await client.chat.completions.create(chatBase);
out.chat.whole = cw.choices.map((c) => ({ index: c.index, finish: c.finish_reason, content: c.message.content,
  calls: (c.message.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.arguments })) }));
out.chat.wholeUsage = cw.usage;
const cs = await client.chat.completions.create({ ...chatBase, stream: true, stream_options: { include_usage: true } });
const streamed = {};
for await (const chunk of cs) {
  if (chunk.usage) out.chat.streamUsage = chunk.usage;
  for (const c of chunk.choices) {
    const s = (streamed[c.index] ??= { index: c.index, finish: null, content: null, calls: [] });
    if (c.delta?.content) s.content = (s.content ?? "") + c.delta.content;
    for (const t of c.delta?.tool_calls ?? []) {
      const k = (s.calls[t.index] ??= { name: "", arguments: "" });
      if (t.function?.name) k.name = t.function.name;
      k.arguments += t.function?.arguments ?? "";
    }
    if (c.finish_reason) s.finish = c.finish_reason;
  }
}
out.chat.streamed = Object.values(streamed).sort((a, b) => a.index - b.index);
console.log(JSON.stringify(out));
