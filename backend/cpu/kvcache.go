package cpu

import (
	"fmt"

	"github.com/llmserve/llmserve/backend"

	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// resolveKVDType turns backend.KVAuto into the concrete type for m's weights.
func resolveKVDType(d backend.KVDType, m *model.Model) (backend.KVDType, error) {
	switch d {
	case backend.KVF32, backend.KVBF16, backend.KVF16:
		return d, nil
	case backend.KVAuto:
		switch t := m.Layers[0].QKV.Type; {
		case t == quant.BF16:
			return backend.KVBF16, nil
		case t == quant.F32:
			return backend.KVF32, nil
		default:
			return backend.KVF16, nil
		}
	}
	return 0, fmt.Errorf("unknown kv cache dtype %d", int(d))
}

// kvCache holds, per layer, keys and values as [block][kv head][position in block][head dim],
// in float32 (f32) or as 16-bit floats (half, with typ BF16 or F16). Exactly one of the pairs
// is allocated.
type kvCache struct {
	typ          backend.KVDType
	kF32, vF32   [][]float32
	kHalf, vHalf [][]uint16
	half         quant.Type // BF16 or F16 when typ is 16-bit
}

// newKVCache allocates layers × 2 buffers of n elements each.
func newKVCache(typ backend.KVDType, layers, n int) *kvCache {
	c := &kvCache{typ: typ}
	if typ == backend.KVF32 {
		c.kF32, c.vF32 = make([][]float32, layers), make([][]float32, layers)
		for l := range layers {
			c.kF32[l], c.vF32[l] = make([]float32, n), make([]float32, n)
		}
		return c
	}
	c.half = quant.BF16
	if typ == backend.KVF16 {
		c.half = quant.F16
	}
	c.kHalf, c.vHalf = make([][]uint16, layers), make([][]uint16, layers)
	for l := range layers {
		c.kHalf[l], c.vHalf[l] = make([]uint16, n), make([]uint16, n)
	}
	return c
}

// touch writes one element of every 4 KiB page of buffer i (layer i/2, K or V by parity), so
// the memory is committed.
func (c *kvCache) touch(i int) {
	l, v := i/2, i%2 == 1
	if c.typ == backend.KVF32 {
		buf := c.kF32[l]
		if v {
			buf = c.vF32[l]
		}
		for j := 0; j < len(buf); j += 1024 {
			buf[j] = 0
		}
		return
	}
	buf := c.kHalf[l]
	if v {
		buf = c.vHalf[l]
	}
	for j := 0; j < len(buf); j += 2048 {
		buf[j] = 0
	}
}

// layers is the number of layers held.
func (c *kvCache) layers() int { return max(len(c.kF32), len(c.kHalf)) }

// store writes one position's key and value vectors of a head at element offset off of layer l.
// With simd an F16 cache rounds them with toHalfAsm (the same bits as model.Float32ToHalf).
func (c *kvCache) store(l, off int, k, v []float32, simd bool) {
	if c.typ == backend.KVF32 {
		copy(c.kF32[l][off:off+len(k)], k)
		copy(c.vF32[l][off:off+len(v)], v)
		return
	}
	kd, vd := c.kHalf[l][off:off+len(k)], c.vHalf[l][off:off+len(v)]
	if c.half == quant.BF16 {
		for i, x := range k {
			kd[i] = model.Float32ToBF16(x)
		}
		for i, x := range v {
			vd[i] = model.Float32ToBF16(x)
		}
		return
	}
	toHalf(k, kd, simd)
	toHalf(v, vd, simd)
}

// toHalf rounds src to IEEE half floats in dst as model.Float32ToHalf does; with simd, through
// toHalfAsm, unless src holds a NaN (whose encoding the assembly does not reproduce).
func toHalf(src []float32, dst []uint16, simd bool) {
	dst = dst[:len(src)]
	if simd && len(src)%8 == 0 && len(src) > 0 && !toHalfAsm(&src[0], &dst[0], len(src)) {
		return
	}
	for i, x := range src {
		dst[i] = model.Float32ToHalf(x)
	}
}

// keys returns n float32 keys from element offset off of layer l: a view of the cache when it
// holds float32, else the values widened into buf (which must hold n).
func (c *kvCache) keys(l, off, n int, buf []float32) []float32 {
	if c.typ == backend.KVF32 {
		return c.kF32[l][off : off+n]
	}
	linear.Widen(c.half, c.kHalf[l][off:off+n], buf[:n])
	return buf[:n]
}

// values is keys for the value cache.
func (c *kvCache) values(l, off, n int, buf []float32) []float32 {
	if c.typ == backend.KVF32 {
		return c.vF32[l][off : off+n]
	}
	linear.Widen(c.half, c.vHalf[l][off:off+n], buf[:n])
	return buf[:n]
}

// keysHalf returns a view of n 16-bit keys (of type c.half) from element offset off of layer l;
// only for a 16-bit cache.
func (c *kvCache) keysHalf(l, off, n int) []uint16 { return c.kHalf[l][off : off+n] }

// valuesHalf is keysHalf for the value cache.
func (c *kvCache) valuesHalf(l, off, n int) []uint16 { return c.vHalf[l][off : off+n] }
