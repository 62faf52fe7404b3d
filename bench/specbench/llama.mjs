// llama.mjs: llama.cpp's plain greedy decode (no speculation) of given prompt ids, through the
// llama.cpp peer's node-llama-cpp (its common.mjs, imported from --peer so that node resolves the
// peer's node_modules). Prints one JSON line: the generated ids and the decode rate measured as
// specbench measures ours: tokens after the first over the time from the first to the last.
//
//   node llama.mjs --peer WORK/peer --model M.gguf --prompt P.json --threads 2
//
// P.json is {"ids": [...], "new_tokens": N}.
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const o = {peer: "", model: "", prompt: "", threads: "2"};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!(key in o)) throw new Error(`unknown option ${argv[i]}`);
    o[key] = argv[i + 1];
}
const {loadLlama, info} = await import(pathToFileURL(path.join(o.peer, "common.mjs")).href);
const {ids, new_tokens: n} = JSON.parse(fs.readFileSync(o.prompt, "utf8"));
const threads = Number(o.threads);
const llama = await loadLlama(threads);
const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
const ctx = await model.createContext({contextSize: ids.length + n + 8, batchSize: 512, sequences: 1, threads});
const seq = ctx.getSequence();
// temperature 0 is greedy; yieldEogToken keeps going past an end-of-generation token (ignore EOS).
const gen = seq.evaluate(ids, {temperature: 0, yieldEogToken: true})[Symbol.asyncIterator]();
const out = [];
let first = 0, last = 0;
while (out.length < n) {
    const r = await gen.next();
    if (r.done) throw new Error(`llama.cpp stopped after ${out.length} tokens`);
    out.push(r.value);
    last = performance.now();
    if (out.length === 1) first = last;
}
await gen.return();
const sec = (last - first) / 1000;
process.stdout.write(JSON.stringify({engine: "llama.cpp", release: info(llama).llama_cpp_release, ids: out,
    decode_tokens: n - 1, decode_seconds: sec, tok_s: (n - 1) / sec}) + "\n");
await ctx.dispose();
await model.dispose();
await llama.dispose();
