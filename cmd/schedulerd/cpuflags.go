package main

import (
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/urfave/cli/v3"
)

// cpuFlags are the CPU backend's own settings; the one place this binary names the CPU backend
// (importing it also registers it as "cpu").
type cpuFlags struct {
	// BF16Activations rounds the activations BF16 weights multiply to bf16 (cpu.Tuning).
	BF16Activations bool
	// BatchDependent trades batch invariance for batched-decode speed (cpu.Tuning).
	BatchDependent bool
	// Deterministic makes prompt rows independent of prefill chunking (cpu.Tuning).
	Deterministic bool
}

func (c *cpuFlags) flags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "bf16-activations", Destination: &c.BF16Activations, Sources: cli.EnvVars("BF16_ACTIVATIONS"),
			Usage: "cpu: round the activations that BF16 weights multiply to bf16, as llama.cpp does: faster batched decode and prefill on CPUs with AVX512_BF16, but a request's tokens then depend on the requests batched with it"},
		&cli.BoolFlag{Name: "batch-dependent", Destination: &c.BatchDependent, Sources: cli.EnvVars("BATCH_DEPENDENT"),
			Usage: "cpu and cuda: give up batch invariance for speed: a step's rows share the fastest product for their count (cpu: up to ~2x batched decode of many sequences; cuda: cuBLASLt for decode GEMMs from 8 decode rows, 2.2-16x the built-in kernel's speed at 16-64 rows of an 8B model), so a seeded request's tokens may then change with the requests batched with it"},
		&cli.BoolFlag{Name: "deterministic", Destination: &c.Deterministic, Sources: cli.EnvVars("DETERMINISTIC"),
			Usage: "cpu: also make a prompt's logits independent of how it is cut into prefill chunks (the step budget shared with other requests, prefix-cache hits), so a seeded request's tokens depend on nothing but the request; prefill runs at about 0.75x"},
	}
}

// tuning is what goes into backend.Options.Tuning for --device cpu, and for cuda devices what
// --batch-dependent asks of them (cudaTuning); other devices get nil.
func (c *cpuFlags) tuning(device string) any {
	if device != "cpu" && device != "cpu:0" {
		return cudaTuning(device, c.BatchDependent)
	}
	return &cpu.Tuning{BF16Activations: c.BF16Activations, BatchDependent: c.BatchDependent, Deterministic: c.Deterministic}
}
