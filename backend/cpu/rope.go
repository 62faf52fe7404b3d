package cpu

import (
	"math"

	"github.com/llmserve/llmserve/model"
)

// ropeTable caches cos and sin of every (position, frequency) pair seen so far. Row p holds
// HeadDim/2 values; it grows on demand so long contexts cost memory only when used.
type ropeTable struct {
	invFreq  []float32
	cos, sin []float32
	rows     int
}

// newRopeTable caches the rotations of cfg's inverse frequencies (model.Config.RopeInvFreq).
func newRopeTable(cfg model.Config) *ropeTable {
	return &ropeTable{invFreq: cfg.RopeInvFreq()}
}

// ensure extends the table to cover positions [0, n).
func (r *ropeTable) ensure(n int) {
	if n <= r.rows {
		return
	}
	rows := max(n, 2*r.rows, 256)
	half := len(r.invFreq)
	cos := make([]float32, rows*half)
	sin := make([]float32, rows*half)
	copy(cos, r.cos)
	copy(sin, r.sin)
	for p := r.rows; p < rows; p++ {
		for i, f := range r.invFreq {
			// The angle is rounded to float32 first, as the reference's float32 matmul does.
			angle := float64(f * float32(p))
			cos[p*half+i] = float32(math.Cos(angle))
			sin[p*half+i] = float32(math.Sin(angle))
		}
	}
	r.cos, r.sin, r.rows = cos, sin, rows
}

// apply rotates one head vector x (HeadDim floats) to position pos, pairing element i with
// element i+HeadDim/2 (the "rotate_half" convention of Hugging Face checkpoints).
func (r *ropeTable) apply(x []float32, pos int) {
	half := len(r.invFreq)
	cos := r.cos[pos*half : pos*half+half]
	sin := r.sin[pos*half : pos*half+half]
	lo, hi := x[:half], x[half:2*half]
	for i := range half {
		a, b := lo[i], hi[i]
		lo[i] = a*cos[i] - b*sin[i]
		hi[i] = b*cos[i] + a*sin[i]
	}
}
