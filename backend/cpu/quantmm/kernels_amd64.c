//go:build cgo && amd64

// SIMD dot-product kernels for the block quantizations, one instantiation of kern256.h per
// instruction set; Go picks one at run time from the CPU's features (kernels_cgo.go).
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define q8_0_qk 32
#define q4_0_qk 32
#define q4_k_qk 256
#define q6_k_qk 256

#define FN(name) name##_avx2
#define TARGET "avx2,fma,f16c"
#define VNNI 0
#define Q4K_RP 1
#include "kern256.h"
#undef FN
#undef TARGET
#undef VNNI
#undef Q4K_RP

#define FN(name) name##_avxvnni
#define TARGET "avx2,fma,f16c,avxvnni"
#define VNNI 1
#define DPBUSD _mm256_dpbusd_avx_epi32
#define DPWSSD _mm256_dpwssd_avx_epi32
#define Q4K_RP 1
#include "kern256.h"
#undef FN
#undef TARGET
#undef VNNI
#undef Q4K_RP
#undef DPBUSD
#undef DPWSSD

// The same 256-bit code with AVX-512 VL's encoding of the VNNI instructions.
#define FN(name) name##_vnni256
#define TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define VNNI 1
#define DPBUSD _mm256_dpbusd_epi32
#define DPWSSD _mm256_dpwssd_epi32
#define Q4K_RP 2
#include "kern256.h"
#undef FN
#undef TARGET
#undef VNNI
#undef Q4K_RP
#undef DPBUSD
#undef DPWSSD

// Q8_0 with 512-bit VNNI, tiled over up to 4 weight rows x 4 activation rows: each step covers
// two blocks (64 weights), loads each weight row's pair of blocks once for every activation row
// of the tile and each activation pair once for every weight row, so at 16 activation rows
// (decode of 16 sequences) the weights are unpacked a quarter as often as row by row. The
// weights enter vpdpbusd as unsigned bytes w+128; the -128*sum(a) each block then owes starts
// the block's accumulator, spread as -16*sum(a) over its 8 lanes (alane).
#define Q8_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni"

static inline __attribute__((always_inline, target(Q8_TARGET))) float q8_hsum512(__m512 v) {
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

// q8_0_tile512 sets out[t*ldo + r] for r < NW weight rows (rb bytes apart, nb blocks) and t < NA
// activation rows (aq: nb*32 quants each, ad: nb scales, alane: nb lane biases).
static inline __attribute__((always_inline, target(Q8_TARGET))) void q8_0_tile512(
    const uint8_t *w, int64_t rb, int nb, const int8_t *aq, const float *ad, const int32_t *alane, int NW, int NA,
    int pf, float *out, int64_t ldo) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) acc[r][t] = _mm512_setzero_ps();
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    // Lanes 0-7 take the first block's value, lanes 8-15 the second's.
    const __m512i pairIdx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    // Two blocks per step; an odd last block pairs with zeros (weights 0x80 flip to 0, its
    // activations are zero-extended, its second scale and bias are 0).
    for (int b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        const __mmask8 m2 = two ? 0x3 : 0x1;
        __m512i wv[4];
        __m512 dv[4];
#pragma GCC unroll 4
        for (int r = 0; r < NW; r++) {
            const uint8_t *blk = w + r * rb + 34 * b;
            // The first activation tile over a group of rows (pf) reads its weights from memory,
            // the others from L1; fetch the next group's (the memory right after) meanwhile, which
            // the prefetchers do not do for four interleaved rows. Hints past the end are dropped.
            if (pf) {
                _mm_prefetch((const char *)blk + NW * rb, _MM_HINT_T0);
                _mm_prefetch((const char *)blk + NW * rb + 67, _MM_HINT_T0);
            }
            __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
            __m256i hi = two ? _mm256_loadu_si256((const __m256i *)(blk + 36)) : _mm256_set1_epi8((char)0x80);
            wv[r] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
            uint16_t h0, h1 = 0;
            memcpy(&h0, blk, 2);
            if (two) memcpy(&h1, blk + 34, 2);
            __m128 d2 = _mm_cvtph_ps(_mm_cvtsi32_si128((int)h0 | (int)h1 << 16));
            dv[r] = _mm512_permutexvar_ps(pairIdx, _mm512_castps128_ps512(d2));
        }
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) {
            const int8_t *a = aq + (int64_t)t * nb * 32 + 32 * b;
            __m512i av = two ? _mm512_loadu_si512((const void *)a) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)a));
            __m512 da = _mm512_permutexvar_ps(pairIdx, _mm512_castps128_ps512(_mm_maskz_loadu_ps(m2, ad + (int64_t)t * nb + b)));
            __m512i bias = _mm512_permutexvar_epi32(pairIdx, _mm512_castsi128_si512(_mm_maskz_loadu_epi32(m2, alane + (int64_t)t * nb + b)));
#pragma GCC unroll 4
            for (int r = 0; r < NW; r++) {
                __m512i dot = _mm512_dpbusd_epi32(bias, wv[r], av);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dv[r], da), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) out[(int64_t)t * ldo + r] = q8_hsum512(acc[r][t]);
}

#define Q8_TILE(NW, NA)                                                                                             \
    static __attribute__((noinline, target(Q8_TARGET))) void q8_0_tile512_##NW##x##NA(                            \
        const uint8_t *w, int64_t rb, int nb, const int8_t *aq, const float *ad, const int32_t *alane, int pf,     \
        float *out, int64_t ldo) {                                                                                \
        q8_0_tile512(w, rb, nb, aq, ad, alane, NW, NA, pf, out, ldo);                                             \
    }
