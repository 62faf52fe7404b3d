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
#include "kern256.h"
#undef FN
#undef TARGET
#undef VNNI

#define FN(name) name##_avxvnni
#define TARGET "avx2,fma,f16c,avxvnni"
#define VNNI 1
#define DPBUSD _mm256_dpbusd_avx_epi32
#define DPWSSD _mm256_dpwssd_avx_epi32
#include "kern256.h"
#undef FN
#undef TARGET
#undef VNNI
#undef DPBUSD
#undef DPWSSD

// The same 256-bit code with AVX-512 VL's encoding of the VNNI instructions.
#define FN(name) name##_vnni256
#define TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define VNNI 1
#define DPBUSD _mm256_dpbusd_epi32
#define DPWSSD _mm256_dpwssd_epi32
#include "kern256.h"
#undef FN
#undef TARGET
#undef VNNI
#undef DPBUSD
#undef DPWSSD
