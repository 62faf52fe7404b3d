//go:build cgo && amd64

// kern256.h is the 256-bit kernel template, included by kernels_amd64.c once per instruction
// set: FN(name) names the functions, TARGET is their target attribute, and VNNI selects the
// dot-product instructions (vpdpbusd / vpdpwssd through DPBUSD / DPWSSD) over AVX2's
// vpmaddubsw + vpmaddwd, and Q4K_NW is the most weight rows one Q4_K tile takes (2 where
// AVX-512 VL gives 32 vector registers). All integer sums are exact; the block scales are applied
// in float.

static inline __attribute__((always_inline, target(TARGET))) float FN(hsum)(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline, target(TARGET))) int FN(hsum_i32)(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline __attribute__((always_inline, target(TARGET))) float FN(f16)(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// acc + sum of products of unsigned bytes u with signed bytes s, four to an int32 lane.
static inline __attribute__((always_inline, target(TARGET))) __m256i FN(dot_us)(__m256i acc, __m256i u, __m256i s) {
#if VNNI
    return DPBUSD(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// acc + pairs of int16 products, as vpmaddwd then add.
static inline __attribute__((always_inline, target(TARGET))) __m256i FN(dot_ww)(__m256i acc, __m256i a, __m256i b) {
#if VNNI
    return DPWSSD(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// Q8_0: na activation rows against one weight row of nb blocks. Even and odd blocks accumulate
// separately so consecutive blocks' multiply-adds do not wait on each other.
static inline __attribute__((always_inline, target(TARGET))) __m256 FN(q8_0_block)(const uint8_t *blk, const int8_t *a, float da, const int32_t *bias, __m256 acc) {
    __m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
    __m256i av = _mm256_loadu_si256((const __m256i *)a);
#if VNNI
    // (w + 128) as unsigned bytes; the activations' bias row holds -128 * sum(a).
    __m256i s = FN(dot_us)(_mm256_loadu_si256((const __m256i *)bias), _mm256_xor_si256(wv, _mm256_set1_epi8((char)0x80)), av);
#else
    __m256i s = FN(dot_us)(_mm256_setzero_si256(), _mm256_abs_epi8(wv), _mm256_sign_epi8(av, wv));
    (void)bias;
#endif
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(FN(f16)(blk) * da), acc);
}

static inline __attribute__((always_inline, target(TARGET))) void FN(q8_0_tile)(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const int32_t *abias, int na, float *res) {
    __m256 acc0[4], acc1[4];
#pragma GCC unroll 4
    for (int t = 0; t < na; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 4
        for (int t = 0; t < na; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            acc0[t] = FN(q8_0_block)(wr + 34 * b, aq + ab * 32, ad[ab], abias + ab * 8, acc0[t]);
            acc1[t] = FN(q8_0_block)(wr + 34 * (b + 1), aq + (ab + 1) * 32, ad[ab + 1], abias + (ab + 1) * 8, acc1[t]);
        }
    }
    if (b < nb) {
#pragma GCC unroll 4
        for (int t = 0; t < na; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            acc0[t] = FN(q8_0_block)(wr + 34 * b, aq + ab * 32, ad[ab], abias + ab * 8, acc0[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < na; t++) res[t] = FN(hsum)(_mm256_add_ps(acc0[t], acc1[t]));
}

// Q4_0: weights are unsigned nibbles; the bias row holds -8 * sum(a).
static inline __attribute__((always_inline, target(TARGET))) void FN(q4_0_tile)(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const int32_t *abias, int na, float *res) {
    __m256 acc[4];
    for (int t = 0; t < na; t++) acc[t] = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = wr + 18 * b;
        __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
        __m256i wu = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
        float dw = FN(f16)(blk);
        for (int t = 0; t < na; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            __m256i av = _mm256_loadu_si256((const __m256i *)(aq + ab * 32));
            __m256i s = FN(dot_us)(_mm256_loadu_si256((const __m256i *)(abias + ab * 8)), wu, av);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * ad[ab]), acc[t]);
        }
    }
    for (int t = 0; t < na; t++) res[t] = FN(hsum)(acc[t]);
}

// Q4_K: NW weight rows (rb bytes apart, nb blocks) x NA activation rows, out[t*ldo + r]. The
// activations are in the q4kOrder slot order, so 32-byte nibble loads line up. Each step covers
// one pair of sub-blocks: every weight row's nibbles and scales are unpacked once for all NA
// activation rows, and every activation load serves all NW weight rows (at 16 activation rows
// of 3072 columns the activations no longer fit L1, so fewer passes over them matter). The
// integer sums of a block stay exact; d, dmin and the activation scale are applied in float at
// the block's end, the same operations for every (row, activation row), so a result does not
// depend on the tile it was computed in.
static inline __attribute__((always_inline, target(TARGET))) void FN(q4_k_tile)(const uint8_t *w, int64_t rb, int nb, const int8_t *aq, const float *ad, const int16_t *asums, int NW, int NA, float *out, int64_t ldo) {
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) acc[r][t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    // Byte controls that broadcast int16 scale k of a 128-bit lane to all eight of its words.
    const __m256i bc[8] = {
        _mm256_set1_epi16(0x0100), _mm256_set1_epi16(0x0302), _mm256_set1_epi16(0x0504), _mm256_set1_epi16(0x0706),
        _mm256_set1_epi16(0x0908), _mm256_set1_epi16(0x0b0a), _mm256_set1_epi16(0x0d0c), _mm256_set1_epi16(0x0f0e),
    };
    // The activations hold sub-block s at slot slot_of_sub[s] (q4kOrder is its own inverse).
    static const int slot_of_sub[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int b = 0; b < nb; b++) {
        __m256i sc16[2];
        __m128i mn16[2];
        __m256 dv[2], dmv[2];
        const uint8_t *q[2];
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++) {
            const uint8_t *blk = w + r * rb + 144 * b;
            dv[r] = _mm256_set1_ps(FN(f16)(blk));
            dmv[r] = _mm256_set1_ps(FN(f16)(blk + 2));
            uint32_t u[3];
            memcpy(u, blk + 4, 12);
            const uint64_t sc = (uint64_t)(u[0] & 0x3f3f3f3f) |
                                (uint64_t)((u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4)) << 32;
            const uint64_t mn = (uint64_t)(u[1] & 0x3f3f3f3f) |
                                (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4)) << 32;
            sc16[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)sc)));
            mn16[r] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)mn));
            q[r] = blk + 16;
        }
        __m256i isum[2][4];