#define Q8_TILES(NW) Q8_TILE(NW, 1) Q8_TILE(NW, 2) Q8_TILE(NW, 3) Q8_TILE(NW, 4)
Q8_TILES(1)
Q8_TILES(2)
Q8_TILES(3)
Q8_TILES(4)

typedef void (*q8_tile_fn)(const uint8_t *, int64_t, int, const int8_t *, const float *, const int32_t *, int,
                           float *, int64_t);
static const q8_tile_fn q8_tiles[4][4] = {
    {q8_0_tile512_1x1, q8_0_tile512_1x2, q8_0_tile512_1x3, q8_0_tile512_1x4},
    {q8_0_tile512_2x1, q8_0_tile512_2x2, q8_0_tile512_2x3, q8_0_tile512_2x4},
    {q8_0_tile512_3x1, q8_0_tile512_3x2, q8_0_tile512_3x3, q8_0_tile512_3x4},
    {q8_0_tile512_4x1, q8_0_tile512_4x2, q8_0_tile512_4x3, q8_0_tile512_4x4},
};

// q8_0_vnni512: rows weight rows (rb bytes apart, nb blocks each) against m activation rows
// (aq: nb*32 quants per row, ad: nb scales, alane: nb lane biases), out[i*ldo + j].
__attribute__((target(Q8_TARGET))) void q8_0_vnni512(const uint8_t *w, int64_t rb, int rows, int nb,
                                                      const int8_t *aq, const float *ad, const int32_t *alane, int m,
                                                      float *out, int64_t ldo) {
    // Few activation rows are memory-bound: one weight row at a time keeps the weights one
    // sequential stream, which the prefetchers follow at nearly the full bandwidth (four
    // interleaved rows reach much less). The tile shape does not change any result.
    const int tw = m < 4 ? 1 : 4;
    for (int j = 0; j < rows; j += tw) {
        const int nw = rows - j < tw ? rows - j : tw;
        for (int i = 0; i < m; i += 4) {
            const int na = m - i < 4 ? m - i : 4;
            q8_tiles[nw - 1][na - 1](w + (int64_t)j * rb, rb, nb, aq + (int64_t)i * nb * 32, ad + (int64_t)i * nb,
                                     alane + (int64_t)i * nb, m >= 4 && i == 0, out + (int64_t)i * ldo + j, ldo);
        }
    }
}

// Activation quantization with AVX-512, the same operations as quantizeAct in Go: per block,
// d = max|x|/127 and q = x * (127/max|x|) rounded to nearest even (the default rounding mode),
// so the quants and scales equal the Go path's bit for bit. A block holding a NaN or an
// infinity gets zero quants and a NaN scale, an all-zero block zero quants and scale 0.
#define QA_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq"

// qa_block quantizes n (a multiple of 32) floats at x to q in natural order, sets s32[k] to the
// sum of quants 32k..32k+31 and returns the scale.
static inline __attribute__((always_inline, target(QA_TARGET))) float qa_block(const float *x, int n, int8_t *q,
                                                                               int32_t *s32) {
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int i = 0; i < n; i += 16) {
        const __m512 v = _mm512_abs_ps(_mm512_loadu_ps(x + i));
        bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(3.40282346638528859811704183484516925e+38F), _CMP_NLE_UQ);
        amax = _mm512_max_ps(amax, v);
    }
    const float am = _mm512_reduce_max_ps(amax);
    if (bad || am == 0) {
        memset(q, 0, (size_t)n);
        for (int k = 0; k < n / 32; k++) s32[k] = 0;
        return bad ? __builtin_nanf("") : 0.0f;
    }
    const __m512 id = _mm512_set1_ps(127 / am);
    for (int i = 0; i < n; i += 32) {
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), id));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i + 16), id));
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(q + i + 16), _mm512_cvtepi32_epi8(q1));
        s32[i / 32] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
    return am / 127;
}

// slot_of_sub: sub-block s of a Q4_K block's activations is stored at slot slot_of_sub[s] (the
// inverse of matmul.go's q4kOrder, which is the same permutation). The quantizers (qa_q4k,
// qa_q4k_avx2) write this order and the packed tiles read it, so all share this one table.
static const int slot_of_sub[8] = {0, 2, 1, 3, 4, 6, 5, 7};

// qa_q4k quantizes nblk 256-element blocks for Q4_K: quants in the q4kOrder slot order, one
// scale per block, eight int16 sums per block (by sub-block).
__attribute__((target(QA_TARGET))) void qa_q4k(const float *x, int64_t nblk, int8_t *qs, float *d, int16_t *sums) {
    int8_t q[256];
    int32_t s32[8];
    for (int64_t b = 0; b < nblk; b++) {
        d[b] = qa_block(x + b * 256, 256, q, s32);
        for (int s = 0; s < 8; s++) {
            memcpy(qs + b * 256 + 32 * slot_of_sub[s], q + 32 * s, 32);
            sums[b * 8 + s] = (int16_t)s32[s];
        }
    }
}

// qa_q32 quantizes nblk 32-element blocks for Q8_0 / Q4_0: quants, one scale per block, the
// block's bias row (-off * sum, then seven zeros) and, where lane is not NULL, -16 * sum.
__attribute__((target(QA_TARGET))) void qa_q32(const float *x, int64_t nblk, int8_t *qs, float *d, int32_t *bias,
                                               int32_t *lane, int32_t off) {
    int32_t s;
    for (int64_t b = 0; b < nblk; b++) {
        d[b] = qa_block(x + b * 32, 32, qs + b * 32, &s);
        bias[b * 8] = -off * s;
        for (int k = 1; k < 8; k++) bias[b * 8 + k] = 0;
        if (lane) lane[b] = -16 * s;
    }
}

