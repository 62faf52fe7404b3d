// Exercises the engine with LangChain's ChatOpenAI (chat completions and the Responses API) and
// prints one JSON summary: invoke vs stream, logprobs, structured output, n generations.
// Usage: node langchain.mjs BASE_URL MODEL
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const base = { model, apiKey: "unused", configuration: { baseURL }, maxRetries: 0, temperature: 0, maxTokens: 8 };
const out = {};

const chat = new ChatOpenAI(base);
const msg = await chat.invoke("Say hi.");
out.invoke = { content: msg.content, usage: msg.usage_metadata };
let streamed = "";
let streamUsage = null;
for await (const chunk of await new ChatOpenAI({ ...base, streamUsage: true }).stream("Say hi.")) {
  streamed += chunk.content;
  if (chunk.usage_metadata) streamUsage = chunk.usage_metadata;
}
out.stream = { content: streamed, usage: streamUsage };

const lp = await new ChatOpenAI({ ...base, logprobs: true, topLogprobs: 2 }).invoke("Say hi.");
out.logprobs = (lp.response_metadata.logprobs?.content ?? []).map((e) => e.top_logprobs.length);

const gen = await new ChatOpenAI({ ...base, temperature: 1, n: 3 }).generate([["human", "Count."]]);
out.n = gen.generations[0].length;

const structured = new ChatOpenAI({ ...base, maxTokens: 48 }).withStructuredOutput(
  z.object({ x: z.number().int().min(0).max(9), y: z.number().int().min(0).max(9) }), { method: "jsonSchema", name: "point" });
out.structured = await structured.invoke("A point.");

const resp = await new ChatOpenAI({ ...base, useResponsesApi: true }).invoke("Say hi.");
out.responses = { content: typeof resp.content === "string" ? resp.content : resp.content.map((p) => p.text ?? "").join(""), usage: resp.usage_metadata };
console.log(JSON.stringify(out));
