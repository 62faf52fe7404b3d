// Element-wise kernels: embedding gather, RMSNorm, SwiGLU, residual and bias adds.
#include "kern.cuh"

// out[r] = float(table[ids[r]]): one block per row.
extern "C" __global__ void embed_gather(float* out, const bf16* table, const int* ids, int rows, int h) {
  int r = bid_x();
  if (r >= rows) return;
  const bf16* src = table + (u64)ids[r] * h;
  float* dst = out + (u64)r * h;
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