// Packed Q8_0 (pack.go's layout) with AVX2: each step takes 4 quants of each of a group's 8
// weight rows in one vector against 4 quants of an activation row broadcast to all eight lanes,
// so vpmaddubsw + vpmaddwd leave row r's sum of 4 products in int32 lane r, and a block's 8
// steps its exact integer dot product for all 8 rows; the weights are loaded (and their
// absolute values taken, for vpmaddubsw's unsigned operand) once per step for up to 8
// activation rows (Q8P_NA). The float arithmetic per output is goDotQ8_0's: scale = dw * da rounded,
// times the integer sum rounded, added in block order.
// No "fma": GCC would otherwise fuse the multiply and the add, which the Go path rounds apart.
#define Q8P_TARGET "avx2,f16c"

// Q8P_NA is the most activation rows one pass over a group takes: per step a weight vector and
// its absolute values, Q8P_NA int32 sums, the ones and two temporaries fit the 16 ymm registers.
#define Q8P_NA 8

// Q8P_KEEP stops GCC from reassociating the chain of integer adds into a sum tree over every
// step's product, which it did for the whole block (32 products at 4 rows) and which spilled
// all of them to the stack: the asm is empty, it only hides the value. With it the kernel runs
// at about 4.6 vector ALU ops per 32 products and activation row (sign, vpmaddubsw, vpmaddwd,
// add, plus the shared abs and the per-block float work), ~1.3x the spilled version's rate
// (GCC 12, Zen 3, BenchmarkMatMulDecode16 cpu-ns/op), and 8 rows per pass ~4% over 4.
#define Q8P_KEEP(v) __asm__("" : "+x"(v))

// q8p_tile stores activation row t's 8 sums at res + t*ldr.
static inline __attribute__((always_inline, target(Q8P_TARGET))) void q8p_tile(const uint8_t *g, int nb,
                                                                             const int8_t *aq, const float *ad,
                                                                             int NA, float *res, int64_t ldr) {
    __m256 acc[Q8P_NA];
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t astride = (int64_t)nb * 32;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = g + (int64_t)b * 272;
        const int8_t *ab = aq + (int64_t)b * 32;
        __m256i isum[Q8P_NA];
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * k));
            const __m256i u = _mm256_abs_epi8(w);
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++) {
                int32_t a4;
                memcpy(&a4, ab + t * astride + 4 * k, 4);
                const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(_mm256_set1_epi32(a4), w));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, ones));
                Q8P_KEEP(isum[t]);
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) {
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[(int64_t)t * nb + b]));
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(sc, _mm256_cvtepi32_ps(isum[t])));
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) _mm256_storeu_ps(res + t * ldr, acc[t]);
}

#define Q8P_TILE(NA)                                                                                              \
    static __attribute__((noinline, target(Q8P_TARGET))) void q8p_tile_##NA(                                      \
        const uint8_t *g, int nb, const int8_t *aq, const float *ad, float *res, int64_t ldr) {                   \
        q8p_tile(g, nb, aq, ad, NA, res, ldr);                                                                    \
    }
Q8P_TILE(1) Q8P_TILE(2) Q8P_TILE(3) Q8P_TILE(4) Q8P_TILE(5) Q8P_TILE(6) Q8P_TILE(7) Q8P_TILE(8)
#undef Q8P_TILE

// q8_0_packed_avx2: groups [g0, g1) of a packed Q8_0 matrix (p, nb blocks per row, rows real
// rows) against n activation rows (aq: nb*32 quants per row, ad: nb scales), out[t*ldo + j].
__attribute__((target(Q8P_TARGET))) void q8_0_packed_avx2(const uint8_t *p, int rows, int nb, int g0, int g1,
                                                           const int8_t *aq, const float *ad, int n, float *out,
                                                           int64_t ldo) {
    typedef void (*tile_fn)(const uint8_t *, int, const int8_t *, const float *, float *, int64_t);
    static const tile_fn tiles[Q8P_NA] = {q8p_tile_1, q8p_tile_2, q8p_tile_3, q8p_tile_4,
                                          q8p_tile_5, q8p_tile_6, q8p_tile_7, q8p_tile_8};
    float res[8 * Q8P_NA];
    for (int g = g0; g < g1; g++) {
        const uint8_t *gp = p + (int64_t)g * nb * 272;
        const int nr = rows - 8 * g < 8 ? rows - 8 * g : 8;
        for (int i = 0; i < n; i += Q8P_NA) {
            const int na = n - i < Q8P_NA ? n - i : Q8P_NA;
            // A whole group's sums go straight to out; a last, partial group's through res.
            if (nr == 8) {
                tiles[na - 1](gp, nb, aq + (int64_t)i * nb * 32, ad + (int64_t)i * nb, out + (int64_t)i * ldo + 8 * g, ldo);
                continue;
            }
            tiles[na - 1](gp, nb, aq + (int64_t)i * nb * 32, ad + (int64_t)i * nb, res, 8);
            for (int t = 0; t < na; t++) memcpy(out + (int64_t)(i + t) * ldo + 8 * g, res + 8 * t, (size_t)nr * 4);
        }
    }
}

