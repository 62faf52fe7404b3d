//go:build !purego

package cpu

// The kernels of attendHalf (attn_amd64.s): scores and weighted values of several queries
// against the keys and values of one cache block, widened from its 16-bit elements in
// registers. Lengths and leading dimensions are in elements; the caller guarantees that every
// element read or written lies inside its slice (see dotKeys and axpyKeys).

//go:noescape
func dotKeys4BF16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)

//go:noescape
func dotKeys2BF16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)

//go:noescape
func dotKeys1BF16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)

//go:noescape
func dotKeys4F16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)

//go:noescape
func dotKeys2F16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)

//go:noescape
func dotKeys1F16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)

//go:noescape
func axpyKeys2BF16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int)

//go:noescape
func axpyKeys1BF16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int)

//go:noescape
func axpyKeys2F16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int)

//go:noescape
func axpyKeys1F16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int)

//go:noescape
func axpyKeys3F32Asm(p *float32, ldp int, v *float32, ldv int, n int, cnt int, out *float32, ldo int)
