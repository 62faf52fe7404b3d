package model

import "slices"

// EOSTokenIDsIn is EOSTokenIDs for a directory that may hold only a tokenizer: config.json is
// read if present, and a directory with neither file has no EOS ids.
func EOSTokenIDsIn(dir string) []int32 {
	cfg, _ := LoadConfig(dir) // a tokenizer-only dir has no config.json
	eos, _ := EOSTokenIDs(dir, cfg)
	return eos
}

// ConstraintEOS is the ids that end a constrained output: the model's EOS ids and the
// tokenizer's own eos_token (tok.EOS), each once. A grammar lets any of them end a document
// that is complete, so a model that stops with either one is not forced to go on.
func ConstraintEOS(modelEOS []int32, tok interface{ EOS() (int32, bool) }) []int32 {
	eos := slices.Clone(modelEOS)
	if id, ok := tok.EOS(); ok && !slices.Contains(eos, id) {
		eos = append(eos, id)
	}
	return eos
}
