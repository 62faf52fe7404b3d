package cpu

import (
	"errors"
	"fmt"

	"github.com/llmserve/llmserve/backend"
)

var _ backend.HiddenStates = (*Backend)(nil)

// HiddenSize is the model's hidden size.
func (b *Backend) HiddenSize() int { return b.cfg.HiddenSize }

// Hidden applies the final norm to the rows of Seq i of the last Forward, which b.x still holds
// (the LM head reads its own normed copy in finish, never writing b.x back), so only the
// sequences that ask pay for it. See backend.HiddenStates.
func (b *Backend) Hidden(i int, dst []float32) ([]float32, error) {
	if b.closed {
		return nil, errors.New("cpu hidden states: backend is closed")
	}
	if i < 0 || i >= len(b.last) {
		return nil, fmt.Errorf("cpu hidden states: seq %d not in the last forward of %d sequences", i, len(b.last))
	}
	h := b.cfg.HiddenSize
	sp := b.last[i]
	dst = grow(dst, sp.n*h)
	for r := range sp.n {
		row := sp.start + r
		rmsNorm(dst[r*h:(r+1)*h], b.x[row*h:(row+1)*h], b.m.Norm, b.cfg.RMSNormEps)
	}
	return dst, nil
}
