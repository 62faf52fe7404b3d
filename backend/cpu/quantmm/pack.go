package quantmm

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/llmserve/llmserve/internal/parallel"
	"github.com/llmserve/llmserve/quant"
)

// packRows is the number of weight rows a packed group interleaves: one int32 lane of a 256-bit
// vector per row, so a block's integer sums for all of them come out as one vector.
const packRows = 8

// Packed is a weight matrix repacked at load for the multi-row kernels: its rows are taken in
// groups of packRows (the last group padded with zero rows), and a group's blocks are stored
// side by side, so one pass over the group reads each weight byte once for every activation
// row of a tile and its integer sums for all the group's rows land in one vector.
//
// Q8_0 group block (8 rows x 32 weights, 272 bytes): the 8 rows' F16 scales, then for k < 8
// 32 bytes holding quants 4k..4k+3 of row 0, of row 1, ..., of row 7.
//
// Q4_K group block (8 rows x 256 weights, 1184 bytes): the 8 rows' F16 d, then their F16 dmin;
// the sub-block scales, 8 bytes per sub-block (one per row); the sub-block mins, 16 bytes per
// pair of sub-blocks (row 0's two, row 1's two, ...); then for each 32-byte group of quants
// (sub-blocks 2g and 2g+1 in its low and high nibbles) and k < 8, 32 bytes holding bytes
// 4k..4k+3 of that group of row 0, of row 1, ..., of row 7.
//
// Q6_K group block (8 rows x 256 weights, 1680 bytes): the 8 rows' F16 d; the int8 scales, 8
// bytes per 16 weights (one per row); then the 6-bit quants v[0..255] of each row taken apart:
// for each pair of 32-weight chunks (2c, 2c+1) and k < 8, 32 bytes holding, for row 0, row 1,
// ..., row 7, the 4 bytes v[64c+4k+i]&15 | (v[64c+32+4k+i]&15)<<4; then for each run of four
// chunks (4h..4h+3) and k < 8, 32 bytes holding, per row, the 4 bytes whose bits 2j, 2j+1 are
// v[32(4h+j)+4k+i]>>4.
//
// Every output is computed as the portable unpacked path computes it (goRows): the block's exact
// integer dot product, times the float32 product of the two scales, added to a float32 sum in
// block order; so packed results equal that path's bit for bit, whatever the row or activation
// count, thread count or kernel set.
type Packed struct {
	// t is the weight type, rows and cols the matrix's shape.
	t          quant.Type
	rows, cols int
	// data holds the groups one after another, each nb group blocks.
	data []byte
}

// Type is the packed matrix's weight type.
func (p *Packed) Type() quant.Type { return p.t }

// Rows is the number of weight rows.
func (p *Packed) Rows() int { return p.rows }

// Cols is the number of columns (weights per row).
func (p *Packed) Cols() int { return p.cols }

// Bytes is the storage the packed matrix takes.
func (p *Packed) Bytes() int { return len(p.data) }

// Packs reports whether this machine's kernels run a packed layout for weights of type t (when
// not, Pack returns nil and MatMul on the plain rows is the path).
func Packs(t quant.Type) bool {
	return activeKernels.packed != nil && slices.Contains(activeKernels.packTypes, t)
}

// packable lists the types that have a packed layout.
func packable(t quant.Type) bool { return t == quant.Q8_0 || t == quant.Q4_K || t == quant.Q6_K }

// packedBlockBytes is the size of one group block of type t (packRows rows of one block each).
func packedBlockBytes(t quant.Type) int {
	switch t {
	case quant.Q4_K:
		return q4kpBytes
	case quant.Q6_K:
		return q6kpBytes
	}
	return packRows * t.BlockBytes()
}

// The Q4_K group block's parts (see Packed).
const (
	q4kpD     = 0
	q4kpDMin  = 16
	q4kpScale = 32
	q4kpMin   = 96
	q4kpQ     = 160
	q4kpBytes = q4kpQ + packRows*128
)

// The Q6_K group block's parts (see Packed).
const (
	q6kpD     = 0
	q6kpScale = 16
	q6kpLow   = 144
	q6kpHigh  = q6kpLow + packRows*128
	q6kpBytes = q6kpHigh + packRows*64
)

// q6kValues unpacks one Q6_K block's 256 quants (0..63) in element order.
func q6kValues(blk []byte, v *[qkK]uint8) {
	for n := range 2 {
		ql, qh := blk[q6kL+64*n:], blk[q6kH+32*n:]
		for k := range 32 {
			v[128*n+k] = ql[k]&0xf | (qh[k]&3)<<4
			v[128*n+32+k] = ql[k+32]&0xf | (qh[k]>>2&3)<<4
			v[128*n+64+k] = ql[k]>>4 | (qh[k]>>4&3)<<4
			v[128*n+96+k] = ql[k+32]>>4 | (qh[k]>>6)<<4
		}
	}
}

// Pack copies rows rows of cols weights of type t (w, in the GGUF row layout) into the packed
// layout, or returns nil, nil when this machine's kernels have no packed kernel for t.
func Pack(t quant.Type, w []byte, rows, cols int) (*Packed, error) {
	if !Packs(t) {
		return nil, nil
	}
	return pack(t, w, rows, cols)
}

