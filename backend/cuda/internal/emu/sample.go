package emu

import (
	"math"
	"slices"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// maxBias mirrors sampling.MaxBias: a bias at -100 bans a token, one at +100 bans every other.
const maxBias = 100

func samplePrep(m *mem, grid dev.Dim3, a dev.SamplePrepArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	v := int(a.Vocab)
	specs := m.sampleRows(a.Specs, int(a.Rows))
	negInf := float32(math.Inf(-1))
	for i, s := range specs {
		raw := m.f32(a.Logits+uint64(int(s.LogitRow)*v*4), v)
		work := m.f32(a.Work+uint64(i*v*4), v)
		copy(work, raw)
		ids := m.i32(a.BiasIDs+uint64(s.BiasOff)*4, int(s.BiasLen))
		vals := m.f32(a.BiasVals+uint64(s.BiasOff)*4, int(s.BiasLen))
		if s.Forced != 0 {
			for t := range work {
				work[t] = negInf
			}
			for j, id := range ids {
				if vals[j] >= maxBias && id >= 0 && int(id) < v {
					work[id] = raw[id] + vals[j]
				}
			}
		} else {
			for j, id := range ids {
				switch {
				case id < 0 || int(id) >= v:
				case vals[j] <= -maxBias:
					work[id] = negInf
				default:
					work[id] += vals[j]
				}
			}
		}
		if rp := s.RepPenalty; rp != 1 {
			for _, id := range m.i32(a.RepIDs+uint64(s.RepOff)*4, int(s.RepLen)) {
				if id < 0 || int(id) >= v {
					continue
				}
				if l := work[id]; l > 0 {
					work[id] = l / rp
				} else {
					work[id] = l * rp
				}
			}
		}
		if s.FreqPenalty != 0 || s.PresPenalty != 0 {
			gen := m.i32(a.GenIDs+uint64(s.GenOff)*4, int(s.GenLen))
			cnt := m.i32(a.GenCounts+uint64(s.GenOff)*4, int(s.GenLen))
			for j, id := range gen {
				if id >= 0 && int(id) < v {
					work[id] -= s.FreqPenalty*float32(cnt[j]) + s.PresPenalty
				}
			}
		}
		if s.MaskRow >= 0 {
			words := m.u64(a.Masks+uint64(int(s.MaskRow)*int(a.MaskWords)*8), int(a.MaskWords))
			for t := range work {
				if words[t/64]&(1<<(t%64)) == 0 {
					work[t] = negInf
				}
			}
		}
	}
	return nil
}

// Philox4x32 runs ten rounds of Philox-4x32 (Salmon et al., SC'11) on counter ctr with key.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0, m1 = 0xD2511F53, 0xCD9E8D57
		w0, w1 = 0x9E3779B9, 0xBB67AE85
	)
	for range 10 {
		p0 := uint64(m0) * uint64(ctr[0])
		p1 := uint64(m1) * uint64(ctr[2])
		ctr = [4]uint32{uint32(p1>>32) ^ ctr[1] ^ key[0], uint32(p1), uint32(p0>>32) ^ ctr[3] ^ key[1], uint32(p0)}
		key[0] += w0
		key[1] += w1
	}
	return ctr
}

// Uniform is token t's uniform draw in (0, 1) at a request's step: (x + 0.5) / 2^32 in float32.
func Uniform(seedLo, seedHi, step uint32, t int) float32 {
	x := Philox4x32([4]uint32{uint32(t), step, 0, 0}, [2]uint32{seedLo, seedHi})[0]
	return (float32(x>>8) + 0.5) * (1.0 / (1 << 24))
}

// argmaxFinite returns the first index of the largest value that is not NaN, or -1 when every
// value is NaN or -Inf.
func argmaxFinite(x []float32) int {
	best := -1
	for i, v := range x {
		if v != v || math.IsInf(float64(v), -1) {
			continue
		}
		if best < 0 || v > x[best] {
			best = i
		}
	}
	return best
}

// logSoftmax returns the row's maximum and log Σ exp(x - max).
func logSoftmax(x []float32) (mx, logZ float32) {
	mx = float32(math.Inf(-1))
	for _, v := range x {
		if v == v {
			mx = max(mx, v)
		}
	}
	var s float64
	for _, v := range x {
		if v == v {
			s += math.Exp(float64(v - mx))
		}
	}
	return mx, float32(math.Log(s))
}

func samplePick(m *mem, grid dev.Dim3, a dev.SamplePickArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	v, mt := int(a.Vocab), int(a.MaxTop)
	specs := m.sampleRows(a.Specs, int(a.Rows))
	toks := m.i32(a.OutToken, int(a.Rows))
	lps := m.f32(a.OutLogprob, int(a.Rows))
	for i, s := range specs {
		work := m.f32(a.Work+uint64(i*v*4), v)
		raw := m.f32(a.Logits+uint64(int(s.LogitRow)*v*4), v)
		tok := pick(work, s)
		toks[i] = int32(tok)
		mx, logZ := logSoftmax(raw)
		lps[i] = raw[tok] - mx - logZ
		if n := min(int(s.TopLogprobs), mt); n > 0 {
			order := make([]int, v)
			for t := range order {
				order[t] = t
			}
			slices.SortStableFunc(order, func(x, y int) int {
				switch {
				case raw[x] > raw[y]:
					return -1
				case raw[x] < raw[y]:
					return 1
				}
				return 0
			})
			ids := m.i32(a.OutTopIDs+uint64(i*mt*4), mt)
			tl := m.f32(a.OutTopLogprobs+uint64(i*mt*4), mt)
			for j := range n {
				ids[j] = int32(order[j])
				tl[j] = raw[order[j]] - mx - logZ
			}
		}
	}
	return nil
}

// pick chooses a token from processed logits: greedy, or Gumbel-max over the survivors of
// temperature, top-k, top-p and min-p (the sampling package's order).
func pick(work []float32, s dev.SampleRow) int {
	best := argmaxFinite(work)
	if best < 0 {
		return 0
	}
	if s.Temperature == 0 || math.IsInf(float64(work[best]), 1) {
		return best
	}
	invT := 1 / s.Temperature
	type cand struct {
		id    int
		logit float32
	}
	var cs []cand
	for t, l := range work {
		if l == l && !math.IsInf(float64(l), -1) {
			cs = append(cs, cand{t, l})
		}
	}
	slices.SortStableFunc(cs, func(x, y cand) int {
		switch {
		case x.logit > y.logit:
			return -1
		case x.logit < y.logit:
			return 1
		}
		return 0
	})
	if k := int(s.TopK); k > 0 && k < len(cs) {
		cs = cs[:k]
	}
	mx := cs[0].logit
	p := make([]float64, len(cs))
	var sum float64
	for j, c := range cs {
		p[j] = math.Exp(float64((c.logit - mx) * invT))
		sum += p[j]
	}
	keep := len(cs)
	if s.TopP < 1 {
		var acc float64
		for j := range p {
			acc += p[j] / sum
			if acc >= float64(s.TopP) {
				keep = j + 1
				break
			}
		}
	}
	if s.MinP > 0 {
		for j := 1; j < keep; j++ {
			if p[j]/p[0] < float64(s.MinP) {
				keep = j
				break
			}
		}
	}
	bestID, bestKey := cs[0].id, math.Inf(-1)
	for _, c := range cs[:keep] {
		u := Uniform(s.SeedLo, s.SeedHi, s.Step, c.id)
		key := float64((c.logit-mx)*invT) - math.Log(-math.Log(float64(u)))
		if key > bestKey {
			bestID, bestKey = c.id, key
		}
	}
	return bestID
}