// Packed Q4_K (pack.go's layout) with AVX2: as for Q8_0, each step takes 4 quants of each of a
// group's 8 rows against 4 activation quants broadcast to all lanes. A step loads 4 bytes of a
// quant group of each row once and takes both of its sub-blocks from them, the low nibbles (sub
// 2q) and the high (2q+1), each against its own activations. vpmaddubsw's pairs (at most
// 2 * 15 * 127) of a sub-block's 8 steps add up in int16 (at most 30480), and one vpmaddwd by
// the rows' sub-block scales, repeated in both halves of each lane, leaves row r's scaled
// sub-block sum in int32 lane r; the mins meet the activations' sub-block sums in vpmaddwd the
// same way. The float arithmetic per output is goDotQ4_K's.
// Per 32 products and activation row a step issues vpbroadcastd (a load), vpmaddubsw and vpaddw,
// and per step the load and three ops of unpacking, shared by the pass's activation rows.
// Q8P_KEEP holds each int16 and int32 sum in a register: without it GCC summed a block's four
// quant groups' products as a tree and spilled them, and the tile that took one sub-block per
// step tested the nibble half at every step. This one runs ~1.2x that one's rate (GCC 12,
// Zen 3, 256x1024 in L2, 16 or 64 activation rows, 1 thread: 109 vs 90 GMAC/s).
// Tried and slower (GCC 12, Zen 3, 256x1024 in L2, 16 activation rows): 8 activation rows per
// pass, their quants interleaved 4 bytes apart so one pointer serves all, halving the nibble
// unpacking per product; 8 int16 and 8 int32 accumulators overflow the 16 ymm registers and the
// spills cost more than it saves (67 vs 82 GMAC/s), with or without the sub-block pair sharing
// one weight load.

// Q4KP_NA is the most activation rows one pass over a group takes: 8 int16 and 4 int32 sums,
// the weights' two nibble vectors and a broadcast fit the 16 ymm registers (the 0x0f mask and
// the float sums wait in memory); 3 and 5 rows per pass measured slower (97 and 100 GMAC/s).
#define Q4KP_NA 4

// q4kp_block_end finishes block b of a packed Q4_K group for NA activation rows: each row's
// integer dot products isum[t] times d·da, less the sub-block mins against the activation sums
// times dmin·da, added to acc[t] (goDotQ4_K's float steps). q4kp_tile and q4kv_tile share it.
static inline __attribute__((always_inline, target(Q8P_TARGET))) void q4kp_block_end(const uint8_t *blk, int b, int nb,
                                                                                   const float *ad,
                                                                                   const int16_t *asums, int NA,
                                                                                   const __m256i *isum, __m256 *acc) {
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
    const __m256 dmv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
    __m256i mn[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) mn[j] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + 96 + 16 * j)));
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) {
        const int64_t ab = (int64_t)t * nb + b;
        __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            int32_t s2;
            memcpy(&s2, asums + ab * 8 + 2 * j, 4);
            msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn[j], _mm256_set1_epi32(s2)));
        }
        const __m256 da = _mm256_set1_ps(ad[ab]);
        const __m256 x = _mm256_mul_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(isum[t]));
        const __m256 y = _mm256_mul_ps(_mm256_mul_ps(dmv, da), _mm256_cvtepi32_ps(msum));
        acc[t] = _mm256_add_ps(acc[t], _mm256_sub_ps(x, y));
    }
}

// q4kp_tile stores activation row t's 8 sums at res + t*ldr.
static inline __attribute__((always_inline, target(Q8P_TARGET))) void q4kp_tile(const uint8_t *g, int nb,
                                                                              const int8_t *aq, const float *ad,
                                                                              const int16_t *asums, int NA,
                                                                              float *res, int64_t ldr) {
    __m256 acc[Q4KP_NA];
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const int64_t astride = (int64_t)nb * 256;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = g + (int64_t)b * 1184;
        const int8_t *ab = aq + (int64_t)b * 256;
        __m256i isum[Q4KP_NA];
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const uint8_t *qp = blk + 160 + 256 * q;
            const int8_t *alo = ab + 32 * slot_of_sub[2 * q], *ahi = ab + 32 * slot_of_sub[2 * q + 1];
            __m256i plo[Q4KP_NA], phi[Q4KP_NA];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qp + 32 * k));
                const __m256i wl = _mm256_and_si256(v, m4), wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
                for (int t = 0; t < NA; t++) {
                    int32_t a0, a1;
                    memcpy(&a0, alo + t * astride + 4 * k, 4);
                    memcpy(&a1, ahi + t * astride + 4 * k, 4);
                    const __m256i l = _mm256_maddubs_epi16(wl, _mm256_set1_epi32(a0));
                    const __m256i h = _mm256_maddubs_epi16(wh, _mm256_set1_epi32(a1));
                    plo[t] = k ? _mm256_add_epi16(plo[t], l) : l;
                    phi[t] = k ? _mm256_add_epi16(phi[t], h) : h;
                    Q8P_KEEP(plo[t]);
                    Q8P_KEEP(phi[t]);
                }
            }
            __m256i sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 32 + 16 * q)));
            __m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 40 + 16 * q)));
            sl = _mm256_or_si256(sl, _mm256_slli_epi32(sl, 16));
            sh = _mm256_or_si256(sh, _mm256_slli_epi32(sh, 16));
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++) {
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(plo[t], sl), _mm256_madd_epi16(phi[t], sh)));
                Q8P_KEEP(isum[t]);
            }
        }
        q4kp_block_end(blk, b, nb, ad, asums, NA, isum, acc);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) _mm256_storeu_ps(res + t * ldr, acc[t]);
}

#define Q4KP_TILE(NA)                                                                                             \
    static __attribute__((noinline, target(Q8P_TARGET))) void q4kp_tile_##NA(                                     \
        const uint8_t *g, int nb, const int8_t *aq, const float *ad, const int16_t *asums, float *res,            \
        int64_t ldr) {                                                                                            \
        q4kp_tile(g, nb, aq, ad, asums, NA, res, ldr);                                                            \
    }
