package emu

import (
	"fmt"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/quant"
)

// The decode GEMMs' references follow the kernels' order of operations: per output column, each
// of a warp's 32 lanes sums its share of k in f32, then the lanes are combined by the butterfly
// warp_sum does (lane l adds lane l^o for o = 16, 8, 4, 2, 1; lane 0's sum is the result). The
// GPU may fuse a multiply and an add where these round twice, so they agree to a few ulps.

// butterfly is warp_sum's result in lane 0.
func butterfly(lanes *[32]float32) float32 {
	v := *lanes
	for o := 16; o > 0; o >>= 1 {
		var next [32]float32
		for l := range 32 {
			next[l] = v[l] + v[l^o]
		}
		v = next
	}
	return v[0]
}

// gemvCheck validates a decode GEMM's shape and grid and returns its rows' activations and
// outputs.
func gemvCheck(m *mem, grid dev.Dim3, a dev.GemvArgs, kMult int) (xs, outs [][]float32, err error) {
	M, N, K := int(a.M), int(a.N), int(a.K)
	g := dev.GemvGrid(M, N)
	if err := needGrid(grid, int(g[0]), int(g[1]), 1); err != nil {
		return nil, nil, err
	}
	if K%kMult != 0 || a.Ldx%4 != 0 || a.Ldx < a.K || a.Ldo < a.N {
		return nil, nil, fmt.Errorf("decode gemm: k=%d (a multiple of %d), ldx %d (a multiple of 4, >= k), ldo %d (>= n=%d)", K, kMult, a.Ldx, a.Ldo, N)
	}
	for i := range M {
		xs = append(xs, m.f32(a.X+uint64(i*int(a.Ldx)*4), K))
		outs = append(outs, m.f32(a.Out+uint64(i*int(a.Ldo)*4), N))
	}
	return xs, outs, nil
}

func store(o []float32, n int, v float32, acc int32) {
	if acc != 0 {
		o[n] += v
	} else {
		o[n] = v
	}
}

func gemvBF16(m *mem, grid dev.Dim3, a dev.GemvArgs) error {
	xs, outs, err := gemvCheck(m, grid, a, 8)
	if err != nil {
		return err
	}
	K := int(a.K)
	xr := make([][]float32, len(xs))
	for i, x := range xs {
		xr[i] = make([]float32, K)
		for k, v := range x {
			xr[i][k] = RoundBF16(v)
		}
	}
	for n := range int(a.N) {
		w := m.u16(a.W+uint64(n*K*2), K)
		for i, x := range xr {
			var lanes [32]float32
			for l := range 32 {
				var s float32
				for k0 := 8 * l; k0 < K; k0 += 256 {
					for j := range 8 {
						s += x[k0+j] * BF16(w[k0+j])
					}
				}
				lanes[l] = s
			}
			store(outs[i], n, butterfly(&lanes), a.Accumulate)
		}
	}
	return nil
}

func gemvQ8_0(m *mem, grid dev.Dim3, a dev.GemvArgs) error {
	xs, outs, err := gemvCheck(m, grid, a, 32)
	if err != nil {
		return err
	}
	K := int(a.K)
	nb := K / 32
	var q [32]float32
	for n := range int(a.N) {
		row := m.bytes(a.W+uint64(n*nb*34), nb*34)
		for i, x := range xs {
			var lanes [32]float32
			for l := range 32 {
				var acc float32
				for b := l; b < nb; b += 32 {
					blk := row[b*34 : (b+1)*34]
					d := quant.FromF16(uint16(blk[0]) | uint16(blk[1])<<8)
					for j := range 32 {
						q[j] = float32(int8(blk[2+j]))
					}
					var s float32
					for j := range 32 {
						s += x[b*32+j] * q[j]
					}
					acc += d * s
				}
				lanes[l] = acc
			}
			store(outs[i], n, butterfly(&lanes), a.Accumulate)
		}
	}
	return nil
}

