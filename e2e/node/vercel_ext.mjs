// Exercises the engine with the Vercel AI SDK's OpenAI provider, whose default model API is the
// Responses API, and prints one JSON summary: generateText, streamText, generateObject.
// Usage: node vercel_ext.mjs BASE_URL MODEL
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, generateObject } from "ai";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const out = {};
const opts = { model: openai(model), prompt: "Say hi.", system: "Be brief.", maxOutputTokens: 8, temperature: 0, maxRetries: 0 };
const g = await generateText(opts);
out.generate = { text: g.text, usage: g.usage, finish: g.finishReason };
const s = streamText(opts);
let text = "";
for await (const part of s.textStream) text += part;
out.stream = { text, usage: await s.usage, finish: await s.finishReason };
const o = await generateObject({ model: openai(model), prompt: "A point.", maxOutputTokens: 48, temperature: 0, maxRetries: 0,
  schema: z.object({ x: z.number().int().min(0).max(9), y: z.number().int().min(0).max(9) }) });
out.object = o.object;
const c = await generateText({ ...opts, model: openai.chat(model) });
out.chat = { text: c.text, usage: c.usage };
console.log(JSON.stringify(out));
