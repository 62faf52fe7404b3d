package grammar

import "math/bits"

// Matcher tracks one generation against a Grammar.
type Matcher struct {
	g    *Grammar
	hist []int32 // DFA state after each accepted token; -1 = EOS accepted
}

// NewMatcher starts a generation at the grammar's start.
func (g *Grammar) NewMatcher() *Matcher {
	return &Matcher{g: g, hist: append(make([]int32, 0, 64), g.start)}
}

func (m *Matcher) cur() int32 { return m.hist[len(m.hist)-1] }

// FillMask sets bit i of mask iff token i may come next.
func (m *Matcher) FillMask(mask []uint64) {
	g := m.g
	words := g.vt.words
	s := m.cur()
	if s < 0 {
		clear(mask[:words])
		return
	}
	g.mu.Lock()
	cm := g.states[s].mask
	if cm == nil {
		g.takeScratch()
		cm = g.maskOf(s)
		g.dropScratch()
	}
	acc := g.states[s].accept
	g.mu.Unlock()
	cm.fill(mask[:words])
	if acc {
		for _, e := range g.vt.eos {
			if int(e) < g.vt.n {
				mask[e>>6] |= 1 << (uint(e) & 63)
			}
		}
	}
}

// takeScratch gives g a token list from the vocabulary's pool for a mask
// computation; dropScratch returns it. g.mu is held.
func (g *Grammar) takeScratch() {
	if p, ok := g.vt.toksPool.Get().(*[]int32); ok {
		g.toks = (*p)[:0]
	}
}

func (g *Grammar) dropScratch() {
	t := g.toks
	g.toks = nil
	g.vt.toksPool.Put(&t)
}

// Accept advances by tok; it returns false (and changes nothing) if tok is
// not allowed. Accepting EOS terminates the matcher.
func (m *Matcher) Accept(tok int32) bool {
	g := m.g
	s := m.cur()
	if s < 0 || tok < 0 || int(tok) >= g.vt.n {
		return false
	}
	if g.vt.eosSet[tok] {
		g.mu.Lock()
		acc := g.states[s].accept
		g.mu.Unlock()
		if !acc {
			return false
		}
		m.hist = append(m.hist, -1)
		return true
	}
	bs := g.vt.toks[tok]
	if len(bs) == 0 {
		return false
	}
	return m.AcceptBytes(bs)
}

// AcceptBytes advances over raw bytes (used for forced bytes); it returns
// false and changes nothing if they are not allowed.
func (m *Matcher) AcceptBytes(bs []byte) bool {
	s := m.cur()
	if s < 0 {
		return false
	}
	m.g.mu.Lock()
	for _, c := range bs {
		if s = m.g.step(s, c); s == 0 {
			break
		}
	}
	m.g.mu.Unlock()
	if s == 0 {
		return false
	}
	m.hist = append(m.hist, s)
	return true
}

// CanEnd reports whether EOS is allowed now.
func (m *Matcher) CanEnd() bool {
	s := m.cur()
	if s < 0 {
		return false
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.g.states[s].accept
}

// Done reports whether the matcher terminated or only EOS can follow.
func (m *Matcher) Done() bool {
	s := m.cur()
	if s < 0 {
		return true
	}
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	ds := m.g.states[s]
	return ds.accept && ds.next == [4]uint64{}
}

// Rollback undoes the last n accepted tokens (or AcceptBytes calls).
func (m *Matcher) Rollback(n int) {
	if n > len(m.hist)-1 {
		n = len(m.hist) - 1
	}
	if n > 0 {
		m.hist = m.hist[:len(m.hist)-n]
	}
}

// ForcedBytes returns the bytes that must follow whatever comes next; it is
// empty when there is a choice (or the grammar may end here).
func (m *Matcher) ForcedBytes() []byte { return m.AppendForced(nil, 4096) }

// AppendForced appends to dst the first limit (at most) of the bytes ForcedBytes returns.
func (m *Matcher) AppendForced(dst []byte, limit int) []byte {
	s := m.cur()
	if s < 0 {
		return dst
	}
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(dst)
	for len(dst)-n < limit {
		ds := g.states[s]
		if ds.accept {
			break
		}
		b, ok := singleByte(&ds.next)
		if !ok {
			break
		}
		dst = append(dst, b)
		if s = g.step(s, b); s == 0 {
			return dst[:n]
		}
	}
	return dst
}

// MaxTokenLen is the length in bytes of the vocabulary's longest token.
func (m *Matcher) MaxTokenLen() int { return m.g.vt.maxLen }

// TokenLen is the length in bytes of token tok (0 for EOS, specials and ids out of range).
func (m *Matcher) TokenLen(tok int32) int {
	if tok < 0 || int(tok) >= m.g.vt.n {
		return 0
	}
	return len(m.g.vt.toks[tok])
}

// KeepForcedSpelling narrows mask, filled by FillMask where the next n bytes are forced
// (AppendForced), to one spelling of them: it clears every token of 1 to n bytes except keep.
// Those tokens all spell a prefix of the forced bytes (the grammar admits nothing else), so
// what stays is keep and the tokens that run past the forced bytes (which the grammar admits
// as it would anyway). EOS bits are left alone. Where mask does not hold keep it changes
// nothing and reports false.
func (m *Matcher) KeepForcedSpelling(mask []uint64, n int, keep int32) bool {
	vt := m.g.vt
	if keep < 0 || int(keep) >= vt.n || mask[keep>>6]&(1<<(uint(keep)&63)) == 0 {
		return false
	}
	for w, x := range mask[:vt.words] {
		for x != 0 {
			b := bits.TrailingZeros64(x)
			x &= x - 1
			tok := int32(w<<6 | b)
			if l := len(vt.toks[tok]); l > 0 && l <= n && tok != keep {
				mask[w] &^= 1 << uint(b)
			}
		}
	}
	return true
}

func singleByte(bs *[4]uint64) (byte, bool) {
	found := -1
	for w := 0; w < 4; w++ {
		x := bs[w]
		if x == 0 {
			continue
		}
		if x&(x-1) != 0 || found >= 0 {
			return 0, false
		}
		for k := 0; k < 64; k++ {
			if x&(1<<uint(k)) != 0 {
				found = w*64 + k
			}
		}
	}
	if found < 0 {
		return 0, false
	}
	return byte(found), true
}

// States reports how many DFA states the grammar has built so far.
func (g *Grammar) States() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.states)
}
