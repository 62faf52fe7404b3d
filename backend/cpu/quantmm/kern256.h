//go:build cgo && amd64

// kern256.h is the 256-bit kernel template, included by kernels_amd64.c once per instruction
// set: FN(name) names the functions, TARGET is their target attribute, and VNNI selects the
// dot-product instructions (vpdpbusd / vpdpwssd through DPBUSD / DPWSSD) over AVX2's
// vpmaddubsw + vpmaddwd, and Q4K_RP is the most weight-row pairs one Q4_K tile takes (2 where
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

// Q4_K: activation rows against weight rows taken in pairs, each 256-bit vector holding 16
// bytes of one row in its low half and the same 16 bytes of the other row in its high half.
// Then one vpmaddubsw covers 16 weights of each row against a 128-bit broadcast of the
// activations, the two vpmaddubsw of a sub-block add in int16 (at most 4 * 15 * 127), and one
// vpdpwssd applies both rows' sub-block scales: 3 multiply instructions per 64 weights where one
// row at a time needs 4. The int32 lanes 0-3 then belong to the first row and 4-7 to the second,
// so d, dmin and the mins correction go on as lane-wise vectors, and each row's result is the
// same sum of its own four lanes whichever half it sits in (a lone last row pairs with itself).
// The activations are in the q4kOrder slot order (sub-block s at slot slot_of_sub[s]).
static inline __attribute__((always_inline, target(TARGET))) float FN(hsum4)(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline, target(TARGET))) void FN(q4_k_ptile)(const uint8_t *w, int64_t rb, int nrows, int nb, const int8_t *aq, const float *ad, const int16_t *asums, int RP, int NA, int pf, float *out, int64_t ldo) {
    __m256 acc[Q4K_RP][4];
    const uint8_t *r0[Q4K_RP], *r1[Q4K_RP];
#pragma GCC unroll 2
    for (int p = 0; p < RP; p++) {
        r0[p] = w + 2 * p * rb;
        r1[p] = 2 * p + 1 < nrows ? r0[p] + rb : r0[p];
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) acc[p][t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    // Byte controls that broadcast int16 k of each 128-bit lane to all eight words of the lane.
    const __m256i bc[8] = {
        _mm256_set1_epi16(0x0100), _mm256_set1_epi16(0x0302), _mm256_set1_epi16(0x0504), _mm256_set1_epi16(0x0706),
        _mm256_set1_epi16(0x0908), _mm256_set1_epi16(0x0b0a), _mm256_set1_epi16(0x0d0c), _mm256_set1_epi16(0x0f0e),
    };
    const __m256i dIdx = _mm256_set_epi32(2, 2, 2, 2, 0, 0, 0, 0), mIdx = _mm256_set_epi32(3, 3, 3, 3, 1, 1, 1, 1);
    static const int slot_of_sub[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int b = 0; b < nb; b++) {
        __m256i sc16[Q4K_RP], mn16[Q4K_RP];
        __m256 dv[Q4K_RP], dmv[Q4K_RP];
        const uint8_t *q0[Q4K_RP], *q1[Q4K_RP];
#pragma GCC unroll 2
        for (int p = 0; p < RP; p++) {
            const uint8_t *blk[2] = {r0[p] + 144 * b, r1[p] + 144 * b};
            uint64_t sc[2], mn[2];
            uint32_t dd[2];
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                uint32_t u[3];
                memcpy(&dd[h], blk[h], 4);
                memcpy(u, blk[h] + 4, 12);
                sc[h] = (uint64_t)(u[0] & 0x3f3f3f3f) |
                        (uint64_t)((u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4)) << 32;
                mn[h] = (uint64_t)(u[1] & 0x3f3f3f3f) |
                        (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4)) << 32;
            }
            // [d0, dmin0, d1, dmin1] spread to d0 x4 | d1 x4 and dmin0 x4 | dmin1 x4.
            const __m256 f = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_set_epi32(0, 0, (int)dd[1], (int)dd[0])));
            dv[p] = _mm256_permutevar8x32_ps(f, dIdx);
            dmv[p] = _mm256_permutevar8x32_ps(f, mIdx);
            sc16[p] = _mm256_cvtepu8_epi16(_mm_set_epi64x((int64_t)sc[1], (int64_t)sc[0]));
            mn16[p] = _mm256_cvtepu8_epi16(_mm_set_epi64x((int64_t)mn[1], (int64_t)mn[0]));
            q0[p] = blk[0] + 16;
            q1[p] = blk[1] + 16;
            // The first activation tile over a group of rows (pf) reads the weights from memory,
            // the others from L1; fetch the next group of rows' block (the memory right after
            // this group's) while this one computes, which the hardware prefetchers do not do
            // for several interleaved rows. A hint past the matrix's end is dropped.
#pragma GCC unroll 2
            for (int h = 0; h < 2 && pf; h++) {
                const char *next = (const char *)blk[h] + 2 * RP * rb;
                _mm_prefetch(next, _MM_HINT_T0);
                _mm_prefetch(next + 64, _MM_HINT_T0);
                _mm_prefetch(next + 143, _MM_HINT_T0);
            }
        }
        __m256i isum[Q4K_RP][4];
