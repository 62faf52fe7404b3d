package emu

import (
	"math"
	"slices"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/sampling"
)

// greedyEpsilon mirrors sampling's: a temperature below it is greedy.
const greedyEpsilon = 1e-6

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
		ids := m.i32(a.Ints+uint64(s.BiasOff)*4, int(s.BiasLen))
		vals := m.f32(a.Floats+uint64(s.BiasValOff)*4, int(s.BiasLen))
		if s.Forced != 0 {
			for t := range work {
				work[t] = negInf
			}
			for j, id := range ids {
				if vals[j] >= sampling.MaxBias && id >= 0 && int(id) < v {
					work[id] = raw[id] + vals[j]
				}
			}
		} else {
			for j, id := range ids {
				switch {
				case id < 0 || int(id) >= v:
				case vals[j] <= -sampling.MaxBias:
					work[id] = negInf
				default:
					work[id] += vals[j]
				}
			}
		}
		if rp := s.RepPenalty; rp != 1 {
			for _, id := range m.i32(a.Ints+uint64(s.SeenOff)*4, int(s.SeenLen)) {
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
			gen := m.i32(a.Ints+uint64(s.GenOff)*4, 2*int(s.GenLen))
			for j, id := range gen[:s.GenLen] {
				if id >= 0 && int(id) < v {
					work[id] -= s.FreqPenalty*float32(gen[int(s.GenLen)+j]) + s.PresPenalty
				}
			}
		}
		for _, id := range m.i32(a.Ints+uint64(s.BanOff)*4, int(s.BanLen)) {
			if id >= 0 && int(id) < v {
				work[id] = negInf
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

// argmaxFinite returns the first index of the largest value that is neither NaN nor -Inf, or -1.
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

// logPartition returns the row's maximum and log Σ exp(x - max) over its non-NaN values.
func logPartition(x []float32) (mx, logZ float32) {
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
		var mask []uint64
		if s.MaskRow >= 0 {
			mask = m.u64(a.Masks+uint64(int(s.MaskRow)*int(a.MaskWords)*8), int(a.MaskWords))
		}
		ban := m.i32(a.Ints+uint64(s.BanOff)*4, int(s.BanLen))
		tok := pick(work, s, mask, ban)
		toks[i] = int32(tok)
		mx, logZ := logPartition(raw)
		lps[i] = 0
		if tok >= 0 {
			lps[i] = raw[tok] - mx - logZ
		}
		if n := min(int(s.TopLogprobs), mt, v); n > 0 {
			order := make([]int, v)
			for t := range order {
				order[t] = t
			}
			slices.SortStableFunc(order, func(x, y int) int { return cmpDesc(raw[x], raw[y]) })
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

// cmpDesc orders larger values first (a stable sort then breaks ties by the lower id).
func cmpDesc(x, y float32) int {
	switch {
	case x > y:
		return -1
	case x < y:
		return 1
	}
	return 0
}

// firstAllowed is the lowest id the mask allows and ban does not list, or -1.
func firstAllowed(vocab int, mask []uint64, ban []int32) int {
	for id := range vocab {
		if mask != nil && mask[id/64]&(1<<(id%64)) == 0 {
			continue
		}
		if !slices.Contains(ban, int32(id)) {
			return id
		}
	}
	return -1
}

// pick chooses a token from processed logits as the sampling package does (greedy shortcut,
// temperature, top-k, pruning, top-p measured before min-p, min-p), drawing with
// sampling.Uniform(seed, step) over the kept tokens in id order.
func pick(work []float32, s dev.SampleRow, mask []uint64, ban []int32) int {
	best := argmaxFinite(work)
	if best < 0 {
		return firstAllowed(len(work), mask, ban)
	}
	if s.Temperature < greedyEpsilon || s.TopK == 1 || math.IsInf(float64(work[best]), 1) {
		return best
	}
	invT := 1 / s.Temperature
	mx := work[best]
	floor := mx - float32(math.Log(float64(len(work)))+math.Log(1e7))/invT
	var ids []int
	for t, l := range work {
		if l >= floor {
			ids = append(ids, t)
		}
	}
	if k := int(s.TopK); k > 0 && k < len(ids) {
		slices.SortStableFunc(ids, func(x, y int) int { return cmpDesc(work[x], work[y]) })
		ids = ids[:k]
		slices.Sort(ids)
	}
	weight := func(t int) float64 { return math.Exp(float64((work[t] - mx) * invT)) }
	keep := make(map[int]bool, len(ids))
	switch {
	case s.TopP < 1:
		var total float64
		for _, t := range ids {
			total += weight(t)
		}
		target := float64(s.TopP) * total
		byWeight := slices.Clone(ids)
		slices.SortStableFunc(byWeight, func(x, y int) int { return cmpDesc(work[x], work[y]) })
		var cum float64
		for _, t := range byWeight {
			if s.MinP > 0 && weight(t) < float64(s.MinP) {
				continue
			}
			if cum >= target && len(keep) > 0 {
				break
			}
			keep[t] = true
			cum += weight(t)
		}
	default:
		for _, t := range ids {
			if s.MinP <= 0 || weight(t) >= float64(s.MinP) {
				keep[t] = true
			}
		}
	}
	var total float64
	for _, t := range ids {
		if keep[t] {
			total += weight(t)
		}
	}
	u := sampling.Uniform(uint64(s.SeedHi)<<32|uint64(s.SeedLo), s.Step) * total
	last := best
	for _, t := range ids {
		if !keep[t] {
			continue
		}
		last = t
		u -= weight(t)
		if u < 0 {
			return t
		}
	}
	return last
}
