// Package tokseq defines the deterministic token-id sequences that the bare SSE server emits and
// the load generator checks, so a stream can be verified id by id (no gap, duplicate or
// cross-talk between streams) without a model.
package tokseq

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind says how a Sequence picks its first id.
type Kind int

const (
	// Affine sequences are the same for every request: id_i = (Start + Step*i) mod Mod.
	Affine Kind = iota
	// PromptKeyed sequences start from the request's last prompt token id (0 for text
	// prompts): id_i = (key + Step*(i+1)) mod Mod. Different prompts give different streams,
	// so ids delivered to the wrong stream are caught.
	PromptKeyed
)

// Sequence is a deterministic formula for the i-th generated token id of a request.
type Sequence struct {
	Kind  Kind
	Start int64 // Affine only
	Step  int64
	Mod   int64 // > 0
}

// Parse reads "affine:START,STEP,MOD" or "prompt:STEP,MOD".
func Parse(s string) (Sequence, error) {
	name, args, ok := strings.Cut(s, ":")
	if !ok {
		return Sequence{}, fmt.Errorf("sequence %q: want affine:START,STEP,MOD or prompt:STEP,MOD", s)
	}
	parts := strings.Split(args, ",")
	nums := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			return Sequence{}, fmt.Errorf("sequence %q: argument %d: %w", s, i+1, err)
		}
		nums[i] = n
	}
	var seq Sequence
	switch {
	case name == "affine" && len(nums) == 3:
		seq = Sequence{Kind: Affine, Start: nums[0], Step: nums[1], Mod: nums[2]}
	case name == "prompt" && len(nums) == 2:
		seq = Sequence{Kind: PromptKeyed, Step: nums[0], Mod: nums[1]}
	default:
		return Sequence{}, fmt.Errorf("sequence %q: want affine:START,STEP,MOD or prompt:STEP,MOD", s)
	}
	if seq.Mod <= 0 || seq.Mod > 1<<31 {
		return Sequence{}, fmt.Errorf("sequence %q: modulus %d out of range (1..2^31)", s, seq.Mod)
	}
	return seq, nil
}

// String returns the form Parse reads.
func (s Sequence) String() string {
	if s.Kind == PromptKeyed {
		return fmt.Sprintf("prompt:%d,%d", s.Step, s.Mod)
	}
	return fmt.Sprintf("affine:%d,%d,%d", s.Start, s.Step, s.Mod)
}

// At returns the i-th (0-based) generated id of a request whose prompt key is key.
func (s Sequence) At(key int64, i int) int32 {
	var v int64
	if s.Kind == PromptKeyed {
		v = key + s.Step*int64(i+1)
	} else {
		v = s.Start + s.Step*int64(i)
	}
	v %= s.Mod
	if v < 0 {
		v += s.Mod
	}
	return int32(v)
}
