// The built-in GEMM: out[m][n] (+)= sum_k bf16(x[m][k]) * w[n][k], bf16 weights in Hugging
// Face's [out][in] layout, f32 activations rounded to bf16 as they are loaded, f32 accumulation
// in k order (no split-K, so a row's result never depends on the batch); with w_f32 the weights
// are f32 and the activations are used unrounded (float32 checkpoints). 64x64 output tiles,
// 256 threads of 4x4 outputs each. cuBLASLt replaces it where it is faster (M2).
#include "kern.cuh"

#define TM 64
#define TN 64
#define TK 16

extern "C" __global__ void gemm_bf16(float* out, const float* x, const bf16* w, int M, int N, int K, int ldx, int ldo,
                                     int accumulate, int w_f32) {
  __shared__ float xs[TK][TM + 1];
  __shared__ float ws[TK][TN + 1];
  int n0 = bid_x() * TN, m0 = bid_y() * TM;
  int t = tid();
  int tm = (t / 16) * 4, tn = (t % 16) * 4;
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0;
  for (int k0 = 0; k0 < K; k0 += TK) {
    for (int e = t; e < TM * TK; e += 256) {
      int mm = e / TK, kk = e % TK;
      int gm = m0 + mm, gk = k0 + kk;
      float xv = (gm < M && gk < K) ? x[(u64)gm * ldx + gk] : 0.0f;
      xs[kk][mm] = w_f32 ? xv : round_bf(xv);
      int gn = n0 + mm;
      float wv = 0.0f;
      if (gn < N && gk < K) wv = w_f32 ? ((const float*)w)[(u64)gn * K + gk] : bf2f(w[(u64)gn * K + gk]);
      ws[kk][mm] = wv;
    }
    sync();
    for (int kk = 0; kk < TK; kk++) {
      float a[4], b[4];
      for (int i = 0; i < 4; i++) a[i] = xs[kk][tm + i];
      for (int j = 0; j < 4; j++) b[j] = ws[kk][tn + j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    sync();
  }
  for (int i = 0; i < 4; i++) {
    int gm = m0 + tm + i;
    if (gm >= M) continue;
    for (int j = 0; j < 4; j++) {
      int gn = n0 + tn + j;
      if (gn >= N) continue;
      float* o = out + (u64)gm * ldo + gn;
      *o = accumulate ? *o + acc[i][j] : acc[i][j];
    }
  }
}
