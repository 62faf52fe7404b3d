// Differential oracle for the Go tokenizer: encodes and decodes with the Hugging Face `tokenizers`
// Node bindings (npm `tokenizers`, the same Rust code as the Python package).
// Usage: NODE_PATH=<dir with node_modules> node hfdiff.cjs request.json > response.json
// request: {"tokenizers": {"name": "path/to/tokenizer.json"}, "texts": [...], "idLists": [[...]]}
// response: {"name": {"enc": [{"ids": [...], "idsSpecial": [...]}], "dec": [[decoded, decodedSkip]]}}
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
(async () => {
  const req = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const out = {};
  for (const [name, path] of Object.entries(req.tokenizers)) {
    const t = Tokenizer.fromFile(path);
    const enc = [];
    for (const text of req.texts) {
      const e = await t.encode(text, null, { addSpecialTokens: false });
      const es = await t.encode(text, null, { addSpecialTokens: true });
      enc.push({ ids: Array.from(e.getIds()), idsSpecial: Array.from(es.getIds()) });
    }
    const dec = [];
    for (const ids of req.idLists || []) {
      dec.push([await t.decode(ids, false), await t.decode(ids, true)]);
    }
    out[name] = { enc, dec };
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