#pragma GCC unroll 2
        for (int p = 0; p < RP; p++)
#pragma GCC unroll 4
            for (int t = 0; t < NA; t++) isum[p][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m256i alo[Q4K_RP], ahi[Q4K_RP], blo[Q4K_RP], bhi[Q4K_RP], slo[Q4K_RP], shi[Q4K_RP];
#pragma GCC unroll 2
            for (int p = 0; p < RP; p++) {
                // A: bytes 0-15 of the sub-block pair's 32, B: bytes 16-31, for both rows.
                const __m256i A = _mm256_loadu2_m128i((const __m128i *)(q1[p] + 32 * g), (const __m128i *)(q0[p] + 32 * g));
                const __m256i B = _mm256_loadu2_m128i((const __m128i *)(q1[p] + 32 * g + 16), (const __m128i *)(q0[p] + 32 * g + 16));
                alo[p] = _mm256_and_si256(A, m4);
                ahi[p] = _mm256_and_si256(_mm256_srli_epi16(A, 4), m4);
                blo[p] = _mm256_and_si256(B, m4);
                bhi[p] = _mm256_and_si256(_mm256_srli_epi16(B, 4), m4);
                slo[p] = _mm256_shuffle_epi8(sc16[p], bc[2 * g]);
                shi[p] = _mm256_shuffle_epi8(sc16[p], bc[2 * g + 1]);
            }
#pragma GCC unroll 4
            for (int t = 0; t < NA; t++) {
                const int8_t *a = aq + ((int64_t)t * nb + b) * 256;
                const int8_t *alo8 = a + 32 * slot_of_sub[2 * g], *ahi8 = a + 32 * slot_of_sub[2 * g + 1];
                const __m256i x0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)alo8));
                const __m256i x1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(alo8 + 16)));
                const __m256i y0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ahi8));
                const __m256i y1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ahi8 + 16)));
#pragma GCC unroll 2
                for (int p = 0; p < RP; p++) {
                    isum[p][t] = FN(dot_ww)(isum[p][t], _mm256_add_epi16(_mm256_maddubs_epi16(alo[p], x0), _mm256_maddubs_epi16(blo[p], x1)), slo[p]);
                    isum[p][t] = FN(dot_ww)(isum[p][t], _mm256_add_epi16(_mm256_maddubs_epi16(ahi[p], y0), _mm256_maddubs_epi16(bhi[p], y1)), shi[p]);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            const __m256 dav = _mm256_set1_ps(ad[ab]);
            const __m256i as = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(asums + ab * 8)));
#pragma GCC unroll 2
            for (int p = 0; p < RP; p++) {
                const __m256 ms = _mm256_cvtepi32_ps(_mm256_madd_epi16(mn16[p], as));
                acc[p][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[p][t]), _mm256_mul_ps(dv[p], dav), acc[p][t]);
                acc[p][t] = _mm256_fnmadd_ps(ms, _mm256_mul_ps(dmv[p], dav), acc[p][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < RP; p++)
#pragma GCC unroll 4
        for (int t = 0; t < NA; t++) {
            out[(int64_t)t * ldo + 2 * p] = FN(hsum4)(_mm256_castps256_ps128(acc[p][t]));
            if (2 * p + 1 < nrows) out[(int64_t)t * ldo + 2 * p + 1] = FN(hsum4)(_mm256_extractf128_ps(acc[p][t], 1));
        }
}

// Q4_K one weight row at a time against NA (up to 3) activation rows, for few activation rows,
// where the weights are one sequential stream the hardware prefetchers follow at full speed
// (interleaved rows reach a third of it). It adds each int32 lane l to lane l+4 and then does
// the pair tile's float arithmetic on four lanes, so every result equals the pair tile's bit for
// bit: lane l of both holds the same exact integer sum over weights 4l..4l+3 and 16+4l..16+4l+3
// of every sub-block.
static inline __attribute__((always_inline, target(TARGET))) void FN(q4_k_rtile)(const uint8_t *wr, int nb, const int8_t *aq, const float *ad, const int16_t *asums, int NA, float *out, int64_t ldo) {
    __m128 acc[3];
#pragma GCC unroll 3
    for (int t = 0; t < NA; t++) acc[t] = _mm_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    static const int slot_of_sub[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = wr + 144 * b;
        const __m128 dv = _mm_set1_ps(FN(f16)(blk)), dmv = _mm_set1_ps(FN(f16)(blk + 2));
        uint32_t u[3];
        memcpy(u, blk + 4, 12);
        uint32_t sc[2], mn[2];
        sc[0] = u[0] & 0x3f3f3f3f;
        mn[0] = u[1] & 0x3f3f3f3f;
        sc[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
        mn[1] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
        const uint8_t *s8 = (const uint8_t *)sc;
        const __m128i mn16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
        const uint8_t *q = blk + 16;
        __m256i w[8], scv[8];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
            w[2 * g] = _mm256_and_si256(v, m4);
            w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            scv[2 * g] = _mm256_set1_epi16(s8[2 * g]);
            scv[2 * g + 1] = _mm256_set1_epi16(s8[2 * g + 1]);
        }
#pragma GCC unroll 3
        for (int t = 0; t < NA; t++) {
            const int64_t ab = (int64_t)t * nb + b;
            const int8_t *a = aq + ab * 256;
            __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int sub = 0; sub < 8; sub += 2) {
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(a + 32 * slot_of_sub[sub]));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(a + 32 * slot_of_sub[sub + 1]));
                isum0 = FN(dot_ww)(isum0, _mm256_maddubs_epi16(w[sub], a0), scv[sub]);
                isum1 = FN(dot_ww)(isum1, _mm256_maddubs_epi16(w[sub + 1], a1), scv[sub + 1]);
            }
            const __m256i isum = _mm256_add_epi32(isum0, isum1);
            const __m128i i4 = _mm_add_epi32(_mm256_castsi256_si128(isum), _mm256_extracti128_si256(isum, 1));
            const __m128 ms = _mm_cvtepi32_ps(_mm_madd_epi16(mn16, _mm_loadu_si128((const __m128i *)(asums + ab * 8))));
            const __m128 dav = _mm_set1_ps(ad[ab]);
            acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(i4), _mm_mul_ps(dv, dav), acc[t]);
            acc[t] = _mm_fnmadd_ps(ms, _mm_mul_ps(dmv, dav), acc[t]);
        }
    }