Q4KP_TILE(1) Q4KP_TILE(2) Q4KP_TILE(3) Q4KP_TILE(4)
#undef Q4KP_TILE

// q4k_tile_fn is a packed Q4_K tile of a fixed activation row count (q4kp_tile_N, q4kv_tile_N).
typedef void (*q4k_tile_fn)(const uint8_t *, int, const int8_t *, const float *, const int16_t *, float *, int64_t);

// q4k_packed runs groups [g0, g1) of packed Q4_K against n activation rows, up to na_max rows a
// pass (at most 8: res holds a pass) through tiles[na - 1] (asums: 8 sums per activation block).
static void q4k_packed(const q4k_tile_fn *tiles, int na_max, const uint8_t *p, int rows, int nb, int g0, int g1,
                       const int8_t *aq, const float *ad, const int16_t *asums, int n, float *out, int64_t ldo) {
    float res[8 * 8];
    for (int g = g0; g < g1; g++) {
        const uint8_t *gp = p + (int64_t)g * nb * 1184;
        const int nr = rows - 8 * g < 8 ? rows - 8 * g : 8;
        for (int i = 0; i < n; i += na_max) {
            const int na = n - i < na_max ? n - i : na_max;
            const int8_t *a = aq + (int64_t)i * nb * 256;
            const float *d = ad + (int64_t)i * nb;
            const int16_t *s = asums + (int64_t)i * nb * 8;
            // A whole group's sums go straight to out; a last, partial group's through res.
            if (nr == 8) {
                tiles[na - 1](gp, nb, a, d, s, out + (int64_t)i * ldo + 8 * g, ldo);
                continue;
            }
            tiles[na - 1](gp, nb, a, d, s, res, 8);
            for (int t = 0; t < na; t++) memcpy(out + (int64_t)(i + t) * ldo + 8 * g, res + 8 * t, (size_t)nr * 4);
        }
    }
}

// q4_k_packed_avx2: as q8_0_packed_avx2 for packed Q4_K.
void q4_k_packed_avx2(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad,
                      const int16_t *asums, int n, float *out, int64_t ldo) {
    static const q4k_tile_fn tiles[Q4KP_NA] = {q4kp_tile_1, q4kp_tile_2, q4kp_tile_3, q4kp_tile_4};
    q4k_packed(tiles, Q4KP_NA, p, rows, nb, g0, g1, aq, ad, asums, n, out, ldo);
}

// Packed Q4_K with AVX-512 VNNI (256-bit, VL encoding): q4kp_tile's steps with vpdpbusd, which
// takes a row's 4 unsigned nibbles times 4 activation bytes straight into its int32 lane, in
// place of vpmaddubsw, the int16 add and (per sub-block) vpmaddwd; the sub-block's int32 sum is
// then multiplied by its scale. The integers are the same (exact either way), so every output is
// q4kp_tile's bit for bit. With AVX-512's 32 vector registers a pass takes up to 8 activation
// rows (Zen 5, 16 rows, CPU time: 6 to 12% under the AVX2 tile; with AVX-VNNI's encoding and 16
// registers the sums spilled and it ran slower than AVX2's, so that set keeps its row kernels).
// AVX-512 lets GCC contract the float multiply and subtract into an FMA, which rounds once where
// the Go path rounds twice: contraction is off.
#define Q4KV_TARGET "avx2,f16c,avx512f,avx512vl,avx512vnni"
#define Q4KV_NA 8

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
static inline __attribute__((always_inline, target(Q4KV_TARGET))) void q4kv_tile(const uint8_t *g, int nb,
                                                                               const int8_t *aq, const float *ad,
                                                                               const int16_t *asums, int NA,
                                                                               float *res, int64_t ldr) {
    __m256 acc[Q4KV_NA];
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const int64_t astride = (int64_t)nb * 256;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = g + (int64_t)b * 1184;
        const int8_t *ab = aq + (int64_t)b * 256;
        __m256i isum[Q4KV_NA];
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const uint8_t *qp = blk + 160 + 256 * q;
            const int8_t *alo = ab + 32 * slot_of_sub[2 * q], *ahi = ab + 32 * slot_of_sub[2 * q + 1];
            __m256i plo[Q4KV_NA], phi[Q4KV_NA];
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++) plo[t] = phi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qp + 32 * k));
                const __m256i wl = _mm256_and_si256(v, m4), wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
                for (int t = 0; t < NA; t++) {
                    int32_t a0, a1;
                    memcpy(&a0, alo + t * astride + 4 * k, 4);
                    memcpy(&a1, ahi + t * astride + 4 * k, 4);
                    plo[t] = _mm256_dpbusd_epi32(plo[t], wl, _mm256_set1_epi32(a0));
                    phi[t] = _mm256_dpbusd_epi32(phi[t], wh, _mm256_set1_epi32(a1));
                }
            }
            const __m256i sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 32 + 16 * q)));
            const __m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 40 + 16 * q)));
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++)
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_mullo_epi32(plo[t], sl), _mm256_mullo_epi32(phi[t], sh)));
        }
        q4kp_block_end(blk, b, nb, ad, asums, NA, isum, acc);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) _mm256_storeu_ps(res + t * ldr, acc[t]);
}

#define Q4KV_TILE(NA)                                                                                             \
    static __attribute__((noinline, target(Q4KV_TARGET))) void q4kv_tile_##NA(                                    \
        const uint8_t *g, int nb, const int8_t *aq, const float *ad, const int16_t *asums, float *res,            \
        int64_t ldr) {                                                                                            \
        q4kv_tile(g, nb, aq, ad, asums, NA, res, ldr);                                                            \
    }