#pragma GCC unroll 2
        for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
            for (int t = 0; t < NA; t++) isum[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m256i wlo[2], whi[2], slo[2], shi[2];
#pragma GCC unroll 2
            for (int r = 0; r < NW; r++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(q[r] + 32 * g));
                wlo[r] = _mm256_and_si256(v, m4);                         // sub-block 2g
                whi[r] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); // sub-block 2g+1
                slo[r] = _mm256_shuffle_epi8(sc16[r], bc[2 * g]);
                shi[r] = _mm256_shuffle_epi8(sc16[r], bc[2 * g + 1]);
            }
#pragma GCC unroll 4
            for (int t = 0; t < NA; t++) {
                const int8_t *a = aq + ((int64_t)t * nb + b) * 256;
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(a + 32 * slot_of_sub[2 * g]));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(a + 32 * slot_of_sub[2 * g + 1]));
#pragma GCC unroll 2
                for (int r = 0; r < NW; r++) {
                    isum[r][t] = FN(dot_ww)(isum[r][t], _mm256_maddubs_epi16(wlo[r], a0), slo[r]);
                    isum[r][t] = FN(dot_ww)(isum[r][t], _mm256_maddubs_epi16(whi[r], a1), shi[r]);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            const __m256 dav = _mm256_set1_ps(ad[ab]);
            const __m128i as = _mm_loadu_si128((const __m128i *)(asums + ab * 8));
#pragma GCC unroll 2
            for (int r = 0; r < NW; r++) {
                const __m128 ms = _mm_cvtepi32_ps(_mm_madd_epi16(mn16[r], as));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_mul_ps(dv[r], dav), acc[r][t]);
                acc[r][t] = _mm256_fnmadd_ps(_mm256_zextps128_ps256(ms), _mm256_mul_ps(dmv[r], dav), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NW; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) out[(int64_t)t * ldo + r] = FN(hsum)(acc[r][t]);
}

#define Q4K_TILE(NW, NA)                                                                                             \
    static __attribute__((noinline, target(TARGET))) void FN(q4_k_tile_##NW##x##NA)(                                \
        const uint8_t *w, int64_t rb, int nb, const int8_t *aq, const float *ad, const int16_t *asums, float *out, \
        int64_t ldo) {                                                                                             \
        FN(q4_k_tile)(w, rb, nb, aq, ad, asums, NW, NA, out, ldo);                                                 \
    }
Q4K_TILE(1, 1) Q4K_TILE(1, 2) Q4K_TILE(1, 3) Q4K_TILE(1, 4)
Q4K_TILE(2, 1) Q4K_TILE(2, 2) Q4K_TILE(2, 3) Q4K_TILE(2, 4)
#undef Q4K_TILE

