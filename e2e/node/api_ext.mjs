// Exercises the issue-13 API with the official OpenAI Node client and prints one JSON summary:
// n choices with logprobs (streamed and not), a batch of prompts with logprobs N, the
// Responses API (plain, streamed, json_schema), /v1/models/{id}, and the ignored-fields header.
// Usage: node api_ext.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const out = {};

// Chat, n=3, logprobs with top 3, streamed: content and logprob entries per choice index.
const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Count." }], max_tokens: 6, temperature: 1, seed: 11, n: 3,
  logprobs: true, top_logprobs: 3, stream: true, stream_options: { include_usage: true }, prompt_cache_key: "k",
});
const streamed = {};
for await (const chunk of stream) {
  if (chunk.usage) out.streamUsage = chunk.usage;
  for (const c of chunk.choices) {
    const s = (streamed[c.index] ??= { content: "", logprobs: 0, tops: [], finish: null });
    s.content += c.delta?.content ?? "";
    for (const e of c.logprobs?.content ?? []) {
      s.logprobs++;
      s.tops.push(e.top_logprobs.length);
    }
    if (c.finish_reason) s.finish = c.finish_reason;
  }
}
out.streamed = streamed;
const whole = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Count." }], max_tokens: 6, temperature: 1, seed: 11, n: 3,
  logprobs: true, top_logprobs: 3,
});
out.whole = whole.choices.map((c) => ({ index: c.index, content: c.message.content, logprobs: c.logprobs.content.length,
  bytesOK: c.logprobs.content.every((e) => Buffer.from(e.bytes).toString("utf8") === e.token || e.token.startsWith("bytes:")) }));
out.wholeUsage = whole.usage;

// Completions: a batch of two prompts, logprobs 2.
const cmpl = await client.completions.create({ model, prompt: ["def f(x):", "import"], max_tokens: 4, temperature: 0, logprobs: 2 });
out.completions = cmpl.choices.map((c) => ({ index: c.index, text: c.text, tokens: c.logprobs.tokens.length,
  top: c.logprobs.top_logprobs.map((d) => Object.keys(d).length), offsets: c.logprobs.text_offset }));
out.completionsUsage = cmpl.usage;

// Responses API.
const resp = await client.responses.create({ model, input: "Say hi.", instructions: "Be brief.", max_output_tokens: 8, temperature: 0 });
out.response = { status: resp.status, text: resp.output_text, usage: resp.usage };
const rs = client.responses.stream({ model, input: [{ role: "user", content: "Say hi." }], instructions: "Be brief.", max_output_tokens: 8, temperature: 0 });
let deltas = "";
const types = [];
let terminal = null;
for await (const ev of rs) {
  types.push(ev.type);
  if (ev.type === "response.output_text.delta") deltas += ev.delta;
  if (ev.response && ev.response.status !== "in_progress") terminal = ev.response;
}
// The SDK's final snapshot keeps the streamed output (its usage is set only by response.completed).
const final = await rs.finalResponse();
out.responseStream = { deltas, text: final.output[0]?.content[0]?.text, usage: terminal?.usage, status: terminal?.status,
  terminalText: terminal?.output[0]?.content[0]?.text, first: types[0], last: types[types.length - 1] };
const js = await client.responses.create({
  model, input: "A user.", max_output_tokens: 48, temperature: 0,
  text: { format: { type: "json_schema", name: "user", strict: true,
    schema: { type: "object", properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 99 } }, required: ["name", "age"] } } },
});
out.responseJSON = { status: js.status, text: js.output_text };

out.model = (await client.models.retrieve(model)).id;
const raw = await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 1, user: "u", metadata: { a: "b" } }).withResponse();
out.ignored = raw.response.headers.get("x-llmserve-ignored-fields");
console.log(JSON.stringify(out));