Q4KV_TILE(1) Q4KV_TILE(2) Q4KV_TILE(3) Q4KV_TILE(4) Q4KV_TILE(5) Q4KV_TILE(6) Q4KV_TILE(7) Q4KV_TILE(8)
#undef Q4KV_TILE
#pragma GCC pop_options

// q4_k_packed_vnni256: q4_k_packed_avx2 with q4kv_tile, up to Q4KV_NA activation rows a pass.
void q4_k_packed_vnni256(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad,
                         const int16_t *asums, int n, float *out, int64_t ldo) {
    static const q4k_tile_fn tiles[Q4KV_NA] = {q4kv_tile_1, q4kv_tile_2, q4kv_tile_3, q4kv_tile_4,
                                               q4kv_tile_5, q4kv_tile_6, q4kv_tile_7, q4kv_tile_8};
    q4k_packed(tiles, Q4KV_NA, p, rows, nb, g0, g1, aq, ad, asums, n, out, ldo);
}

// Packed Q4_K with 512-bit VNNI, two groups (16 weight rows) a step: q4kv_tile's steps, with
// group g's 8 rows in the low half of each vector and group g+1's in the high half, so one
// broadcast activation and one vpdpbusd serve 16 rows where q4kv_tile's serve 8. Cores that
// run 512-bit vpdpbusd at the 256-bit rate (Zen 5, measured: 6.4 G/s either width) do twice
// the products per instruction. Every lane's integer and float steps are q4kv_tile's, so every
// output is the same bits; contraction stays off for the same reason.
#define Q4KZ_TARGET "avx2,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define Q4KZ_NA 8

// q4kz_pair loads 32 bytes at a (group g) and 32 at b (group g+1) as one vector.
static inline __attribute__((always_inline, target(Q4KZ_TARGET))) __m512i q4kz_pair(const uint8_t *a,
                                                                                   const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

// q4kz_halves loads 16 bytes at a (group g) and 16 at b (group g+1) as one 256-bit vector.
static inline __attribute__((always_inline, target(Q4KZ_TARGET))) __m256i q4kz_halves(const uint8_t *a,
                                                                                     const uint8_t *b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}

// q4kz_bytes8 widens 8 bytes at a (group g's rows) and 8 at b (group g+1's) to 16 int32 lanes.
static inline __attribute__((always_inline, target(Q4KZ_TARGET))) __m512i q4kz_bytes8(const uint8_t *a,
                                                                                     const uint8_t *b) {
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a), _mm_loadl_epi64((const __m128i *)b)));
}

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
// q4kz_tile stores activation row t's 16 sums (groups g and g+1) at res + t*ldr; g points at
// group g, and group g+1 follows nb blocks later.
static inline __attribute__((always_inline, target(Q4KZ_TARGET))) void q4kz_tile(const uint8_t *g, int nb,
                                                                               const int8_t *aq, const float *ad,
                                                                               const int16_t *asums, int NA,
                                                                               float *res, int64_t ldr) {
    __m512 acc[Q4KZ_NA];
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int64_t astride = (int64_t)nb * 256, gstride = (int64_t)nb * 1184;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = g + (int64_t)b * 1184, *blk1 = blk + gstride;
        const int8_t *ab = aq + (int64_t)b * 256;
        __m512i isum[Q4KZ_NA];
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const int64_t qo = 160 + 256 * q;
            const int8_t *alo = ab + 32 * slot_of_sub[2 * q], *ahi = ab + 32 * slot_of_sub[2 * q + 1];
            __m512i plo[Q4KZ_NA], phi[Q4KZ_NA];
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++) plo[t] = phi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = q4kz_pair(blk + qo + 32 * k, blk1 + qo + 32 * k);
                const __m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
                for (int t = 0; t < NA; t++) {
                    int32_t a0, a1;
                    memcpy(&a0, alo + t * astride + 4 * k, 4);
                    memcpy(&a1, ahi + t * astride + 4 * k, 4);
                    plo[t] = _mm512_dpbusd_epi32(plo[t], wl, _mm512_set1_epi32(a0));
                    phi[t] = _mm512_dpbusd_epi32(phi[t], wh, _mm512_set1_epi32(a1));
                }
            }
            const __m512i sl = q4kz_bytes8(blk + 32 + 16 * q, blk1 + 32 + 16 * q);
            const __m512i sh = q4kz_bytes8(blk + 40 + 16 * q, blk1 + 40 + 16 * q);
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(plo[t], sl), _mm512_mullo_epi32(phi[t], sh)));
        }
        // q4kp_block_end's float steps, 16 rows wide
        const __m512 dv = _mm512_cvtph_ps(q4kz_halves(blk, blk1));
        const __m512 dmv = _mm512_cvtph_ps(q4kz_halves(blk + 16, blk1 + 16));
        __m512i mn[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) mn[j] = _mm512_cvtepu8_epi16(q4kz_halves(blk + 96 + 16 * j, blk1 + 96 + 16 * j));
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) {
            const int64_t at = (int64_t)t * nb + b;
            __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                int32_t s2;
                memcpy(&s2, asums + at * 8 + 2 * j, 4);
                msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mn[j], _mm512_set1_epi32(s2)));
            }
            const __m512 da = _mm512_set1_ps(ad[at]);
            const __m512 x = _mm512_mul_ps(_mm512_mul_ps(dv, da), _mm512_cvtepi32_ps(isum[t]));
            const __m512 y = _mm512_mul_ps(_mm512_mul_ps(dmv, da), _mm512_cvtepi32_ps(msum));
            acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(x, y));
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) _mm512_storeu_ps(res + t * ldr, acc[t]);
}

