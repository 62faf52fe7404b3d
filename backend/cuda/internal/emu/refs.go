package emu

import (
	"fmt"
	"math"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// ref is a kernel's Go reference: it runs the whole grid.
type ref func(m *mem, grid dev.Dim3, args []byte) error

// refs is indexed by kernel.
var refs = [dev.NumKernels]ref{
	dev.KEmbed:       wrap(embed),
	dev.KRMSNorm:     wrap(rmsNorm),
	dev.KGemm:        wrap(gemm),
	dev.KQKVPost:     wrap(qkvPost),
	dev.KAttnDecode:  wrap(attnDecode),
	dev.KAttnMerge:   wrap(attnMerge),
	dev.KAttnPrefill: wrap(attnPrefill),
	dev.KSwiGLU:      wrap(swiGLU),
	dev.KResidualAdd: wrap(residualAdd),
	dev.KSamplePrep:  wrap(samplePrep),
	dev.KSamplePick:  wrap(samplePick),
	dev.KFillBF16:    wrap(fillBF16),
	dev.KGemv:        wrap(gemvBF16),
	dev.KGemvQ8_0:    wrap(gemvQ8_0),
	dev.KGemvQ4_K:    wrap(gemvQ4_K),
	dev.KGemmQ:       wrap(gemmQ),
	dev.KEmbedQ:      wrap(embedQ),
	dev.KCastBF16:    wrap(castBF16),
}

// wrap decodes the packed arguments for a typed reference.
func wrap[T any](fn func(m *mem, grid dev.Dim3, a T) error) ref {
	return func(m *mem, grid dev.Dim3, args []byte) error {
		a, err := dev.Unpack[T](args)
		if err != nil {
			return err
		}
		return fn(m, grid, a)
	}
}

// BF16 widens a bfloat16 to float32.
func BF16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// ToBF16 rounds a float32 to the nearest bfloat16, ties to even (NaN stays NaN).
func ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// RoundBF16 is ToBF16 widened back.
func RoundBF16(f float32) float32 { return BF16(ToBF16(f)) }

func needGrid(grid dev.Dim3, x, y, z int) error {
	if int(grid[0]) < x || int(grid[1]) < y || int(grid[2]) < z {
		return fmt.Errorf("grid %v does not cover (%d,%d,%d)", grid, x, y, z)
	}
	return nil
}

func embed(m *mem, grid dev.Dim3, a dev.EmbedArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	h := int(a.H)
	ids := m.i32(a.IDs, int(a.Rows))
	out := m.f32(a.Out, int(a.Rows)*h)
	for r, id := range ids {
		if a.TableF32 != 0 {
			copy(out[r*h:(r+1)*h], m.f32(a.Table+uint64(id)*uint64(h)*4, h))
			continue
		}
		row := m.u16(a.Table+uint64(id)*uint64(h)*2, h)
		for i, v := range row {
			out[r*h+i] = BF16(v)
		}
	}
	return nil
}

// rmsNormRow is the normalisation the CPU backend does: the mean square in float64, then the
// float32 scaling x·r first, then ·w.
func rmsNormRow(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = w[i] * (v * r)
	}
}

func rmsNorm(m *mem, grid dev.Dim3, a dev.RMSNormArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	h := int(a.H)
	w := m.f32(a.W, h)
	var idx []int32
	if a.RowIdx != 0 {
		idx = m.i32(a.RowIdx, int(a.Rows))
	}
	tmp := make([]float32, h)
	for r := range int(a.Rows) {
		src := r
		if idx != nil {
			src = int(idx[r])
		}
		rmsNormRow(tmp, m.f32(a.X+uint64(src*h*4), h), w, a.Eps)
		copy(m.f32(a.Out+uint64(r*h*4), h), tmp)
	}
	return nil
}