func gemvQ4_K(m *mem, grid dev.Dim3, a dev.GemvArgs) error {
	xs, outs, err := gemvCheck(m, grid, a, 256)
	if err != nil {
		return err
	}
	K := int(a.K)
	nsb := K / 256
	for n := range int(a.N) {
		row := m.bytes(a.W+uint64(n*nsb*144), nsb*144)
		for i, x := range xs {
			var lanes [32]float32
			for l := range 32 {
				j, h := (l&7)>>1, l&1
				var acc float32
				for sb := l >> 3; sb < nsb; sb += 4 {
					blk := row[sb*144 : (sb+1)*144]
					d := quant.FromF16(uint16(blk[0]) | uint16(blk[1])<<8)
					dmin := quant.FromF16(uint16(blk[2]) | uint16(blk[3])<<8)
					sc1, m1 := quant.ScaleMinK4(2*j, blk[4:16])
					sc2, m2 := quant.ScaleMinK4(2*j+1, blk[4:16])
					d1, dm1 := d*float32(sc1), dmin*float32(m1)
					d2, dm2 := d*float32(sc2), dmin*float32(m2)
					qs := blk[16+32*j+16*h : 16+32*j+16*h+16]
					e1 := sb*256 + 64*j + 16*h
					xa, xb := x[e1:e1+16], x[e1+32:e1+48]
					var sq1, sx1, sq2, sx2 float32
					for t, qb := range qs {
						sq1 += xa[t] * float32(qb&15)
						sx1 += xa[t]
						sq2 += xb[t] * float32(qb>>4)
						sx2 += xb[t]
					}
					acc += float32(d1*sq1) - float32(dm1*sx1)
					acc += float32(d2*sq2) - float32(dm2*sx2)
				}
				lanes[l] = acc
			}
			store(outs[i], n, butterfly(&lanes), a.Accumulate)
		}
	}
	return nil
}

// qType checks a quantized kernel's type argument.
func qType(t int32) (quant.Type, error) {
	switch qt := quant.Type(t); qt {
	case quant.Q8_0, quant.Q4_K:
		return qt, nil
	default:
		return 0, fmt.Errorf("quantized kernel: type %d is not Q8_0 (8) or Q4_K (12)", t)
	}
}

func gemmQ(m *mem, grid dev.Dim3, a dev.GemmQArgs) error {
	M, N, K := int(a.M), int(a.N), int(a.K)
	if err := needGrid(grid, (N+63)/64, (M+63)/64, 1); err != nil {
		return err
	}
	qt, err := qType(a.QType)
	if err != nil {
		return err
	}
	rb, err := qt.RowBytes(K)
	if err != nil {
		return fmt.Errorf("gemm_q: %w", err)
	}
	if a.Ldx < a.K || a.Ldo < a.N {
		return fmt.Errorf("leading dimensions %d, %d below K=%d, N=%d", a.Ldx, a.Ldo, K, N)
	}
	xs := make([][]float32, M)
	outs := make([][]float32, M)
	for i := range M {
		xs[i] = m.f32(a.X+uint64(i*int(a.Ldx)*4), K)
		outs[i] = m.f32(a.Out+uint64(i*int(a.Ldo)*4), N)
	}
	wr := make([]float32, K)
	for n := range N {
		if err := quant.Dequantize(qt, m.bytes(a.W+uint64(n*rb), rb), wr); err != nil {
			return err
		}
		for i, x := range xs {
			var s float32
			for k, v := range wr {
				s += x[k] * v
			}
			store(outs[i], n, s, a.Accumulate)
		}
	}
	return nil
}

func embedQ(m *mem, grid dev.Dim3, a dev.EmbedQArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	qt, err := qType(a.QType)
	if err != nil {
		return err
	}
	h := int(a.H)
	rb, err := qt.RowBytes(h)
	if err != nil {
		return fmt.Errorf("embed_q: %w", err)
	}
	ids := m.i32(a.IDs, int(a.Rows))
	out := m.f32(a.Out, int(a.Rows)*h)
	for r, id := range ids {
		if err := quant.Dequantize(qt, m.bytes(a.Table+uint64(int(id)*rb), rb), out[r*h:(r+1)*h]); err != nil {
			return err
		}
	}
	return nil
}
