// Streams one chat completion with the official OpenAI Node client and prints a JSON summary:
// the concatenated content, the chunk count, the finish reason and the usage it read.
// Usage: node chat_stream.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Write a Python function that adds two numbers." }],
  max_tokens: 24,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
let content = "";
let chunks = 0;
let finish = null;
let usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    content += c.delta?.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
}
const whole = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Write a Python function that adds two numbers." }],
  max_tokens: 24,
  temperature: 0,
});
console.log(JSON.stringify({ content, chunks, finish, usage, whole: whole.choices[0].message.content, wholeUsage: whole.usage }));