func pack(t quant.Type, w []byte, rows, cols int) (*Packed, error) {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("quantmm.Pack: %w", err)
	}
	if !packable(t) {
		return nil, fmt.Errorf("quantmm.Pack: no packed layout for %s", t)
	}
	if rows < 0 || len(w) < rows*rb {
		return nil, fmt.Errorf("quantmm.Pack: %d bytes for %d rows of %s x %d", len(w), rows, t, cols)
	}
	groups := (rows + packRows - 1) / packRows
	nb := cols / t.BlockSize()
	gb := packedBlockBytes(t)
	p := &Packed{t: t, rows: rows, cols: cols, data: make([]byte, groups*nb*gb)}
	bb := t.BlockBytes()
	for g := range groups {
		for r := range min(packRows, rows-g*packRows) {
			row := w[(g*packRows+r)*rb:][:rb]
			for b := range nb {
				src := row[bb*b:][:bb]
				dst := p.data[(g*nb+b)*gb:][:gb]
				switch t {
				case quant.Q8_0:
					copy(dst[2*r:], src[:2])
					for k := range 8 {
						copy(dst[16+32*k+4*r:][:4], src[2+4*k:][:4])
					}
				case quant.Q4_K:
					copy(dst[q4kpD+2*r:][:2], src[q4kD:][:2])
					copy(dst[q4kpDMin+2*r:][:2], src[q4kM:][:2])
					for sub := range 8 {
						sc, mn := quant.ScaleMinK4(sub, src[q4kS:q4kS+12])
						dst[q4kpScale+8*sub+r] = sc
						dst[q4kpMin+16*(sub/2)+2*r+sub%2] = mn
					}
					for g4 := range 4 {
						for k := range 8 {
							copy(dst[q4kpQ+256*g4+32*k+4*r:][:4], src[q4kQ+32*g4+4*k:][:4])
						}
					}
				case quant.Q6_K:
					copy(dst[q6kpD+2*r:][:2], src[q6kD:][:2])
					for j := range 16 {
						dst[q6kpScale+8*j+r] = src[q6kS+j]
					}
					var v [qkK]uint8
					q6kValues(src, &v)
					for c := range 4 {
						for k := range 8 {
							for i := range 4 {
								dst[q6kpLow+256*c+32*k+4*r+i] = v[64*c+4*k+i]&15 | (v[64*c+32+4*k+i]&15)<<4
							}
						}
					}
					for h := range 2 {
						for k := range 8 {
							for i := range 4 {
								var b byte
								for j := range 4 {
									b |= (v[32*(4*h+j)+4*k+i] >> 4) << (2 * j)
								}
								dst[q6kpHigh+256*h+32*k+4*r+i] = b
							}
						}
					}
				}
			}
		}
	}
	return p, nil
}

// MatMul sets out[i*ldo+j] = dot(x[i*cols:(i+1)*cols], row j of p) for i < m and j < rows, as
// package-level MatMul does on the unpacked rows (with the portable kernels' arithmetic, see
// Packed), on up to threads goroutines.
func (p *Packed) MatMul(x []float32, m int, out []float32, ldo int, threads int) {
	switch {
	case m < 0:
		panic(fmt.Sprintf("quantmm.Packed.MatMul: negative row count %d", m))
	case len(x) < m*p.cols:
		panic(fmt.Sprintf("quantmm.Packed.MatMul: %d activations, need %d x %d", len(x), m, p.cols))
	case m > 0 && p.rows > 0 && (ldo < p.rows || len(out) < (m-1)*ldo+p.rows):
		panic(fmt.Sprintf("quantmm.Packed.MatMul: output of %d with stride %d cannot hold %d x %d", len(out), ldo, m, p.rows))
	}
	if p.rows == 0 || m == 0 {
		return
	}
	a := getActs()
	defer putActs(a)
	a.quantize(p.t, x, m, p.cols, threads)
	kern := activeKernels.packed
	if kern == nil {
		kern = goPacked
	}
	groups := (p.rows + packRows - 1) / packRows
	run := func(g0, g1 int) {
		// Long runs of activation rows go in slices that stay in cache while every group of
		// this range meets them; a slice does not change any result.
		for i := 0; i < m; i += packActRows {
			n := min(packActRows, m-i)
			kern(p, a, i, n, g0, g1, out[i*ldo:], ldo)
		}
	}
	threads = max(1, min(threads, p.rows/minRowsPerThread))
	if threads == 1 {
		run(0, groups)
		return
	}
	// As MatMul: more chunks than threads, each a whole number of 16-row cache lines of output.
	parts := min(4*threads, (groups+1)/2)
	per := ((groups+parts-1)/parts + 1) &^ 1
	parts = (groups + per - 1) / per
	parallel.For(parts, threads, func(_, c int) { run(c*per, min(groups, (c+1)*per)) })
}

// packActRows is the most activation rows one pass over a range of groups takes (64 KiB of
// Q8_0 quants at 1024 columns: they stay in L2 while the weights stream past).
const packActRows = 64