#define Q4KZ_TILE(NA)                                                                                             \
    static __attribute__((noinline, target(Q4KZ_TARGET))) void q4kz_tile_##NA(                                    \
        const uint8_t *g, int nb, const int8_t *aq, const float *ad, const int16_t *asums, float *res,            \
        int64_t ldr) {                                                                                            \
        q4kz_tile(g, nb, aq, ad, asums, NA, res, ldr);                                                            \
    }
Q4KZ_TILE(1) Q4KZ_TILE(2) Q4KZ_TILE(3) Q4KZ_TILE(4) Q4KZ_TILE(5) Q4KZ_TILE(6) Q4KZ_TILE(7) Q4KZ_TILE(8)
#undef Q4KZ_TILE
#pragma GCC pop_options

// Q4KZ_MIN_ROWS is the fewest activation rows q4kz_tile takes. With fewer, the weights'
// one pass from memory decides, and there the two-group tile read slower than q4kv_tile (Zen 5,
// Q4_K 3072x1024 streamed from memory, 2 threads, ms per product, this tile against
// q4kv_tile: 2 rows 0.09-0.11 against 0.06, 8 rows 0.16-0.18 against 0.13-0.14, 16 rows
// 0.22-0.25 against 0.25-0.40; in cache, 16 rows 0.16 against 0.26).
#define Q4KZ_MIN_ROWS 16

// q4_k_packed_vnni512 runs groups [g0, g1) two at a time through q4kz_tile while both are
// whole, and what is left (one group, or a last partial one) through q4_k_packed_vnni256.
void q4_k_packed_vnni512(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad,
                         const int16_t *asums, int n, float *out, int64_t ldo) {
    static const q4k_tile_fn tiles[Q4KZ_NA] = {q4kz_tile_1, q4kz_tile_2, q4kz_tile_3, q4kz_tile_4,
                                               q4kz_tile_5, q4kz_tile_6, q4kz_tile_7, q4kz_tile_8};
    if (n < Q4KZ_MIN_ROWS) {
        q4_k_packed_vnni256(p, rows, nb, g0, g1, aq, ad, asums, n, out, ldo);
        return;
    }
    int g = g0;
    for (; g + 2 <= g1 && 8 * (g + 2) <= rows; g += 2) {
        const uint8_t *gp = p + (int64_t)g * nb * 1184;
        for (int i = 0; i < n; i += Q4KZ_NA) {
            const int na = n - i < Q4KZ_NA ? n - i : Q4KZ_NA;
            tiles[na - 1](gp, nb, aq + (int64_t)i * nb * 256, ad + (int64_t)i * nb, asums + (int64_t)i * nb * 8,
                          out + (int64_t)i * ldo + 8 * g, ldo);
        }
    }
    if (g < g1) q4_k_packed_vnni256(p, rows, nb, g, g1, aq, ad, asums, n, out, ldo);
}

// Packed Q6_K (pack.go's layout) with AVX2: each step rebuilds 4 six-bit quants of each of the
// 8 rows for two 32-weight chunks (low nibbles from one vector, high bits from another) and
// meets them with broadcast activations as for Q4_K; vpmaddubsw's pairs (at most 2 * 63 * 127)
// add in int16 two steps at a time, then vpmaddwd applies the rows' int8 scales of those 16
// weights. The -32 offset of the quants is taken off at the end of the block as 32 * the sum
// of scale * activation sum per 16 weights. The float arithmetic per output is goDotQ6_K's.
static inline __attribute__((always_inline, target(Q8P_TARGET))) __m256i q6kp_scales(const uint8_t *p) {
    const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s, 16));
}

static inline __attribute__((always_inline, target(Q8P_TARGET))) void q6kp_tile(const uint8_t *g, int nb,
                                                                              const int8_t *aq, const float *ad,
                                                                              const int16_t *asums, int NA,
                                                                              float *res) {
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NA; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = g + (int64_t)b * 1680;
        __m256i isum[4];
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c2 = 0; c2 < 4; c2++) {
            const uint8_t *lo = blk + 144 + 256 * c2, *hi = blk + 1168 + 256 * (c2 >> 1);
            const int sh = 4 * (c2 & 1); // bit of chunk 2*c2's high bits in the high-bit bytes
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
                const __m256i sc0 = q6kp_scales(blk + 16 + 8 * (4 * c2 + half));
                const __m256i sc1 = q6kp_scales(blk + 16 + 8 * (4 * c2 + 2 + half));
#pragma GCC unroll 2
                for (int k2 = 0; k2 < 2; k2++) {
                    __m256i p0[4], p1[4];
#pragma GCC unroll 2
                    for (int kk = 0; kk < 2; kk++) {
                        const int k = 4 * half + 2 * k2 + kk;
                        const __m256i L = _mm256_loadu_si256((const __m256i *)(lo + 32 * k));
                        const __m256i H = _mm256_loadu_si256((const __m256i *)(hi + 32 * k));
                        const __m256i w0 = _mm256_or_si256(_mm256_and_si256(L, m4),
                                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, sh), m3), 4));
                        const __m256i w1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), m4),
                                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, sh + 2), m3), 4));
#pragma GCC unroll 4
                        for (int t = 0; t < NA; t++) {
                            const int8_t *a = aq + ((int64_t)t * nb + b) * 256 + 64 * c2 + 4 * k;
                            int32_t a0, a1;
                            memcpy(&a0, a, 4);
                            memcpy(&a1, a + 32, 4);
                            const __m256i m0 = _mm256_maddubs_epi16(w0, _mm256_set1_epi32(a0));
                            const __m256i m1 = _mm256_maddubs_epi16(w1, _mm256_set1_epi32(a1));
                            p0[t] = kk ? _mm256_add_epi16(p0[t], m0) : m0;
                            p1[t] = kk ? _mm256_add_epi16(p1[t], m1) : m1;
                        }
                    }
