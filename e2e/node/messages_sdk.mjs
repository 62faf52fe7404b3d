// The Anthropic Messages API through the official npm @anthropic-ai/sdk: messages.create and
// messages.stream (the SDK's own accumulation) for text and for a forced tool_use, which must
// agree; a two-turn tool loop (the tool_use block sent back with its tool_result);
// countTokens; and a bad request as the SDK's typed error. Prints one JSON summary for the Go
// test to check.
// Usage: node messages_sdk.mjs BASE_URL MODEL   (BASE_URL ends in /v1, which the SDK adds itself)
import Anthropic from "@anthropic-ai/sdk";

const [base, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL: base.replace(/\/v1$/, ""), apiKey: "unused", maxRetries: 0, timeout: 120_000 });

const strip = (m) => ({
  content: m.content.map((b) => (b.type === "tool_use" ? { type: b.type, name: b.name, input: b.input } : b)),
  stop_reason: m.stop_reason, stop_sequence: m.stop_sequence,
  usage: { input: m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), output: m.usage.output_tokens },
});
const out = {};
const messages = [{ role: "user", content: "Write a Python function that adds two numbers." }];

// text, greedy: whole and streamed
const textReq = { model, max_tokens: 24, temperature: 0, system: "You write code.", messages };
out.textWhole = strip(await client.messages.create(textReq));
const ts = client.messages.stream(textReq);
let textDeltas = "";
const types = new Set();
ts.on("text", (t) => { textDeltas += t; });
for await (const ev of ts) types.add(ev.type);
out.textStream = strip(await ts.finalMessage());
out.textDeltas = textDeltas;
out.types = [...types];

// count_tokens counts the prompt create ran
out.count = (await client.messages.countTokens({ model, system: textReq.system, messages })).input_tokens;

// a forced tool_use, whole and streamed, then the second turn
const tools = [{
  name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false },
}];
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const toolReq = { model, max_tokens: 64, temperature: 0, tools, tool_choice: { type: "tool", name: "get_weather" }, messages: ask };
const first = await client.messages.create(toolReq);
out.toolWhole = strip(first);
const tstream = client.messages.stream(toolReq);
let partial = "";
tstream.on("inputJson", (delta) => { partial += delta; });
out.toolStream = strip(await tstream.finalMessage());
out.toolPartial = partial;
const use = first.content.find((b) => b.type === "tool_use");
const second = await client.messages.create({
  model, max_tokens: 8, temperature: 0, tools, tool_choice: { type: "none" },
  messages: [...ask, { role: "assistant", content: first.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 C" }] }],
});
out.turn2 = strip(second);

// errors are typed
try {
  await client.messages.create({ model, max_tokens: 0, messages });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message, isBadRequest: e instanceof Anthropic.BadRequestError };
}
console.log(JSON.stringify(out));
