package cuda

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/sampling"
)

// sampleCase is one row's spec, named for failures.
type sampleCase struct {
	name string
	spec backend.SampleSpec
	// exact demands the host sampler's very pick; otherwise the pick must be one the host's
	// candidate rules keep (the draw walks the kept tokens in id order, the host in its own).
	exact bool
}

func allowOnly(vocab int, ids ...int32) []uint64 {
	m := make([]uint64, (vocab+63)/64)
	for _, id := range ids {
		m[id/64] |= 1 << (id % 64)
	}
	return m
}

// TestDeviceSamplingMatchesHost runs ForwardSample on the emulated device and compares every
// pick with backend.HostSample over the logits row Forward returns for the same batch.
func TestDeviceSamplingMatchesHost(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		m, ref := loadFixture(t, "qwen3-bf16")
		v := m.Config.VocabSize
		cases := []sampleCase{
			{"greedy with logprobs", backend.SampleSpec{TopP: 1, Logprob: true, TopLogprobs: 5}, true},
			{"mask allows three", backend.SampleSpec{TopP: 1, Mask: allowOnly(v, 7, 300, 511), Logprob: true}, true},
			{"mask allows none", backend.SampleSpec{TopP: 1, Mask: allowOnly(v)}, true},
			{"everything banned but the mask's first", backend.SampleSpec{TopP: 1, Mask: allowOnly(v, 3, 4), Ban: []int32{3}, Temperature: 1}, true},
			{"bias forces two", backend.SampleSpec{TopP: 1, Bias: []sampling.Bias{{ID: 9, Value: 100}, {ID: 10, Value: 100}, {ID: 11, Value: 5}}}, true},
			{"bias bans the best", backend.SampleSpec{TopP: 1, Bias: []sampling.Bias{{ID: 0, Value: -100}, {ID: 600, Value: 3}}}, true},
			{"repetition penalty", backend.SampleSpec{TopP: 1, RepetitionPenalty: 1.7, Seen: []int32{1, 2, 3, 4, 5, 6, 7, 8}}, true},
			{"frequency and presence", backend.SampleSpec{TopP: 1, FrequencyPenalty: 0.8, PresencePenalty: 0.5, Generated: []int32{2, 9}, GenCounts: []int32{3, 1}}, true},
			{"temperature draw", backend.SampleSpec{TopP: 1, Temperature: 0.9, Seed: 42, Step: 3}, true},
			{"temperature and min-p", backend.SampleSpec{TopP: 1, Temperature: 1.3, MinP: 0.05, Seed: 1 << 40, Step: 17}, true},
			{"top-k 1 is greedy", backend.SampleSpec{TopP: 1, Temperature: 1, TopK: 1, Seed: 5}, true},
			{"top-k", backend.SampleSpec{TopP: 1, Temperature: 1, TopK: 20, Seed: 9, Step: 2}, false},
			{"top-p", backend.SampleSpec{TopP: 0.8, Temperature: 0.7, Seed: 77}, false},
			{"top-p with min-p and top-k", backend.SampleSpec{TopP: 0.9, MinP: 0.02, TopK: 50, Temperature: 1, Seed: 123, Step: 9, TopLogprobs: 3, Logprob: true}, false},
		}
		for seed := range uint64(24) {
			cases = append(cases, sampleCase{"seeded draw", backend.SampleSpec{TopP: 1, Temperature: 1.5, Seed: seed * 0x9e3779b97f4a7c15, Step: uint32(seed)}, true})
		}
		b := openOn(t, dv, m, backend.Options{NumBlocks: 256}, Tuning{})
		prompt := ref.Prompts[2].InputIDs
		var batch backend.Batch
		specs := make([]backend.SampleSpec, len(cases))
		for i, c := range cases {
			// each row its own prefix of the prompt, so rows differ; every second one via AllLogits
			n := 1 + i%len(prompt)
			table := []int32{int32(4 * i), int32(4*i + 1), int32(4*i + 2)}
			batch.Seqs = append(batch.Seqs, backend.Seq{Tokens: prompt[:n], BlockTable: table, Logits: true, AllLogits: i%2 == 1})
			specs[i] = c.spec
		}
		called := false
		picks, rows, err := b.ForwardSample(context.Background(), &batch, specs, func() { called = true })
		if err != nil {
			t.Fatal(err)
		}
		if !called {
			t.Fatal("the masks callback was not called")
		}
		host, err := b.Forward(context.Background(), &batch)
		if err != nil {
			t.Fatal(err)
		}
		var scratch sampling.Scratch
		agree, draws := 0, 0
		for _, c := range cases {
			if dv.gpu && c.spec.Temperature > 0 {
				draws++
			}
		}
		for i, c := range cases {
			row := host[i][len(host[i])-v:]
			if batch.Seqs[i].AllLogits {
				if len(rows[i]) != len(batch.Seqs[i].Tokens)*v || !slices.Equal(rows[i], host[i]) {
					t.Errorf("%s: AllLogits rows differ from Forward's", c.name)
				}
			} else if rows != nil && rows[i] != nil {
				t.Errorf("%s: got host rows it did not ask for", c.name)
			}
			var want backend.Pick
			backend.HostSample(row, &specs[i], &scratch, &want)
			got := picks[i]
			// on a GPU, draws use the fast exponential: a draw that lands within rounding of a
			// boundary between two tokens may go either way, so only the rules are checked
			exact := c.exact && (!dv.gpu || c.spec.Temperature == 0)
			if !exact && c.spec.Temperature > 0 && got.Token == want.Token {
				agree++
			}
			if exact && got.Token != want.Token {
				t.Errorf("%s: device picked %d, host %d", c.name, got.Token, want.Token)
			}
			if !exact && c.spec.Mask == nil && len(c.spec.Ban) == 0 && !keptByHost(row, &specs[i], got.Token) {
				t.Errorf("%s: device picked %d, which the host's top-k/top-p/min-p rules drop", c.name, got.Token)
			}
			if specs[i].Logprob && math.Abs(float64(got.Logprob-sampling.LogSoftmaxAt(row, got.Token))) > 1e-4 {
				t.Errorf("%s: logprob %v, host %v", c.name, got.Logprob, sampling.LogSoftmaxAt(row, got.Token))
			}
			if !slices.Equal(got.TopIDs, want.TopIDs) {
				t.Errorf("%s: top ids %v, host %v", c.name, got.TopIDs, want.TopIDs)
			}
			for j := range want.TopLogprobs {
				if math.Abs(float64(got.TopLogprobs[j]-want.TopLogprobs[j])) > 1e-4 {
					t.Errorf("%s: top logprob %d is %v, host %v", c.name, j, got.TopLogprobs[j], want.TopLogprobs[j])
				}
			}
		}
		if 10*agree < 9*draws {
			t.Errorf("only %d of %d draws picked the host's token", agree, draws)
		}
	})
}