func gemm(m *mem, grid dev.Dim3, a dev.GemmArgs) error {
	M, N, K := int(a.M), int(a.N), int(a.K)
	if err := needGrid(grid, (N+63)/64, (M+63)/64, 1); err != nil {
		return err
	}
	if a.Ldx < a.K || a.Ldo < a.N {
		return fmt.Errorf("leading dimensions %d, %d below K=%d, N=%d", a.Ldx, a.Ldo, K, N)
	}
	// the activations, rounded to bf16 unless the weights are f32, once
	xs := make([]float32, M*K)
	for i := range M {
		x := m.f32(a.X+uint64(i*int(a.Ldx)*4), K)
		for k, v := range x {
			if a.WF32 == 0 {
				v = RoundBF16(v)
			}
			xs[i*K+k] = v
		}
	}
	outs := make([][]float32, M)
	for i := range M {
		outs[i] = m.f32(a.Out+uint64(i*int(a.Ldo)*4), N)
	}
	var wf32 []float32
	var wbf []uint16
	if a.WF32 != 0 {
		wf32 = m.f32(a.W, N*K)
	} else {
		wbf = m.u16(a.W, N*K)
	}
	wr := make([]float32, K)
	for n := range N {
		if wf32 != nil {
			copy(wr, wf32[n*K:(n+1)*K])
		} else {
			for k, v := range wbf[n*K : (n+1)*K] {
				wr[k] = BF16(v)
			}
		}
		for i := range M {
			x := xs[i*K : (i+1)*K]
			var s float32
			for k, v := range wr {
				s += x[k] * v
			}
			if a.Accumulate != 0 {
				outs[i][n] += s
			} else {
				outs[i][n] = s
			}
		}
	}
	return nil
}

func qkvPost(m *mem, grid dev.Dim3, a dev.QKVPostArgs) error {
	nh, nkv, hd := int(a.NumHeads), int(a.NumKVHeads), int(a.HeadDim)
	if err := needGrid(grid, int(a.Rows), nh+2*nkv, 1); err != nil {
		return err
	}
	stride := (nh + 2*nkv) * hd
	half := hd / 2
	bias := m.opt(a.Bias, stride)
	qn, kn := m.opt(a.QNorm, hd), m.opt(a.KNorm, hd)
	pos := m.i32(a.Pos, int(a.Rows))
	seq := m.i32(a.RowSeq, int(a.Rows))
	bs := int(a.BlockSize)
	for r := range int(a.Rows) {
		row := m.f32(a.QKV+uint64(r*stride*4), stride)
		for i, b := range bias {
			row[i] += b
		}
		p := int(pos[r])
		blk := m.i32(a.Tables+uint64((int(seq[r])*int(a.MaxBlocks)+p/bs)*4), 1)[0]
		for h := range nh + 2*nkv {
			head := row[h*hd : (h+1)*hd]
			if h < nh+nkv {
				w := qn
				if h >= nh {
					w = kn
				}
				if w != nil {
					rmsNormRow(head, head, w, a.Eps)
				}
				cs, sn := m.f32(a.RopeCos+uint64(p*half*4), half), m.f32(a.RopeSin+uint64(p*half*4), half)
				for i := range half {
					c, s := cs[i], sn[i]
					x0, x1 := head[i], head[i+half]
					head[i] = x0*c - x1*s
					head[i+half] = x1*c + x0*s
				}
			}
			if h < nh {
				continue
			}
			cache, kh := a.KCache, h-nh
			if h >= nh+nkv {
				cache, kh = a.VCache, h-nh-nkv
			}
			at := uint64(((int(blk)*nkv+kh)*bs + p%bs) * hd)
			if a.KVF32 != 0 {
				copy(m.f32(cache+at*4, hd), head)
				continue
			}
			dst := m.u16(cache+at*2, hd)
			for i, v := range head {
				dst[i] = ToBF16(v)
			}
		}
	}
	return nil
}

// kvCache is one layer's K or V cache as a kernel sees it.
type kvCache struct {
	p   uint64
	f32 bool
}

// kvRow returns position p's key or value vector of KV head g through a block table, widened.
func kvRow(m *mem, c kvCache, table []int32, nkv, bs, hd, g, p int) []float32 {
	blk := int(table[p/bs])
	at := uint64(((blk*nkv+g)*bs + p%bs) * hd)
	if c.f32 {
		return m.f32(c.p+at*4, hd)
	}
	row := m.u16(c.p+at*2, hd)
	out := make([]float32, hd)
	for i, v := range row {
		out[i] = BF16(v)
	}
	return out
}

