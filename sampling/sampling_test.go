package sampling

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func seeded(p Params, seed uint64) Params {
	p.Seed = &seed
	return p
}

// logitsOf returns logits whose softmax is probs.
func logitsOf(probs ...float64) []float32 {
	out := make([]float32, len(probs))
	for i, p := range probs {
		out[i] = float32(math.Log(p))
	}
	return out
}

// counts draws n tokens (steps 0..n-1 of s's stream, nothing accepted) from fresh copies of
// logits and tallies them.
func counts(t *testing.T, s *Sampler, logits []float32, allowed []uint64, n int) []int {
	t.Helper()
	got := make([]int, len(logits))
	row := make([]float32, len(logits))
	for i := range n {
		copy(row, logits)
		tok := s.scratch.Sample(row, &s.params, s.History(), nil, allowed, s.seed, uint32(i))
		if tok < 0 || int(tok) >= len(logits) {
			t.Fatalf("Sample returned %d for a %d-token row", tok, len(logits))
		}
		got[tok]++
	}
	return got
}

// chiSquare returns Σ (observed-expected)²/expected for n draws from probs.
func chiSquare(observed []int, probs []float64, n int) float64 {
	var x float64
	for i, p := range probs {
		if p == 0 {
			continue
		}
		e := p * float64(n)
		d := float64(observed[i]) - e
		x += d * d / e
	}
	return x
}

func mask(vocab int, allowed ...int) []uint64 {
	m := make([]uint64, (vocab+63)/64)
	for _, id := range allowed {
		m[id/64] |= 1 << (id % 64)
	}
	return m
}

func TestValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	ok := DefaultParams()
	ok.Temperature, ok.TopP, ok.TopK, ok.MinP = 0, 0.01, 0, 1
	ok.RepetitionPenalty, ok.FrequencyPenalty, ok.PresencePenalty = 0.5, -2, 2
	ok.TopK = MaxTopK
	if err := ok.Validate(); err != nil {
		t.Fatalf("boundary values: %v", err)
	}
	nan := float32(math.NaN())
	cases := []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"negative temperature", func(p *Params) { p.Temperature = -0.1 }, "temperature must be a finite number >= 0"},
		{"NaN temperature", func(p *Params) { p.Temperature = nan }, "temperature must be a finite number >= 0"},
		{"zero top_p", func(p *Params) { p.TopP = 0 }, "top_p must be in (0, 1], got 0"},
		{"top_p above 1", func(p *Params) { p.TopP = 1.5 }, "top_p must be in (0, 1], got 1.5"},
		{"top_k -2", func(p *Params) { p.TopK = -2 }, "top_k must be -1 or 0 (disabled) or in [1, 2147483647], got -2"},
		{"top_k 2^31", func(p *Params) { p.TopK = 1 << 31 }, "top_k must be -1 or 0 (disabled) or in [1, 2147483647], got 2147483648"},
		{"top_k 2^32+1", func(p *Params) { p.TopK = 1<<32 + 1 }, "got 4294967297"},
		{"infinite temperature", func(p *Params) { p.Temperature = float32(math.Inf(1)) }, "temperature must be a finite number >= 0"},
		{"infinite repetition_penalty", func(p *Params) { p.RepetitionPenalty = float32(math.Inf(1)) }, "repetition_penalty must be a finite number > 0"},
		{"negative min_p", func(p *Params) { p.MinP = -0.1 }, "min_p must be in [0, 1]"},
		{"min_p above 1", func(p *Params) { p.MinP = 1.1 }, "min_p must be in [0, 1]"},
		{"zero repetition_penalty", func(p *Params) { p.RepetitionPenalty = 0 }, "repetition_penalty must be a finite number > 0"},
		{"frequency_penalty above 2", func(p *Params) { p.FrequencyPenalty = 2.5 }, "frequency_penalty must be in [-2, 2]"},
		{"presence_penalty below -2", func(p *Params) { p.PresencePenalty = -3 }, "presence_penalty must be in [-2, 2]"},
	}
	for _, tc := range cases {
		p := DefaultParams()
		tc.edit(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	var zero Params
	err := zero.Validate()
	if err == nil || !strings.Contains(err.Error(), "top_p") || !strings.Contains(err.Error(), "repetition_penalty") {
		t.Errorf("zero Params: Validate() = %v, want both top_p and repetition_penalty reported", err)
	}
}

func TestGreedyPicksArgmax(t *testing.T) {
	p := DefaultParams()
	p.Temperature = 0
	s := New(p, nil)
	if got := s.Sample([]float32{0.1, 3, -1, 2.9}, nil); got != 1 {
		t.Fatalf("greedy = %d, want 1", got)
	}
	if got := s.Sample([]float32{1, 5, 5, float32(math.NaN())}, nil); got != 1 {
		t.Fatalf("greedy with a tie = %d, want the lower id 1", got)
	}
}

func TestMaskRespectedGreedy(t *testing.T) {
	p := DefaultParams()
	p.Temperature = 0
	s := New(p, nil)
	logits := []float32{0, 9, 1, 2, 5}
	if got := s.Sample(slices.Clone(logits), mask(5, 0, 2, 3)); got != 3 {
		t.Fatalf("greedy with argmax masked = %d, want 3", got)
	}
	// A vocabulary longer than the mask: tokens past the mask are disallowed.
	long := make([]float32, 130)
	long[129] = 100
	long[5] = 1
	if got := s.Sample(long, []uint64{1 << 5}); got != 5 {
		t.Fatalf("token past the mask chosen: %d, want 5", got)
	}
	// Allowed tokens all at -Inf: still an allowed token.
	inf := float32(math.Inf(-1))
	if got := s.Sample([]float32{3, inf, inf}, mask(3, 1, 2)); got != 1 {
		t.Fatalf("all allowed at -Inf: got %d, want 1", got)
	}
	if got := s.Sample([]float32{3, 2, 1}, mask(3)); got != -1 {
		t.Fatalf("nothing allowed: got %d, want -1", got)
	}
}

func TestMaskRespectedRandom(t *testing.T) {
	vocab := 200
	rng := rand.New(rand.NewPCG(7, 7))
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	top, _ := argmax(logits)
	var allowedIDs []int
	for i := range vocab {
		if i%3 == 0 && int32(i) != top {
			allowedIDs = append(allowedIDs, i)
		}
	}
	allowed := mask(vocab, allowedIDs...)
	configs := map[string]func(*Params){
		"plain":   func(*Params) {},
		"top_k=1": func(p *Params) { p.TopK = 1 },
		"top_k=5": func(p *Params) { p.TopK = 5 },
		"top_p":   func(p *Params) { p.TopP = 0.3 },
		"min_p":   func(p *Params) { p.MinP = 0.9 },
		"hot":     func(p *Params) { p.Temperature = 5 },
		// A negative presence penalty raises the generated (disallowed) argmax further.
		"penalties": func(p *Params) { p.PresencePenalty = -2; p.RepetitionPenalty = 0.5; p.TopK = 3 },
	}
	for name, edit := range configs {
		p := seeded(DefaultParams(), 11)
		edit(&p)
		s := New(p, []int32{top})
		s.Accept(top)
		got := counts(t, s, logits, allowed, 500)
		for id, n := range got {
			if n > 0 && (id%3 != 0 || int32(id) == top) {
				t.Errorf("%s: disallowed token %d drawn %d times", name, id, n)
			}
		}
	}
}

func TestSeedDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	run := func(p Params) []int32 {
		s := New(p, nil)
		out := make([]int32, 50)
		for i := range out {
			out[i] = s.Sample(slices.Clone(logits), nil)
			s.Accept(out[i])
		}
		return out
	}
	p := DefaultParams()
	p.TopP = 0.95
	a, b := run(seeded(p, 42)), run(seeded(p, 42))
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different sequences:\n%v\n%v", a, b)
	}
	if c := run(seeded(p, 43)); slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 gave the same 50 tokens")
	}
	if d, e := run(p), run(p); slices.Equal(d, e) {
		t.Fatalf("two unseeded samplers gave the same 50 tokens")
	}
}

// The chi-square bound is the 0.999 quantile for 3 degrees of freedom; the seed is fixed, so the
// test is deterministic and only fails if the distribution is wrong.
const chiSquare3 = 16.27

