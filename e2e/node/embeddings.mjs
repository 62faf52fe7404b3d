// Exercises /v1/embeddings with the official OpenAI Node client (embeddings.create) and prints
// one JSON summary: every input shape, both encodings, dimensions, usage, and the errors of bad
// requests (status, param, message).
// Usage: node embeddings.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const out = {};
// With encoding_format given explicitly the SDK leaves base64 as it came: decode it here.
const floats = (e) => {
  if (typeof e !== "string") return Array.from(e);
  const b = Buffer.from(e, "base64");
  return Array.from(new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4));
};
const summary = (r) => ({ vectors: r.data.map((d) => ({ index: d.index, object: d.object, embedding: floats(d.embedding) })), usage: r.usage, model: r.model, object: r.object });

// A string, in the SDK's default encoding (it asks for base64 and decodes it).
out.single = summary(await client.embeddings.create({ model, input: "The quick brown fox" }));
// A batch of strings as floats.
out.batch = summary(await client.embeddings.create({ model, input: ["Hello there", "The quick brown fox", "a"], encoding_format: "float" }));
// Token ids, and a batch of token-id arrays, as base64 explicitly.
out.ids = summary(await client.embeddings.create({ model, input: [5, 6, 7, 8, 9], encoding_format: "base64" }));
out.idsBatch = summary(await client.embeddings.create({ model, input: [[5, 6, 7, 8, 9], [100, 200]] }));
// A Matryoshka prefix.
out.dims = summary(await client.embeddings.create({ model, input: "The quick brown fox", dimensions: 64, encoding_format: "float" }));

const bad = {
  emptyString: { input: "" },
  emptyArray: { input: [] },
  emptyInBatch: { input: ["ok", ""] },
  emptyIDs: { input: [[1, 2], []] },
  tooLong: { input: Array.from({ length: 5000 }, (_, i) => i % 100) },
  badID: { input: [1, 99999] },
  dimsZero: { input: "x", dimensions: 0 },
  dimsTooBig: { input: "x", dimensions: 257 },
  dimsNotTrained: { input: "x", dimensions: 100 },
  wrongType: { input: 5 },
  wrongItem: { input: ["ok", 5] },
  mixedNested: { input: [[1, 2], "x"] },
  badFormat: { input: "x", encoding_format: "int8" },
  noInput: {},
};
out.errors = {};
for (const [name, body] of Object.entries(bad)) {
  try {
    await client.embeddings.create({ model, ...body });
    out.errors[name] = { status: 200 };
  } catch (e) {
    out.errors[name] = { status: e.status ?? -1, param: e.param ?? e.error?.param ?? "", message: e.message };
  }
}
console.log(JSON.stringify(out));