// packedKernel computes groups [g0, g1) of p against activation rows [i0, i0+n) of a, writing
// row i0+t's outputs at out[t*ldo + j] for the real rows j of those groups.
type packedKernel func(p *Packed, a *acts, i0, n, g0, g1 int, out []float32, ldo int)

// goPacked is the portable packed kernel: goDotQ8_0's, goDotQ4_K's and goDotQ6_K's
// arithmetic on the packed layouts.
func goPacked(p *Packed, a *acts, i0, n, g0, g1 int, out []float32, ldo int) {
	switch p.t {
	case quant.Q4_K:
		goPackedQ4_K(p, a, i0, n, g0, g1, out, ldo)
		return
	case quant.Q6_K:
		goPackedQ6_K(p, a, i0, n, g0, g1, out, ldo)
		return
	}
	nb := a.nb
	const gb = packRows * 34
	for g := g0; g < g1; g++ {
		nr := min(packRows, p.rows-g*packRows)
		for t := range n {
			i := i0 + t
			var acc [packRows]float32
			for b := range nb {
				blk := p.data[(g*nb+b)*gb:][:gb]
				aq := a.qs[(i*nb+b)*qk:][:qk]
				da := a.d[i*nb+b]
				for r := range nr {
					var s int32
					for k := range 8 {
						wq := blk[16+32*k+4*r:][:4]
						av := aq[4*k:][:4]
						s += int32(int8(wq[0]))*int32(av[0]) + int32(int8(wq[1]))*int32(av[1]) +
							int32(int8(wq[2]))*int32(av[2]) + int32(int8(wq[3]))*int32(av[3])
					}
					sc := float32(quant.FromF16(binary.LittleEndian.Uint16(blk[2*r:])) * da)
					acc[r] += float32(sc * float32(s))
				}
			}
			copy(out[t*ldo+g*packRows:][:nr], acc[:nr])
		}
	}
}

func goPackedQ4_K(p *Packed, a *acts, i0, n, g0, g1 int, out []float32, ldo int) {
	nb := a.nb
	for g := g0; g < g1; g++ {
		nr := min(packRows, p.rows-g*packRows)
		for t := range n {
			i := i0 + t
			var acc [packRows]float32
			for b := range nb {
				blk := p.data[(g*nb+b)*q4kpBytes:][:q4kpBytes]
				aq := a.qs[(i*nb+b)*qkK:][:qkK]
				sums := a.sums[(i*nb+b)*8:][:8]
				da := a.d[i*nb+b]
				for r := range nr {
					var isum, msum int32
					for slot, sub := range q4kOrder {
						shift := uint(4 * (sub % 2))
						var dot int32
						for k := range 32 {
							wq := blk[q4kpQ+256*(sub/2)+32*(k/4)+4*r+k%4]
							dot += int32(wq>>shift&0xf) * int32(aq[32*slot+k])
						}
						isum += int32(blk[q4kpScale+8*sub+r]) * dot
						msum += int32(blk[q4kpMin+16*(sub/2)+2*r+sub%2]) * int32(sums[sub])
					}
					d := quant.FromF16(binary.LittleEndian.Uint16(blk[q4kpD+2*r:]))
					dm := quant.FromF16(binary.LittleEndian.Uint16(blk[q4kpDMin+2*r:]))
					acc[r] += float32(float32(d*da)*float32(isum)) - float32(float32(dm*da)*float32(msum))
				}
			}
			copy(out[t*ldo+g*packRows:][:nr], acc[:nr])
		}
	}
}

func goPackedQ6_K(p *Packed, a *acts, i0, n, g0, g1 int, out []float32, ldo int) {
	nb := a.nb
	for g := g0; g < g1; g++ {
		nr := min(packRows, p.rows-g*packRows)
		for t := range n {
			i := i0 + t
			var acc [packRows]float32
			for b := range nb {
				blk := p.data[(g*nb+b)*q6kpBytes:][:q6kpBytes]
				aq := a.qs[(i*nb+b)*qkK:][:qkK]
				sums := a.sums[(i*nb+b)*16:][:16]
				for r := range nr {
					var isum int32
					for j := range 16 { // 16 weights per scale
						var dot int32
						for e := 16 * j; e < 16*j+16; e++ {
							c, k, i := e/32, e%32/4, e%4
							lo := blk[q6kpLow+256*(c/2)+32*k+4*r+i] >> (4 * (c % 2)) & 15
							hi := blk[q6kpHigh+256*(c/4)+32*k+4*r+i] >> (2 * (c % 4)) & 3
							dot += int32(lo|hi<<4) * int32(aq[e])
						}
						isum += int32(int8(blk[q6kpScale+8*j+r])) * (dot - 32*int32(sums[j]))
					}
					d := quant.FromF16(binary.LittleEndian.Uint16(blk[q6kpD+2*r:]))
					acc[r] += float32(float32(d*a.d[i*nb+b]) * float32(isum))
				}
			}
			copy(out[t*ldo+g*packRows:][:nr], acc[:nr])
		}
	}
}