func TestDistributionTemperatureOne(t *testing.T) {
	probs := []float64{0.1, 0.2, 0.3, 0.4}
	const n = 40000
	got := counts(t, New(seeded(DefaultParams(), 5), nil), logitsOf(probs...), nil, n)
	if x := chiSquare(got, probs, n); x > chiSquare3 {
		t.Fatalf("counts %v for probs %v: chi-square %.1f > %.1f", got, probs, x, chiSquare3)
	}
}

func TestDistributionTemperatureHalf(t *testing.T) {
	// Temperature 0.5 squares the probabilities before renormalizing.
	base := []float64{0.1, 0.2, 0.3, 0.4}
	want := make([]float64, len(base))
	var z float64
	for i, p := range base {
		want[i] = p * p
		z += p * p
	}
	for i := range want {
		want[i] /= z
	}
	p := seeded(DefaultParams(), 6)
	p.Temperature = 0.5
	const n = 40000
	got := counts(t, New(p, nil), logitsOf(base...), nil, n)
	if x := chiSquare(got, want, n); x > chiSquare3 {
		t.Fatalf("counts %v, want probs %v: chi-square %.1f", got, want, x)
	}
}

func TestTopKOneIsGreedy(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for trial := range 20 {
		logits := make([]float32, 500)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		want, _ := argmax(logits)
		p := seeded(DefaultParams(), uint64(trial))
		p.TopK, p.Temperature = 1, 1.5
		if got := New(p, nil).Sample(logits, nil); got != want {
			t.Fatalf("trial %d: top_k=1 chose %d, argmax is %d", trial, got, want)
		}
	}
}

func TestTopKKeepsTheBestK(t *testing.T) {
	probs := []float64{0.05, 0.3, 0.1, 0.25, 0.3}
	p := seeded(DefaultParams(), 8)
	p.TopK = 3
	const n = 20000
	got := counts(t, New(p, nil), logitsOf(probs...), nil, n)
	want := []float64{0, 0.3 / 0.85, 0, 0.25 / 0.85, 0.3 / 0.85}
	if got[0] != 0 || got[2] != 0 {
		t.Fatalf("top_k=3 drew tokens outside the best three: %v", got)
	}
	if x := chiSquare(got, want, n); x > chiSquare3 {
		t.Fatalf("top_k=3 counts %v, want %v: chi-square %.1f", got, want, x)
	}
}

func TestTopPKeepsSmallestNucleus(t *testing.T) {
	probs := []float64{0.15, 0.5, 0.05, 0.3}
	cases := []struct {
		topP float32
		keep []int
	}{
		{0.4, []int{1}},
		{0.75, []int{1, 3}},
		{0.85, []int{1, 3, 0}},
		{0.99, []int{1, 3, 0, 2}},
	}
	for _, tc := range cases {
		p := seeded(DefaultParams(), 9)
		p.TopP = tc.topP
		const n = 20000
		got := counts(t, New(p, nil), logitsOf(probs...), nil, n)
		var mass float64
		for _, id := range tc.keep {
			mass += probs[id]
		}
		want := make([]float64, len(probs))
		for _, id := range tc.keep {
			want[id] = probs[id] / mass
		}
		for id := range probs {
			if want[id] == 0 && got[id] != 0 {
				t.Errorf("top_p=%v: token %d outside the nucleus drawn %d times", tc.topP, id, got[id])
			}
		}
		if x := chiSquare(got, want, n); x > chiSquare3 {
			t.Errorf("top_p=%v: counts %v, want %v: chi-square %.1f", tc.topP, got, want, x)
		}
	}
}

func TestNucleusTiesGoToLowerID(t *testing.T) {
	s := &Scratch{}
	// Total 2.6, target 1.56: the 1, then the 0.5s in id order until the target is reached.
	s.ids = []int32{0, 1, 2, 3, 4}
	s.weights = []float32{0.5, 1, 0.5, 0.5, 0.1}
	ids, _ := s.nucleus(0.6, 0)
	ids = slices.Clone(ids)
	slices.Sort(ids)
	if !slices.Equal(ids, []int32{0, 1, 2}) {
		t.Fatalf("nucleus = %v, want [0 1 2]", ids)
	}
}