// scoresRange returns q·k·scale over positions [lo, hi) of one sequence.
func scoresRange(m *mem, q []float32, cache kvCache, table []int32, nkv, bs, hd, g, lo, hi int, scale float32) []float32 {
	s := make([]float32, hi-lo)
	for p := lo; p < hi; p++ {
		k := kvRow(m, cache, table, nkv, bs, hd, g, p)
		var d float32
		for i, v := range q {
			d += v * k[i]
		}
		s[p-lo] = d * scale
	}
	return s
}

func attnDecode(m *mem, grid dev.Dim3, a dev.AttnDecodeArgs) error {
	nh, nkv, hd, bs := int(a.NumHeads), int(a.NumKVHeads), int(a.HeadDim), int(a.BlockSize)
	if err := needGrid(grid, int(a.NumRows), nkv, int(a.MaxParts)); err != nil {
		return err
	}
	stride := (nh + 2*nkv) * hd
	rows := m.i32(a.Rows, int(a.NumRows))
	group := nh / nkv
	mp := int(a.MaxParts)
	for i, r := range rows {
		p := int(m.i32(a.Pos+uint64(r)*4, 1)[0])
		seq := int(m.i32(a.RowSeq+uint64(r)*4, 1)[0])
		ctx := p + 1
		parts := (ctx + dev.PartitionTokens - 1) / dev.PartitionTokens
		if parts > mp {
			return fmt.Errorf("row %d: context %d needs %d partitions, MaxParts is %d", r, ctx, parts, mp)
		}
		table := m.i32(a.Tables+uint64(seq*int(a.MaxBlocks)*4), (ctx+bs-1)/bs)
		q := m.f32(a.QKV+uint64(int(r)*stride*4), nh*hd)
		for g := range nkv {
			for part := range parts {
				lo, hi := part*dev.PartitionTokens, min(ctx, (part+1)*dev.PartitionTokens)
				for h := g * group; h < (g+1)*group; h++ {
					s := scoresRange(m, q[h*hd:(h+1)*hd], kvCache{a.KCache, a.KVF32 != 0}, table, nkv, bs, hd, g, lo, hi, a.Scale)
					mx := float32(math.Inf(-1))
					for _, v := range s {
						mx = max(mx, v)
					}
					o := make([]float32, hd)
					var l float32
					for j, v := range s {
						e := float32(math.Exp(float64(v - mx)))
						l += e
						val := kvRow(m, kvCache{a.VCache, a.KVF32 != 0}, table, nkv, bs, hd, g, lo+j)
						for d := range o {
							o[d] += e * val[d]
						}
					}
					at := (i*nh+h)*mp + part
					m.f32(a.PartM+uint64(at*4), 1)[0] = mx
					m.f32(a.PartL+uint64(at*4), 1)[0] = l
					copy(m.f32(a.PartO+uint64(at*hd*4), hd), o)
				}
			}
		}
	}
	return nil
}

func attnMerge(m *mem, grid dev.Dim3, a dev.AttnMergeArgs) error {
	nh, hd, mp := int(a.NumHeads), int(a.HeadDim), int(a.MaxParts)
	if err := needGrid(grid, int(a.NumRows), nh, 1); err != nil {
		return err
	}
	rows := m.i32(a.Rows, int(a.NumRows))
	for i, r := range rows {
		p := int(m.i32(a.Pos+uint64(r)*4, 1)[0])
		parts := (p + dev.PartitionTokens) / dev.PartitionTokens
		for h := range nh {
			at := (i*nh + h) * mp
			ms := m.f32(a.PartM+uint64(at*4), parts)
			ls := m.f32(a.PartL+uint64(at*4), parts)
			mx := float32(math.Inf(-1))
			for _, v := range ms {
				mx = max(mx, v)
			}
			var l float32
			w := make([]float32, parts)
			for j := range parts {
				w[j] = float32(math.Exp(float64(ms[j] - mx)))
				l += ls[j] * w[j]
			}
			out := m.f32(a.Out+uint64((int(r)*nh+h)*hd*4), hd)
			clear(out)
			for j := range parts {
				o := m.f32(a.PartO+uint64((at+j)*hd*4), hd)
				for d := range out {
					out[d] += o[d] * w[j]
				}
			}
			for d := range out {
				out[d] /= l
			}
		}
	}
	return nil
}