#pragma GCC unroll 3
    for (int t = 0; t < NA; t++) out[(int64_t)t * ldo] = FN(hsum4)(acc[t]);
}

#define Q4K_TILE(RP, NA)                                                                                          \
    static __attribute__((noinline, target(TARGET))) void FN(q4_k_ptile_##RP##x##NA)(                            \
        const uint8_t *w, int64_t rb, int nrows, int nb, const int8_t *aq, const float *ad, const int16_t *asums, \
        int pf, float *out, int64_t ldo) {                                                                      \
        FN(q4_k_ptile)(w, rb, nrows, nb, aq, ad, asums, RP, NA, pf, out, ldo);                                  \
    }
Q4K_TILE(1, 1) Q4K_TILE(1, 2) Q4K_TILE(1, 3) Q4K_TILE(1, 4)
#define Q4K_RTILE(NA)                                                                                             \
    static __attribute__((noinline, target(TARGET))) void FN(q4_k_rtile_##NA)(                                    \
        const uint8_t *w, int nb, const int8_t *aq, const float *ad, const int16_t *asums, float *out, int64_t ldo) { \
        FN(q4_k_rtile)(w, nb, aq, ad, asums, NA, out, ldo);                                                      \
    }
Q4K_RTILE(1) Q4K_RTILE(2) Q4K_RTILE(3)
#undef Q4K_RTILE
#if Q4K_RP > 1
Q4K_TILE(2, 1) Q4K_TILE(2, 2) Q4K_TILE(2, 3) Q4K_TILE(2, 4)
#endif
#undef Q4K_TILE

// q4_k: rows weight rows against m activation rows (aq, ad, asums: 8 sums per block), in tiles of
// up to Q4K_RP row pairs x 4 activation rows; fewer than 4 activation rows are memory-bound and
// take one row at a time.
__attribute__((target(TARGET))) void FN(q4_k)(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq,
                                              const float *ad, const int16_t *asums, int64_t epb, int m, float *out,
                                              int64_t ldo) {
    typedef void (*tile_fn)(const uint8_t *, int64_t, int, int, const int8_t *, const float *, const int16_t *, int, float *, int64_t);
    static const tile_fn tiles[2][4] = {
        {FN(q4_k_ptile_1x1), FN(q4_k_ptile_1x2), FN(q4_k_ptile_1x3), FN(q4_k_ptile_1x4)},
#if Q4K_RP > 1
        {FN(q4_k_ptile_2x1), FN(q4_k_ptile_2x2), FN(q4_k_ptile_2x3), FN(q4_k_ptile_2x4)},
#endif
    };
    (void)epb;
    if (m < 4) {
        typedef void (*rtile_fn)(const uint8_t *, int, const int8_t *, const float *, const int16_t *, float *, int64_t);
        static const rtile_fn rtiles[3] = {FN(q4_k_rtile_1), FN(q4_k_rtile_2), FN(q4_k_rtile_3)};
        for (int j = 0; j < rows; j++) rtiles[m - 1](w + (int64_t)j * rb, nb, aq, ad, asums, out + j, ldo);
        return;
    }
    const int tw = 2 * Q4K_RP;
    for (int j = 0; j < rows; j += tw) {
        const int nw = rows - j < tw ? rows - j : tw;
        for (int i = 0; i < m; i += 4) {
            const int na = m - i < 4 ? m - i : 4;
            tiles[(nw + 1) / 2 - 1][na - 1](w + (int64_t)j * rb, rb, nw, nb, aq + (int64_t)i * nb * 256,
                                            ad + (int64_t)i * nb, asums + (int64_t)i * nb * 8, i == 0,
                                            out + (int64_t)i * ldo + j, ldo);
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