// keptByHost reports whether tok survives top-k, top-p and min-p on row (no bias, penalties or
// mask in the cases that use it), by sorting: the definition, not the host's fast path.
func keptByHost(row []float32, s *backend.SampleSpec, tok int32) bool {
	ids := make([]int32, len(row))
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortStableFunc(ids, func(a, b int32) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	if s.TopK > 0 {
		ids = ids[:s.TopK]
	}
	mx := row[ids[0]]
	w := func(id int32) float64 { return math.Exp(float64((row[id] - mx) / s.Temperature)) }
	var total float64
	for _, id := range ids {
		total += w(id)
	}
	var cum float64
	for _, id := range ids {
		if s.MinP > 0 && w(id) < float64(s.MinP) {
			break
		}
		if id == tok {
			return true
		}
		cum += w(id)
		if s.TopP < 1 && cum >= float64(s.TopP)*total {
			return false
		}
	}
	return false
}

// TestSampleSpecRefusals: malformed specs fail the step with a reason.
func TestSampleSpecRefusals(t *testing.T) {
	m, _ := loadFixture(t, "qwen3")
	b := emulated(t, m, backend.Options{NumBlocks: 8}, Tuning{})
	batch := &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{0}, Logits: true}}}
	for _, spec := range []backend.SampleSpec{
		{TopLogprobs: 21},
		{Generated: []int32{1}},
		{Mask: []uint64{1}},
	} {
		if _, _, err := b.ForwardSample(context.Background(), batch, []backend.SampleSpec{spec}, nil); err == nil {
			t.Errorf("spec %+v accepted", spec)
		}
	}
	calls := 0
	if _, _, err := b.ForwardSample(context.Background(), batch, nil, func() { calls++ }); err == nil {
		t.Error("missing specs accepted")
	}
	bad := &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{99}, Logits: true}}}
	if _, _, err := b.ForwardSample(context.Background(), bad, []backend.SampleSpec{{}}, func() { calls++ }); err == nil {
		t.Error("a block outside the pool was accepted")
	}
	if calls != 2 {
		t.Errorf("masks called %d times over two failed steps, want once each", calls)
	}
}