#pragma GCC unroll 4
                    for (int t = 0; t < NA; t++)
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(p0[t], sc0), _mm256_madd_epi16(p1[t], sc1)));
                }
            }
        }
        // Scale pairs (s[2q], s[2q+1]) per row for the offset's correction.
        __m256i sp[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            const __m128i e = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(blk + 16 + 16 * q)));
            const __m128i o = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(blk + 16 + 16 * q + 8)));
            sp[q] = _mm256_set_m128i(_mm_unpackhi_epi16(e, o), _mm_unpacklo_epi16(e, o));
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) {
                int32_t s2;
                memcpy(&s2, asums + ab * 16 + 2 * q, 4);
                corr = _mm256_add_epi32(corr, _mm256_madd_epi16(sp[q], _mm256_set1_epi32(s2)));
            }
            const __m256i is = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr, 5));
            const __m256 x = _mm256_mul_ps(_mm256_mul_ps(dv, _mm256_set1_ps(ad[ab])), _mm256_cvtepi32_ps(is));
            acc[t] = _mm256_add_ps(acc[t], x);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NA; t++) _mm256_storeu_ps(res + 8 * t, acc[t]);
}

#define Q6KP_TILE(NA)                                                                                             \
    static __attribute__((noinline, target(Q8P_TARGET))) void q6kp_tile_##NA(                                     \
        const uint8_t *g, int nb, const int8_t *aq, const float *ad, const int16_t *asums, float *res) {          \
        q6kp_tile(g, nb, aq, ad, asums, NA, res);                                                                 \
    }
Q6KP_TILE(1) Q6KP_TILE(2) Q6KP_TILE(3) Q6KP_TILE(4)
#undef Q6KP_TILE

// q6_k_packed_avx2: as q4_k_packed_avx2 for packed Q6_K (asums: 16 sums per activation block).
__attribute__((target(Q8P_TARGET))) void q6_k_packed_avx2(const uint8_t *p, int rows, int nb, int g0, int g1,
                                                           const int8_t *aq, const float *ad, const int16_t *asums,
                                                           int n, float *out, int64_t ldo) {
    typedef void (*tile_fn)(const uint8_t *, int, const int8_t *, const float *, const int16_t *, float *);
    static const tile_fn tiles[4] = {q6kp_tile_1, q6kp_tile_2, q6kp_tile_3, q6kp_tile_4};
    float res[32];
    for (int g = g0; g < g1; g++) {
        const uint8_t *gp = p + (int64_t)g * nb * 1680;
        const int nr = rows - 8 * g < 8 ? rows - 8 * g : 8;
        for (int i = 0; i < n; i += 4) {
            const int na = n - i < 4 ? n - i : 4;
            tiles[na - 1](gp, nb, aq + (int64_t)i * nb * 256, ad + (int64_t)i * nb, asums + (int64_t)i * nb * 16, res);
            for (int t = 0; t < na; t++) memcpy(out + (int64_t)(i + t) * ldo + 8 * g, res + 8 * t, (size_t)nr * 4);
        }
    }
}

// Activation quantization with AVX2, the same operations as the AVX-512 quantizer above (and
// quantizeAct in Go): the same quants, scales and sums bit for bit.
static inline __attribute__((always_inline, target(Q8P_TARGET))) float qa2_block(const float *x, int n, int8_t *q,
                                                                               int32_t *s32) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(3.40282346638528859811704183484516925e+38F);
    __m256 amax = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < n; i += 8) {
        const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(v, big, _CMP_NLE_UQ));
        amax = _mm256_max_ps(amax, v);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float am = _mm_cvtss_f32(m4);
    if (bad || am == 0) {
        memset(q, 0, (size_t)n);
        for (int k = 0; k < n / 32; k++) s32[k] = 0;
        return bad ? __builtin_nanf("") : 0.0f;
    }
    const __m256 id = _mm256_set1_ps(127 / am);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < n; i += 32) {
        const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), id));
        const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), id));
        const __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), id));
        const __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), id));
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(p, perm));
        const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        s32[i / 32] = _mm_cvtsi128_si32(h);
    }
    return am / 127;
}

// qa_q4k_avx2 and qa_q32_avx2: qa_q4k and qa_q32 with AVX2.
__attribute__((target(Q8P_TARGET))) void qa_q4k_avx2(const float *x, int64_t nblk, int8_t *qs, float *d,
                                                      int16_t *sums) {
    int8_t q[256];
    int32_t s32[8];
    for (int64_t b = 0; b < nblk; b++) {
        d[b] = qa2_block(x + b * 256, 256, q, s32);
        for (int s = 0; s < 8; s++) {
            memcpy(qs + b * 256 + 32 * slot_of_sub[s], q + 32 * s, 32);
            sums[b * 8 + s] = (int16_t)s32[s];
        }
    }
}

__attribute__((target(Q8P_TARGET))) void qa_q32_avx2(const float *x, int64_t nblk, int8_t *qs, float *d,
                                                      int32_t *bias, int32_t *lane, int32_t off) {
    int32_t s;
    for (int64_t b = 0; b < nblk; b++) {
        d[b] = qa2_block(x + b * 32, 32, qs + b * 32, &s);
        bias[b * 8] = -off * s;
        for (int k = 1; k < 8; k++) bias[b * 8 + k] = 0;
        if (lane) lane[b] = -16 * s;
    }
}
