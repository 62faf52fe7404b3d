package runner

import (
	"slices"
	"testing"
)

// TestGate drives the gate through a request's steps and checks what goes out after each.
func TestGate(t *testing.T) {
	const n = 50 // tokens, one per step after the prefill's first
	ones := slices.Repeat([]int{1}, n)
	cases := []struct {
		name     string
		stream   bool
		interval int
		steps    []int // new tokens per step; the last step finishes
		want     []int // sizes of the flushes, in order
	}{
		{"interval 1", true, 1, ones, ones},
		{"interval 3", true, 3, ones, append(append([]int{1}, slices.Repeat([]int{3}, 16)...), 1)},
		{"interval 16", true, 16, ones, []int{1, 16, 16, 16, 1}},
		{"interval beyond the length", true, 1000, ones, []int{1, n - 1}},
		{"interval 0 means 1", true, 0, []int{1, 1, 1}, []int{1, 1, 1}},
		{"not streamed", false, 1, ones, []int{n}},
		{"empty steps hold nothing back", true, 2, []int{0, 1, 0, 1, 1, 0, 1}, []int{1, 2, 1}},
		{"several tokens per step", true, 4, []int{3, 2, 2, 5, 1}, []int{3, 4, 5, 1}},
		{"finish with nothing new", true, 4, []int{1, 1, 0}, []int{1, 1}},
		{"finish at once", true, 4, []int{0}, []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGate(c.stream, c.interval)
			var sizes []int
			var sent, all []int32
			next := int32(0)
			for i, k := range c.steps {
				ids := make([]int32, k)
				lps := make([]float32, k)
				for j := range ids {
					ids[j], lps[j] = next, -float32(next)
					next++
				}
				all = append(all, ids...)
				out, outLps, send := g.push(ids, lps, i == len(c.steps)-1)
				if !send {
					continue
				}
				if len(out) != len(outLps) {
					t.Fatalf("step %d: %d ids, %d logprobs", i, len(out), len(outLps))
				}
				for j := range out {
					if outLps[j] != -float32(out[j]) {
						t.Fatalf("step %d: logprob %v goes with id %d", i, outLps[j], out[j])
					}
				}
				sizes = append(sizes, len(out))
				sent = append(sent, out...)
				if g.holding() {
					g.flushed()
				}
			}
			if !slices.Equal(sizes, c.want) {
				t.Errorf("flush sizes %v, want %v", sizes, c.want)
			}
			if !slices.Equal(sent, all) {
				t.Errorf("sent %v, generated %v", sent, all)
			}
		})
	}
}

// TestGateReturnsStepSlicesWhenNothingIsHeld: with nothing held back, push hands out the step's
// own slices (no copy), and holding is false.
func TestGateReturnsStepSlicesWhenNothingIsHeld(t *testing.T) {
	g := newGate(true, 1)
	ids := []int32{7}
	out, _, send := g.push(ids, nil, false)
	if !send || &out[0] != &ids[0] || g.holding() {
		t.Fatalf("send %v, aliased %v, holding %v", send, &out[0] == &ids[0], g.holding())
	}
}