func attnPrefill(m *mem, grid dev.Dim3, a dev.AttnPrefillArgs) error {
	nh, nkv, hd, bs := int(a.NumHeads), int(a.NumKVHeads), int(a.HeadDim), int(a.BlockSize)
	if err := needGrid(grid, int(a.NumTiles), nh, 1); err != nil {
		return err
	}
	stride := (nh + 2*nkv) * hd
	tiles := m.i32(a.Tiles, 2*int(a.NumTiles))
	group := nh / nkv
	for t := range int(a.NumTiles) {
		first, n := int(tiles[2*t]), int(tiles[2*t+1])
		seq := int(m.i32(a.RowSeq+uint64(first)*4, 1)[0])
		for r := first; r < first+n; r++ {
			p := int(m.i32(a.Pos+uint64(r)*4, 1)[0])
			if s := int(m.i32(a.RowSeq+uint64(r)*4, 1)[0]); s != seq {
				return fmt.Errorf("tile %d mixes sequences %d and %d", t, seq, s)
			}
			ctx := p + 1
			table := m.i32(a.Tables+uint64(seq*int(a.MaxBlocks)*4), (ctx+bs-1)/bs)
			q := m.f32(a.QKV+uint64(r*stride*4), nh*hd)
			for h := range nh {
				g := h / group
				s := scoresRange(m, q[h*hd:(h+1)*hd], kvCache{a.KCache, a.KVF32 != 0}, table, nkv, bs, hd, g, 0, ctx, a.Scale)
				mx := float32(math.Inf(-1))
				for _, v := range s {
					mx = max(mx, v)
				}
				out := m.f32(a.Out+uint64((r*nh+h)*hd*4), hd)
				clear(out)
				var l float32
				for j, v := range s {
					e := float32(math.Exp(float64(v - mx)))
					l += e
					val := kvRow(m, kvCache{a.VCache, a.KVF32 != 0}, table, nkv, bs, hd, g, j)
					for d := range out {
						out[d] += e * val[d]
					}
				}
				for d := range out {
					out[d] /= l
				}
			}
		}
	}
	return nil
}

func swiGLU(m *mem, grid dev.Dim3, a dev.SwiGLUArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	n := int(a.Inter)
	for r := range int(a.Rows) {
		row := m.f32(a.GU+uint64(r*2*n*4), 2*n)
		for i := range n {
			g := row[i]
			row[i] = float32(float64(g)/(1+math.Exp(-float64(g)))) * row[n+i]
		}
	}
	return nil
}

func residualAdd(m *mem, grid dev.Dim3, a dev.ResidualAddArgs) error {
	if err := needGrid(grid, int(a.Rows), 1, 1); err != nil {
		return err
	}
	n := int(a.N)
	for r := range int(a.Rows) {
		x := m.f32(a.X+uint64(r*int(a.Ld)*4), n)
		b := m.f32(a.B+uint64(r*int(a.LdB)*4), n)
		for i := range x {
			x[i] += b[i]
		}
	}
	return nil
}

func fillHash(seed uint32, i uint64) uint64 {
	x := i*0x9e3779b97f4a7c15 + (uint64(seed)<<32 | uint64(seed))
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func fillBF16(m *mem, grid dev.Dim3, a dev.FillArgs) error {
	if err := needGrid(grid, int((a.N+1023)/1024), 1, 1); err != nil {
		return err
	}
	out := m.u16(a.Out, int(a.N))
	for i := range out {
		u := float32(fillHash(a.Seed, uint64(i))>>40) * (1.0 / 16777216.0)
		out[i] = ToBF16(a.Scale * (2*u - 1))
	}
	return nil
}
