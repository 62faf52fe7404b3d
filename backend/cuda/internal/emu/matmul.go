package emu

import (
	"errors"
	"fmt"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// matmulAlign is the alignment cuBLASLt plans are asked to work with (cublaslt.Align): the
// emulator refuses what a GPU plan could not take.
const matmulAlign = 16

// MatmulLib names the emulated library GEMM, or says it was switched off (NoMatmul).
func (d *Device) MatmulLib() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.noMatmul {
		return "", errors.New("emu: the library GEMM is switched off (emu.Device.NoMatmul)")
	}
	return "emulated cuBLASLt (Go reference)", nil
}

// NoMatmul makes the device report no library GEMM, as a GPU without cuBLASLt does.
func (d *Device) NoMatmul() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noMatmul = true
}

// Matmul runs the library GEMM's reference now, or records it while capturing.
func (d *Device) Matmul(a dev.MatmulArgs) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.noMatmul {
		return errors.New("emu: matmul: the library GEMM is switched off")
	}
	if a.M == 0 {
		a.M = 1 // a shape check: the row count plays no part in it
		return checkMatmul(a)
	}
	l := launch{matmul: &a}
	if d.capture != nil {
		d.capture.launches = append(d.capture.launches, l)
		return nil
	}
	return d.run(l)
}

// matmul is cuBLASLt's BF16 GEMM as the CUDA backend's plans describe it (dev.MatmulArgs):
// bf16 operands widened exactly, products and sums in f32 in k order.
func matmul(m *mem, a dev.MatmulArgs) error {
	if err := checkMatmul(a); err != nil {
		return err
	}
	w := m.u16(a.W, a.N*a.K)
	wf := make([]float32, len(w))
	for i, v := range w {
		wf[i] = BF16(v)
	}
	xr := make([]float32, a.K)
	for r := range a.M {
		for k, v := range m.u16(a.X+uint64(r*a.Ldx*2), a.K) {
			xr[k] = BF16(v)
		}
		out := m.f32(a.Out+uint64(r*a.Ldo*4), a.N)
		for n := range a.N {
			row := wf[n*a.K : (n+1)*a.K]
			var s float32
			for k, x := range xr {
				s += x * row[k]
			}
			if a.Accumulate {
				out[n] += s
			} else {
				out[n] = s
			}
		}
	}
	return nil
}

// checkMatmul refuses what a GPU plan could not take: cublaslt.Shape.Check's rules and
// misaligned operands.
func checkMatmul(a dev.MatmulArgs) error {
	switch {
	case a.M <= 0 || a.N <= 0 || a.K <= 0:
		return fmt.Errorf("shape M=%d N=%d K=%d", a.M, a.N, a.K)
	case a.Ldx < a.K || a.Ldo < a.N:
		return fmt.Errorf("leading dimensions %d, %d below K=%d, N=%d", a.Ldx, a.Ldo, a.K, a.N)
	case (2*a.K)%matmulAlign != 0 || (2*a.Ldx)%matmulAlign != 0 || (4*a.Ldo)%matmulAlign != 0:
		return fmt.Errorf("rows of K=%d, Ldx=%d (bf16) or Ldo=%d (f32) are not %d-byte multiples", a.K, a.Ldx, a.Ldo, matmulAlign)
	case a.Out%matmulAlign != 0 || a.X%matmulAlign != 0 || a.W%matmulAlign != 0:
		return fmt.Errorf("operands %#x, %#x, %#x are not %d-byte aligned", a.Out, a.X, a.W, matmulAlign)
	}
	return nil
}

func castBF16(m *mem, grid dev.Dim3, a dev.CastArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	rows, k, ldx := int(a.Rows), int(a.K), int(a.Ldx)
	if ldx < k {
		return fmt.Errorf("ldx %d below k=%d", ldx, k)
	}
	out := m.u16(a.Out, rows*k)
	for r := range rows {
		for i, v := range m.f32(a.X+uint64(r*ldx*4), k) {
			out[r*k+i] = ToBF16(v)
		}
	}
	return nil
}
