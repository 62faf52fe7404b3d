// The skinny decode GEMM for bf16 weights: out[r][n] (+)= sum_k bf16(x[r][k]) * w[n][k] for the
// decode rows of a step. A warp owns one output column n and streams its weight row once for up
// to GV_ROWS activation rows (16-byte loads, lane l taking k = 8l + 256i in increasing i),
// accumulating each row in f32 in registers, then a butterfly over the warp. Many CTAs over N keep
// every SM streaming. The activations go through shared memory a tile of GV_TILE columns at a
// time, rounded to bf16 once per CTA rather than once per output column; each lane's weight loads
// for a tile are issued before the tile is staged, so they are in flight together.
// A row's arithmetic never depends on the other rows of its group or on the batch, so decode
// rows stay batch-invariant; prefill rows use gemm_bf16. Needs K % 8 == 0 and ldx % 4 == 0.
// Grid (ceil(M/GV_ROWS), ceil(N/GV_WARPS)), block 32*GV_WARPS: the row groups of one column block
// are neighbours, so a weight row re-read for a second group of rows comes from L2.
#include "kern.cuh"

#define GV_ROWS 16
#define GV_WARPS 8
#define GV_TILE 1024
#define GV_CHUNKS (GV_TILE / 256)

extern "C" __global__ void gemv_bf16(float* out, const float* x, const bf16* w, int M, int N, int K, int ldx, int ldo,
                                     int accumulate) {
  __shared__ __attribute__((aligned(16))) bf16 xs[GV_ROWS][GV_TILE];
  int lane = tid() & 31;
  int n = bid_y() * GV_WARPS + (tid() >> 5);
  int r0 = bid_x() * GV_ROWS;
  int nr = imin(GV_ROWS, M - r0);
  if (nr <= 0) return;  // the whole block: no barrier is reached
  bool active = n < N;  // warps past N still stage activations for the barriers
  const float* xg = x + (u64)r0 * ldx;
  const bf16* wn = w + (u64)(active ? n : 0) * K;
  float acc[GV_ROWS];
#pragma unroll
  for (int r = 0; r < GV_ROWS; r++) acc[r] = 0;
  for (int kt = 0; kt < K; kt += GV_TILE) {
    u32x4 wv[GV_CHUNKS];
#pragma unroll
    for (int j = 0; j < GV_CHUNKS; j++) {
      int k = kt + lane * 8 + j * 256;
      if (active && k < K) {
        wv[j] = ldg_nc4(wn + k);
      } else {
        wv[j].x = wv[j].y = wv[j].z = wv[j].w = 0;
      }
    }
    sync();  // the previous tile is consumed
    for (int e = tid(); e < nr * (GV_TILE / 4); e += ntid()) {
      int r = e / (GV_TILE / 4), c = (e % (GV_TILE / 4)) * 4;
      if (kt + c < K) {
        f32x4 a = *(const f32x4*)(xg + (u64)r * ldx + kt + c);
        u32* d = (u32*)&xs[r][c];
        d[0] = (u32)f2bf(a.x) | ((u32)f2bf(a.y) << 16);
        d[1] = (u32)f2bf(a.z) | ((u32)f2bf(a.w) << 16);
      }
    }
    sync();
    if (!active) continue;
#pragma unroll
    for (int j = 0; j < GV_CHUNKS; j++) {
      int c = lane * 8 + j * 256;
      if (kt + c >= K) break;
      u32x4 q = wv[j];
      float wf[8] = {bits_f(q.x << 16), bits_f(q.x & 0xffff0000u), bits_f(q.y << 16), bits_f(q.y & 0xffff0000u),
                     bits_f(q.z << 16), bits_f(q.z & 0xffff0000u), bits_f(q.w << 16), bits_f(q.w & 0xffff0000u)};
#pragma unroll
      for (int r = 0; r < GV_ROWS; r++) {
        if (r < nr) {
          u32x4 a = *(const u32x4*)&xs[r][c];
          float s = acc[r];
          s += bits_f(a.x << 16) * wf[0];
          s += bits_f(a.x & 0xffff0000u) * wf[1];
          s += bits_f(a.y << 16) * wf[2];
          s += bits_f(a.y & 0xffff0000u) * wf[3];
          s += bits_f(a.z << 16) * wf[4];
          s += bits_f(a.z & 0xffff0000u) * wf[5];
          s += bits_f(a.w << 16) * wf[6];
          s += bits_f(a.w & 0xffff0000u) * wf[7];
          acc[r] = s;
        }
      }
    }
  }
  if (!active) return;
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
