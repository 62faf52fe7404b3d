// MaskBench driver for the XGrammar peer (WebAssembly build, npm @mlc-ai/web-xgrammar),
// started by `maskbench -xgrammar`. argv: xgr.cjs path, tokenizer.json path, EOS ids
// (comma separated). Reads one job per stdin line: {"schema": "...", "tests": [{"valid": b,
// "ids": [...]}]} (token ids from the Go side's tokenizer, so both engines see the same
// tokens) and answers one JSON line per job with the same figures maskbench measures.
'use strict';
const fs = require('fs');
const readline = require('readline');
const xgr = require(process.argv[2]);
const { TokenizerInfo, GrammarCompiler, GrammarMatcher } = xgr;

(async () => {
  const tj = JSON.parse(fs.readFileSync(process.argv[3]));
  const eos = process.argv[4].split(',').filter(s => s !== '').map(Number);
  const vocab = tj.model.vocab;
  const added = tj.added_tokens || [];
  let n = 0;
  for (const k in vocab) n = Math.max(n, vocab[k] + 1);
  for (const a of added) n = Math.max(n, a.id + 1);
  const enc = new Array(n).fill('');
  for (const k in vocab) enc[vocab[k]] = k;
  for (const a of added) enc[a.id] = a.content;
  const ti = await TokenizerInfo.createTokenizerInfo(enc, 'byte_level', false, n, eos);
  const comp = await GrammarCompiler.createGrammarCompiler(ti, false);
  const allowed = (bm, id) => (bm[id >>> 5] >>> (id & 31)) & 1;
  process.stdout.write(JSON.stringify({ ready: true, vocab: n }) + '\n');

  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (line === '') continue;
    const job = JSON.parse(line);
    const r = { ttfm_us: 0, tbm_us: [], valid_err: 0, invalid_err: 0 };
    try {
      const t0 = performance.now();
      let cg;
      try {
        // Compact separators and no free whitespace, like the documents fed;
        // strictMode off so additional properties follow the schema.
        cg = await comp.compileJSONSchema(job.schema, false, -1, [',', ':'], false);
      } catch (e) {
        r.compile_err = String(e && e.message ? e.message : e).slice(0, 300);
        process.stdout.write(JSON.stringify(r) + '\n');
        continue;
      }
      const m0 = await GrammarMatcher.createGrammarMatcher(cg);
      await m0.getNextTokenBitmask();
      r.ttfm_us = (performance.now() - t0) * 1000;
      m0.dispose();
      for (const tc of job.tests || []) {
        const m = await GrammarMatcher.createGrammarMatcher(cg);
        let ok = true;
        for (const id of tc.ids) {
          const s = performance.now();
          const bm = await m.getNextTokenBitmask();
          const d = (performance.now() - s) * 1000;
          if (tc.valid) r.tbm_us.push(d);
          const a = allowed(bm, id) === 1;
          const acc = m.acceptToken(id);
          if (!a || !acc) { ok = false; break; }
        }
        if (ok) {
          const s = performance.now();
          const bm = await m.getNextTokenBitmask();
          if (tc.valid) r.tbm_us.push((performance.now() - s) * 1000);
          ok = eos.length > 0 && allowed(bm, eos[0]) === 1 && m.acceptToken(eos[0]);
        }
        m.dispose();
        if (tc.valid && !ok) r.valid_err++;
        if (!tc.valid && ok) r.invalid_err++;
      }
      cg.dispose();
    } catch (e) {
      r.crash = String(e && e.message ? e.message : e).slice(0, 300);
    }
    process.stdout.write(JSON.stringify(r) + '\n');
  }
})().catch(e => { process.stderr.write('xgrammar driver: ' + (e && e.stack ? e.stack : e) + '\n'); process.exit(1); });