// The histogram nucleus must equal the definition: sort by probability and take the shortest
// prefix whose mass reaches top_p.
func TestNucleusMatchesSortedDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for trial := range 200 {
		n := 1 + rng.IntN(3000)
		s := &Scratch{}
		s.ids, s.weights = make([]int32, n), make([]float32, n)
		for i := range n {
			s.ids[i] = int32(i)
			// Coarse values make ties common; one weight is exactly 1, as in Sample.
			s.weights[i] = float32(math.Exp(-float64(rng.IntN(40)) / 4))
		}
		s.weights[rng.IntN(n)] = 1
		topP := float32(rng.Float64())
		type tw struct {
			id int32
			w  float32
		}
		all := make([]tw, n)
		var total float64
		for i := range n {
			all[i] = tw{s.ids[i], s.weights[i]}
			total += float64(s.weights[i])
		}
		slices.SortFunc(all, func(a, b tw) int {
			if a.w != b.w {
				if a.w > b.w {
					return -1
				}
				return 1
			}
			return int(a.id - b.id)
		})
		var want []int32
		var cum float64
		for _, c := range all {
			if cum >= float64(topP)*total && len(want) > 0 {
				break
			}
			want = append(want, c.id)
			cum += float64(c.w)
		}
		got, _ := s.nucleus(topP, 0)
		got = slices.Clone(got)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (n=%d, top_p=%v): nucleus has %d tokens, sorted definition %d", trial, n, topP, len(got), len(want))
		}
	}
}

func TestMinPThreshold(t *testing.T) {
	probs := []float64{0.5, 0.3, 0.15, 0.05}
	for _, tc := range []struct {
		minP float32
		topP float32
		keep []int
	}{
		{0.35, 1, []int{0, 1}},       // threshold 0.175
		{0.2, 1, []int{0, 1, 2}},     // threshold 0.1
		{0.2, 0.7, []int{0, 1}},      // top-p is the tighter filter
		{0.7, 0.99, []int{0}},        // min-p is the tighter filter
		{0.05, 1, []int{0, 1, 2, 3}}, // threshold 0.025 keeps everything
	} {
		p := seeded(DefaultParams(), 10)
		p.MinP, p.TopP = tc.minP, tc.topP
		got := counts(t, New(p, nil), logitsOf(probs...), nil, 5000)
		for id, n := range got {
			kept := slices.Contains(tc.keep, id)
			if kept && n == 0 || !kept && n != 0 {
				t.Errorf("min_p=%v top_p=%v: token %d drawn %d times, want kept=%v", tc.minP, tc.topP, id, n, kept)
			}
		}
	}
}

// Penalties rewrite the logits in place before the greedy pick, so their effect is visible.
func TestRepetitionPenalty(t *testing.T) {
	p := DefaultParams()
	p.Temperature, p.RepetitionPenalty = 0, 2
	s := New(p, []int32{1, 2, 2, 999}) // 999 is outside the row and ignored
	logits := []float32{1, 2, -2, 3}
	s.Sample(logits, nil)
	if want := []float32{1, 1, -4, 3}; !slices.Equal(logits, want) {
		t.Fatalf("after prompt penalty logits = %v, want %v", logits, want)
	}
	s.Accept(3)
	logits = []float32{1, 2, -2, 1.8}
	if got := s.Sample(logits, nil); got != 0 {
		t.Fatalf("after penalizing generated token 3: chose %d, want 0 (logits %v)", got, logits)
	}
	if want := []float32{1, 1, -4, 0.9}; !slices.Equal(logits, want) {
		t.Fatalf("logits = %v, want %v", logits, want)
	}
}

func TestFrequencyAndPresencePenalties(t *testing.T) {
	p := DefaultParams()
	p.Temperature, p.FrequencyPenalty, p.PresencePenalty = 0, 0.5, 1
	s := New(p, []int32{2}) // the prompt does not count for these penalties
	s.Accept(3)
	s.Accept(3)
	s.Accept(0)
	logits := []float32{1, 2, -2, 3}
	s.Sample(logits, nil)
	if want := []float32{1 - 0.5 - 1, 2, -2, 3 - 2*0.5 - 1}; !slices.Equal(logits, want) {
		t.Fatalf("logits = %v, want %v", logits, want)
	}
	// A negative presence penalty encourages repeats.
	p.FrequencyPenalty, p.PresencePenalty = 0, -2
	s = New(p, nil)
	s.Accept(0)
	if got := s.Sample([]float32{1, 2, -2, 2.5}, nil); got != 0 {
		t.Fatalf("presence -2 should lift token 0 to 3: chose %d", got)
	}
}