// q4_k: rows weight rows against m activation rows (aq, ad, asums: 8 sums per block), in tiles of
// up to Q4K_NW weight rows x 4 activation rows. Fewer than 4 activation rows are memory-bound and
// keep one weight row at a time, one sequential stream for the prefetchers.
__attribute__((target(TARGET))) void FN(q4_k)(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq,
                                              const float *ad, const int16_t *asums, int64_t epb, int m, float *out,
                                              int64_t ldo) {
    typedef void (*tile_fn)(const uint8_t *, int64_t, int, const int8_t *, const float *, const int16_t *, float *, int64_t);
    static const tile_fn tiles[2][4] = {
        {FN(q4_k_tile_1x1), FN(q4_k_tile_1x2), FN(q4_k_tile_1x3), FN(q4_k_tile_1x4)},
        {FN(q4_k_tile_2x1), FN(q4_k_tile_2x2), FN(q4_k_tile_2x3), FN(q4_k_tile_2x4)},
    };
    (void)epb;
    const int tw = m < 4 ? 1 : Q4K_NW;
    for (int j = 0; j < rows; j += tw) {
        const int nw = rows - j < tw ? rows - j : tw;
        for (int i = 0; i < m; i += 4) {
            const int na = m - i < 4 ? m - i : 4;
            tiles[nw - 1][na - 1](w + (int64_t)j * rb, rb, nb, aq + (int64_t)i * nb * 256, ad + (int64_t)i * nb,
                                  asums + (int64_t)i * nb * 8, out + (int64_t)i * ldo + j, ldo);
        }
    }
}

// Q6_K: 6-bit unsigned quants minus 32, int8 scales per 16 weights.
static inline __attribute__((always_inline, target(TARGET))) void FN(q6_k_tile)(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const int16_t *asums, int na, float *res) {
    __m256 acc[4];
    for (int t = 0; t < na; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = wr + 210 * b;
        const float d = FN(f16)(blk + 208);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
        __m256i w[8], scv[8];
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * n));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * n + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n));
            w[4 * n + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
            w[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
            w[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
            w[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
        }
        // 32 weights (two scale groups) per vector: lanes 0-7 of the int16 products take the
        // first scale, lanes 8-15 the second.
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            int8_t s0 = (int8_t)blk[192 + 2 * k], s1 = (int8_t)blk[192 + 2 * k + 1];
            scv[k] = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
        }
#pragma GCC unroll 4
        for (int t = 0; t < na; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            const int8_t *a = aq + ab * 256;
            __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(a + 32 * k));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(a + 32 * k + 32));
                isum0 = FN(dot_ww)(isum0, _mm256_maddubs_epi16(w[k], a0), scv[k]);
                isum1 = FN(dot_ww)(isum1, _mm256_maddubs_epi16(w[k + 1], a1), scv[k + 1]);
            }
            __m256i isum = _mm256_add_epi32(isum0, isum1);
            __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(asums + ab * 16)));
            isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * ad[ab]), acc[t]);
        }
    }
    for (int t = 0; t < na; t++) res[t] = FN(hsum)(acc[t]);
}

#define DEFINE_ROWS(kind, atype)                                                                              \
    __attribute__((target(TARGET))) void FN(kind)(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq, \
                                                  const float *ad, const atype *aextra, int64_t extra_per_block, int m, \
                                                  float *out, int64_t ldo) {                                   \
        const int64_t qper = (int64_t)nb * (kind##_qk);                                                        \
        for (int j = 0; j < rows; j++) {                                                                       \
            const uint8_t *wr = w + j * rb;                                                                    \
            float res[4];                                                                                      \
            int i = 0;                                                                                         \
            for (; i + 4 <= m; i += 4) {                                                                       \
                FN(kind##_tile)(wr, nb, aq + i * qper, ad + (int64_t)i * nb, aextra + (int64_t)i * nb * extra_per_block, 4, res); \
                for (int t = 0; t < 4; t++) out[(i + t) * ldo + j] = res[t];                                   \
            }                                                                                                  \
            for (; i < m; i++) {                                                                               \
                FN(kind##_tile)(wr, nb, aq + i * qper, ad + (int64_t)i * nb, aextra + (int64_t)i * nb * extra_per_block, 1, res); \
                out[i * ldo + j] = res[0];                                                                     \
            }                                                                                                  \
        }                                                                                                      \
    }

DEFINE_ROWS(q8_0, int32_t)
DEFINE_ROWS(q4_0, int32_t)
DEFINE_ROWS(q6_k, int16_t)
#undef DEFINE_ROWS
