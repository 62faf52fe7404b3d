package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// The workload, identical to the peer's bench.mjs: prompt token i of sequence s is
// (s·7919 + i·104729) mod vocab; prefill times one prompt of prefillLen after a warm-up prefill
// of another; decode bN prefills N sequences with decodePrompt-1 tokens (untimed), then steps
// all N one token at a time, greedy, the first decodeWarmup steps untimed.
const (
	prefillLen   = 512
	decodePrompt = 32
	decodeWarmup = 2
	decodeNew    = 128
)

func promptTokens(n, vocab, seed int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32((seed*7919 + i*104729) % vocab)
	}
	return t
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// workerResult is what one timed run of our engine prints.
type workerResult struct {
	What    string  `json:"what"`
	Batch   int     `json:"batch"`
	Tokens  int     `json:"tokens"`
	Seconds float64 `json:"seconds"`
	TokS    float64 `json:"tok_s"`
	Weights string  `json:"weights"`
}

// runOurs times one workload of our CPU backend on the GGUF at path (bf16Acts: with
// Options.BF16Activations) and prints a workerResult;
// what "check" only loads the model into a backend (untimed).
func runOurs(path, what string, batch int, bf16Acts bool) error {
	m, err := model.LoadGGUF(path)
	if err != nil {
		return err
	}
	if what == "check" {
		be, err := cpu.New(m, backend.Options{NumBlocks: 1})
		if err != nil {
			return err
		}
		return be.Close()
	}
	vocab := m.Config.VocabSize
	ctx := context.Background()
	bs := cpu.DefaultBlockSize
	blocks := func(n int) int { return (n + bs - 1) / bs }
	table := func(s, per int) []int32 {
		t := make([]int32, per)
		for i := range t {
			t[i] = int32(s*per + i)
		}
		return t
	}
	var res workerResult
	switch what {
	case "prefill":
		per := blocks(prefillLen)
		be, err := cpu.New(m, backend.Options{NumBlocks: 2 * per, Tuning: cpu.Tuning{BF16Activations: bf16Acts}})
		if err != nil {
			return err
		}
		defer be.Close()
		for _, s := range []int{1, 0} { // warm-up on sequence 1, timed on sequence 0
			batch := &backend.Batch{Seqs: []backend.Seq{{Tokens: promptTokens(prefillLen, vocab, 1000+s), BlockTable: table(s, per), Logits: true}}}
			t := time.Now()
			out, err := be.Forward(ctx, batch)
			if err != nil {
				return err
			}
			_ = argmax(out[0])
			res = workerResult{What: "prefill", Batch: 1, Tokens: prefillLen, Seconds: time.Since(t).Seconds()}
		}
	case "decode":
		per := blocks(decodePrompt + decodeWarmup + decodeNew)
		be, err := cpu.New(m, backend.Options{NumBlocks: batch * per, Tuning: cpu.Tuning{BF16Activations: bf16Acts}})
		if err != nil {
			return err
		}
		defer be.Close()
		pre := &backend.Batch{}
		step := &backend.Batch{Seqs: make([]backend.Seq, batch)}
		for s := range batch {
			toks := promptTokens(decodePrompt, vocab, s)
			pre.Seqs = append(pre.Seqs, backend.Seq{Tokens: toks[:len(toks)-1], BlockTable: table(s, per)})
			step.Seqs[s] = backend.Seq{Tokens: []int32{toks[len(toks)-1]}, Pos: decodePrompt - 1, BlockTable: table(s, per), Logits: true, Generated: true}
		}
		if _, err := be.Forward(ctx, pre); err != nil {
			return err
		}
		var t time.Time
		for i := range decodeWarmup + decodeNew {
			if i == decodeWarmup {
				t = time.Now()
			}
			out, err := be.Forward(ctx, step)
			if err != nil {
				return err
			}
			for s := range step.Seqs {
				step.Seqs[s].Tokens[0] = argmax(out[s])
				step.Seqs[s].Pos++
			}
		}
		res = workerResult{What: "decode", Batch: batch, Tokens: batch * decodeNew, Seconds: time.Since(t).Seconds()}
	default:
		return fmt.Errorf("unknown workload %q", what)
	}
	res.TokS = float64(res.Tokens) / res.Seconds
	res.Weights = m.Layers[0].QKV.Type.String()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// logitsPrompt is one prompt of the exactness check, in the peer's logits.mjs format.
type logitsPrompt struct {
	InputIDs     []int32   `json:"input_ids"`
	NewTokens    int       `json:"new_tokens,omitempty"`
	LastLogits   []float32 `json:"last_logits,omitempty"`
	GreedyNewIDs []int32   `json:"greedy_new_ids,omitempty"`
}

// runOursLogits writes our last-position logits and greedy continuation for each prompt, in the
// format compare.mjs reads.
// With widen, the weights are first dequantized to float32 (exactly), which isolates the error of
// the quantized kernels' activation rounding.
func runOursLogits(path, promptsPath string, widen bool) error {
	data, err := os.ReadFile(promptsPath)
	if err != nil {
		return err
	}
	var prompts []logitsPrompt
	if err := json.Unmarshal(data, &prompts); err != nil {
		return fmt.Errorf("%s: %w", promptsPath, err)
	}
	m, err := model.LoadGGUF(path)
	if err != nil {
		return err
	}
	if widen {
		if err := model.Quantize(m, quant.F32); err != nil {
			return err
		}
	}
	ctx := context.Background()
	for i := range prompts {
		p := &prompts[i]
		total := len(p.InputIDs) + p.NewTokens
		be, err := cpu.New(m, backend.Options{NumBlocks: total/cpu.DefaultBlockSize + 2})
		if err != nil {
			return err
		}
		table := make([]int32, total/cpu.DefaultBlockSize+2)
		for j := range table {
			table[j] = int32(j)
		}
		out, err := be.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: p.InputIDs, BlockTable: table, Logits: true}}})
		if err != nil {
			return err
		}
		p.LastLogits = slices.Clone(out[0])
		pos := len(p.InputIDs)
		for k := range p.NewTokens {
			id := argmax(out[0])
			p.GreedyNewIDs = append(p.GreedyNewIDs, id)
			if k == p.NewTokens-1 {
				break
			}
			if out, err = be.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{id}, Pos: pos, BlockTable: table, Logits: true, Generated: true}}}); err != nil {
				return err
			}
			pos++
		}
		be.Close()
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"engine": "llmserve", "model": path, "prompts": prompts})
}