func TestExpNonPositive(t *testing.T) {
	for x := float32(0); x > -90; x -= 0.0137 {
		want := math.Exp(float64(x))
		got := float64(expNonPositive(x))
		if x < -87 {
			if got != 0 {
				t.Fatalf("exp(%v) = %v, want 0 below the normal range", x, got)
			}
			continue
		}
		if rel := math.Abs(got-want) / want; rel > 4e-7 {
			t.Fatalf("exp(%v) = %v, want %v (relative error %.2g)", x, got, want, rel)
		}
	}
}

func TestLogprobs(t *testing.T) {
	logits := []float32{1, 3, -2, 3, 0.5}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l))
	}
	for id, l := range logits {
		want := float64(l) - math.Log(z)
		if got := LogSoftmaxAt(logits, int32(id)); math.Abs(float64(got)-want) > 1e-5 {
			t.Errorf("LogSoftmaxAt(%d) = %v, want %v", id, got, want)
		}
	}
	if got := LogSoftmaxAt(logits, 5); !math.IsInf(float64(got), -1) {
		t.Errorf("LogSoftmaxAt out of range = %v, want -Inf", got)
	}
}

// TestLogitBias: +100 restricts the choice to the tokens biased +100 (whatever their logits),
// -100 bans a token even when it is the most likely, and other biases shift the distribution.
func TestLogitBias(t *testing.T) {
	row := func() []float32 { return []float32{5, 1, 0, -1, 3} }
	for seed := range uint64(50) {
		p := DefaultParams()
		p.Seed = &seed
		p.LogitBias = []Bias{{ID: 3, Value: 100}, {ID: 2, Value: 100}, {ID: 0, Value: 50}}
		if tok := New(p, nil).Sample(row(), nil); tok != 2 && tok != 3 {
			t.Fatalf("seed %d: +100 on 2 and 3, sampled %d", seed, tok)
		}
		p.LogitBias = []Bias{{ID: 0, Value: -100}, {ID: 4, Value: -100}}
		if tok := New(p, nil).Sample(row(), nil); tok == 0 || tok == 4 {
			t.Fatalf("seed %d: banned token %d sampled", seed, tok)
		}
	}
	p := DefaultParams()
	p.Temperature = 0
	p.LogitBias = []Bias{{ID: 1, Value: 4.5}}
	if tok := New(p, nil).Sample(row(), nil); tok != 1 {
		t.Fatalf("greedy with +4.5 on token 1 (logit 5.5 > 5): got %d", tok)
	}
	p.LogitBias = []Bias{{ID: 1, Value: 101}}
	if err := p.Validate(); err == nil {
		t.Fatal("bias 101 validated")
	}
}

// TestTopLogprobs checks the top k against a float64 softmax over the whole row.
func TestTopLogprobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, 1000)
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 3)
	}
	row[17] = float32(math.NaN())
	row[18] = float32(math.Inf(-1))
	var z float64
	m := math.Inf(-1)
	for _, l := range row {
		if !math.IsNaN(float64(l)) {
			m = math.Max(m, float64(l))
		}
	}
	for _, l := range row {
		if !math.IsNaN(float64(l)) {
			z += math.Exp(float64(l) - m)
		}
	}
	ids, lps := TopLogprobs(row, 20, nil, nil)
	if len(ids) != 20 {
		t.Fatalf("%d entries", len(ids))
	}
	order := make([]int, len(row))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		la, lb := float64(row[a]), float64(row[b])
		if math.IsNaN(la) {
			la = math.Inf(-1)
		}
		if math.IsNaN(lb) {
			lb = math.Inf(-1)
		}
		return cmp.Compare(lb, la)
	})
	for i, id := range ids {
		if int(id) != order[i] {
			t.Fatalf("rank %d: id %d, want %d", i, id, order[i])
		}
		want := float64(row[id]) - m - math.Log(z)
		if math.Abs(float64(lps[i])-want) > 1e-4 {
			t.Fatalf("rank %d: logprob %v, want %v", i, lps[i], want)
		}
		if got := LogSoftmaxAt(row, id); got != lps[i] {
			t.Fatalf("rank %d: %v differs from LogSoftmaxAt %v", i, lps[i], got)
		}
	}
}
