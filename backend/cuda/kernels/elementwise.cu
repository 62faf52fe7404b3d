// Element-wise kernels: embedding gather, RMSNorm, SwiGLU, residual and bias adds.
#include "kern.cuh"

// out[r] = float(table[ids[r]]) (a bf16 table, or f32 with table_f32): one block per row.
extern "C" __global__ void embed_gather(float* out, const bf16* table, const int* ids, int rows, int h, int table_f32) {
  int r = bid_x();
  if (r >= rows) return;
  float* dst = out + (u64)r * h;
  if (table_f32) {
    const float* src = (const float*)table + (u64)ids[r] * h;
    for (int i = tid(); i < h; i += ntid()) dst[i] = src[i];
    return;
  }
  const bf16* src = table + (u64)ids[r] * h;
  for (int i = tid(); i < h; i += ntid()) dst[i] = bf2f(src[i]);
}

// out[r] = w * x / sqrt(mean(x^2) + eps), x = x[row_idx ? row_idx[r] : r]: one block per row.
extern "C" __global__ void rmsnorm(float* out, const float* x, const float* w, const int* row_idx, int rows, int h,
                                   float eps) {
  __shared__ float red[32];
  int r = bid_x();
  if (r >= rows) return;
  const float* src = x + (u64)(row_idx ? row_idx[r] : r) * h;
  float ss = 0;
  for (int i = tid(); i < h; i += ntid()) ss += src[i] * src[i];
  ss = block_sum(ss, red);
  float scale = rcp(sqrt_rn(ss / (float)h + eps));
  float* dst = out + (u64)r * h;
  for (int i = tid(); i < h; i += ntid()) dst[i] = w[i] * (src[i] * scale);
}

// gu[r][i] = silu(gu[r][i]) * gu[r][inter + i].
extern "C" __global__ void swiglu(float* gu, int rows, int inter) {
  int r = bid_x();
  if (r >= rows) return;
  float* g = gu + (u64)r * 2 * inter;
  for (int i = tid(); i < inter; i += ntid()) {
    float v = g[i];
    g[i] = v * rcp(1.0f + expf_(-v)) * g[inter + i];
  }
}

// x[r*ld + i] += b[r*ldb + i] for i < n (ldb 0: one bias row for every row).
extern "C" __global__ void residual_add(float* x, const float* b, int rows, int n, int ld, int ldb) {
  int r = bid_x();
  if (r >= rows) return;
  float* dst = x + (u64)r * ld;
  const float* src = b + (u64)r * ldb;
  for (int i = tid(); i < n; i += ntid()) dst[i] += src[i];
}

// fill_hash is a counter hash (SplitMix64's finaliser) of seed and i.
KERN u64 fill_hash(u32 seed, u64 i) {
  u64 x = i * 0x9e3779b97f4a7c15ull + ((u64)seed << 32 | seed);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// out[i] = bf16(scale * (2u - 1)), u = the top 24 bits of fill_hash / 2^24: benchmark weights
// made on the device. Each block fills 1024 elements.
extern "C" __global__ void fill_bf16(bf16* out, u64 n, u32 seed, float scale) {
  u64 base = (u64)bid_x() * 1024;
  for (u32 j = tid(); j < 1024; j += ntid()) {
    u64 i = base + j;
    if (i >= n) return;
    float u = (float)(fill_hash(seed, i) >> 40) * (1.0f / 16777216.0f);
    out[i] = f2bf(scale * (2.0f * u - 1.0f));
  }
}

// out[r*k + i] = bf16(x[r*ldx + i]): the bf16 activations of a cuBLASLt GEMM (which takes no
// f32 B with a bf16 A), rounded as the built-in GEMMs round them. One block per row.
extern "C" __global__ void cast_bf16(bf16* out, const float* x, int rows, int k, int ldx) {
  int r = bid_x();
  if (r >= rows) return;
  const float* src = x + (u64)r * ldx;
  bf16* dst = out + (u64)r * k;
  for (int i = tid(); i < k; i += ntid()) dst[i] = f2bf(src[i]);
}
