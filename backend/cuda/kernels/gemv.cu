// The skinny decode GEMM for bf16 weights: out[r][n] (+)= sum_k bf16(x[r][k]) * w[n][k] for the
// decode rows of a step. A warp owns one output column n and streams its weight row once for up
// to GV_ROWS activation rows (16-byte loads, lane l taking k = 8l + 256i), accumulating each row
// in f32 in registers, then a butterfly over the warp. Many CTAs over N keep every SM streaming.
// A row's arithmetic never depends on the other rows of its group or on the batch, so decode
// rows stay batch-invariant; prefill rows use gemm_bf16. Needs K % 8 == 0 and ldx % 4 == 0.
// Grid (ceil(M/GV_ROWS), ceil(N/GV_WARPS)), block 32*GV_WARPS: the row groups of one column block
// are neighbours, so a weight row re-read for a second group of rows comes from L2.
#include "kern.cuh"

#define GV_ROWS 16
#define GV_WARPS 8

extern "C" __global__ void gemv_bf16(float* out, const float* x, const bf16* w, int M, int N, int K, int ldx, int ldo,
                                     int accumulate) {
  int lane = tid() & 31;
  int n = bid_y() * GV_WARPS + (tid() >> 5);
  int r0 = bid_x() * GV_ROWS;
  int nr = imin(GV_ROWS, M - r0);
  if (n >= N || nr <= 0) return;  // whole warps leave; no block barrier follows
  const float* xg = x + (u64)r0 * ldx;
  const bf16* wn = w + (u64)n * K;
  float acc[GV_ROWS];
#pragma unroll
  for (int r = 0; r < GV_ROWS; r++) acc[r] = 0;
  for (int k0 = lane * 8; k0 < K; k0 += 256) {
    u32x4 q = ldg_nc4(wn + k0);
    float wv[8] = {bits_f(q.x << 16), bits_f(q.x & 0xffff0000u), bits_f(q.y << 16), bits_f(q.y & 0xffff0000u),
                   bits_f(q.z << 16), bits_f(q.z & 0xffff0000u), bits_f(q.w << 16), bits_f(q.w & 0xffff0000u)};
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) {
      if (r < nr) {
        const f32x4* xp = (const f32x4*)(xg + (u64)r * ldx + k0);
        f32x4 a = xp[0], b = xp[1];
        float s = acc[r];
        s += round_bf(a.x) * wv[0];
        s += round_bf(a.y) * wv[1];
        s += round_bf(a.z) * wv[2];
        s += round_bf(a.w) * wv[3];
        s += round_bf(b.x) * wv[4];
        s += round_bf(b.y) * wv[5];
        s += round_bf(b.z) * wv[6];
        s += round_bf(b.w) * wv[7];
        acc[r] = s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < GV_ROWS; r++) {
    if (r < nr) {
      float v = warp_sum(acc[r]);
      if (lane == 0) {
        float* o = out + (u64)(r0 + r) * ldo + n;
        *o = accumulate ? *o + v : v;
      }
    }
  }
}
