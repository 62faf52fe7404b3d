// Block-quantized weights as llama.cpp lays them out (quant/): Q8_0 (34-byte blocks of 32: an
// f16 scale, 32 int8) and Q4_K (144-byte super-blocks of 256: f16 d and dmin, 12 bytes of 6-bit
// scales and mins, 128 bytes of nibbles). Weights are dequantized in registers with unfused
// multiplies, so each value equals quant.Dequantize's; activations stay f32 (not rounded) and
// sums are f32. gemv_q8_0 and gemv_q4_k serve decode rows (one weight read shared by up to
// GV_ROWS rows, as gemv_bf16), gemm_q prefill rows (gemm_bf16's tiles with the weight tile
// dequantized as it is loaded), embed_q the embedding gather of a quantized table.
#include "kern.cuh"

#define GQ_ROWS 16
#define GQ_WARPS 8
#define QT_Q8_0 8
#define QT_Q4_K 12

// scale_min_k4 is ggml's get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 bytes q.
KERN void scale_min_k4(int j, const unsigned char* q, u32* sc, u32* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// row_bytes is the size of a row of k elements of type qt.
KERN u64 row_bytes(int qt, int k) { return qt == QT_Q8_0 ? (u64)(k / 32) * 34 : (u64)(k / 256) * 144; }

// dq is element k of a quantized row, exactly as quant.Dequantize computes it.
KERN float dq(int qt, const unsigned char* row, int k) {
  if (qt == QT_Q8_0) {
    const unsigned char* blk = row + (k >> 5) * 34;
    float d = h2f(*(const unsigned short*)blk);
    return mul_rn((float)(signed char)blk[2 + (k & 31)], d);
  }
  const unsigned char* blk = row + (k >> 8) * 144;
  const unsigned short* h = (const unsigned short*)blk;
  float d = h2f(h[0]), mn = h2f(h[1]);
  int e = k & 255, j = e >> 6, hi = (e >> 5) & 1;
  u32 sc, m;
  scale_min_k4(2 * j + hi, blk + 4, &sc, &m);
  u32 qb = blk[16 + 32 * j + (e & 31)];
  u32 q = hi ? qb >> 4 : qb & 15;
  return sub_rn(mul_rn(mul_rn(d, (float)sc), (float)q), mul_rn(mn, (float)m));
}

// gemv_q8_0: out[r][n] (+)= sum_k x[r][k] * w[n][k] for r < M. A warp per column n; lane l takes
// blocks l, l+32, ...; per block and row the 32 products are summed in order, then scaled by the
// block's d and added to the row's lane sum; a butterfly over the warp ends it. Grid
// (ceil(M/GQ_ROWS), ceil(N/GQ_WARPS)), block 32*GQ_WARPS; K % 32 == 0, ldx % 4 == 0.
extern "C" __global__ void gemv_q8_0(float* out, const float* x, const unsigned char* w, int M, int N, int K, int ldx,
                                     int ldo, int accumulate) {
  int lane = tid() & 31;
  int n = bid_y() * GQ_WARPS + (tid() >> 5);
  int r0 = bid_x() * GQ_ROWS;
  int nr = imin(GQ_ROWS, M - r0);
  if (n >= N || nr <= 0) return;
  int nb = K / 32;
  const float* xg = x + (u64)r0 * ldx;
  const unsigned char* wn = w + (u64)n * nb * 34;
  float acc[GQ_ROWS];
#pragma unroll
  for (int r = 0; r < GQ_ROWS; r++) acc[r] = 0;
  for (int b = lane; b < nb; b += 32) {
    const unsigned short* blk = (const unsigned short*)(wn + (u64)b * 34);
    float d = h2f(blk[0]);
    float q[32];
#pragma unroll
    for (int i = 0; i < 16; i++) {
      u32 v = blk[1 + i];
      q[2 * i] = (float)(signed char)(v & 0xff);
      q[2 * i + 1] = (float)(signed char)(v >> 8);
    }
#pragma unroll
    for (int r = 0; r < GQ_ROWS; r++) {
      if (r < nr) {
        const f32x4* xp = (const f32x4*)(xg + (u64)r * ldx + b * 32);
        float s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
          f32x4 a = xp[i];
          s += a.x * q[4 * i];
          s += a.y * q[4 * i + 1];
          s += a.z * q[4 * i + 2];
          s += a.w * q[4 * i + 3];
        }
        acc[r] += d * s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < GQ_ROWS; r++) {
    if (r < nr) {
      float v = warp_sum(acc[r]);
      if (lane == 0) {
        float* o = out + (u64)(r0 + r) * ldo + n;
        *o = accumulate ? *o + v : v;
      }
    }
  }
}

// byte_of is byte i of the 12 little-endian bytes in a, b, c.
KERN u32 byte_of(u32 a, u32 b, u32 c, int i) {
  u32 v = i < 4 ? a : (i < 8 ? b : c);
  return (v >> (8 * (i & 3))) & 0xff;
}

// gemv_q4_k: as gemv_q8_0 for Q4_K rows. Eight lanes share a super-block: lane l takes
// super-blocks l/8, l/8+4, ... and within each the 16 bytes of nibbles at 32j+16h (j = (l%8)/2,
// h = l%2): elements 64j+16h+t (low nibbles, sub-block 2j) and 64j+32+16h+t (high, 2j+1), t < 16.
// Per sub-block and row it sums x·q and x in order, then adds d1·Σxq - m1·Σx (d1 = d·scale,
// m1 = dmin·min) to the row's lane sum, low sub-block first. K % 256 == 0, ldx % 4 == 0.
extern "C" __global__ void gemv_q4_k(float* out, const float* x, const unsigned char* w, int M, int N, int K, int ldx,
                                     int ldo, int accumulate) {
  int lane = tid() & 31;
  int n = bid_y() * GQ_WARPS + (tid() >> 5);
  int r0 = bid_x() * GQ_ROWS;
  int nr = imin(GQ_ROWS, M - r0);
  if (n >= N || nr <= 0) return;
  int nsb = K / 256;
  int part = lane & 7, j = part >> 1, hh = part & 1;
  const float* xg = x + (u64)r0 * ldx;
  const unsigned char* wn = w + (u64)n * nsb * 144;
  float acc[GQ_ROWS];
#pragma unroll
  for (int r = 0; r < GQ_ROWS; r++) acc[r] = 0;
  for (int sb = lane >> 3; sb < nsb; sb += 4) {
    const unsigned char* blk = wn + (u64)sb * 144;
    const u32* b32 = (const u32*)blk;
    u32 dm = b32[0], s0 = b32[1], s1 = b32[2], s2 = b32[3];
    float d = h2f(dm & 0xffff), dmin = h2f(dm >> 16);
    u32 sc1, m1, sc2, m2;
    int j1 = 2 * j, j2 = 2 * j + 1;
    if (j1 < 4) {
      sc1 = byte_of(s0, s1, s2, j1) & 63;
      m1 = byte_of(s0, s1, s2, j1 + 4) & 63;
    } else {
      sc1 = (byte_of(s0, s1, s2, j1 + 4) & 0xf) | ((byte_of(s0, s1, s2, j1 - 4) >> 6) << 4);
      m1 = (byte_of(s0, s1, s2, j1 + 4) >> 4) | ((byte_of(s0, s1, s2, j1) >> 6) << 4);
    }
    if (j2 < 4) {
      sc2 = byte_of(s0, s1, s2, j2) & 63;
      m2 = byte_of(s0, s1, s2, j2 + 4) & 63;
    } else {
      sc2 = (byte_of(s0, s1, s2, j2 + 4) & 0xf) | ((byte_of(s0, s1, s2, j2 - 4) >> 6) << 4);
      m2 = (byte_of(s0, s1, s2, j2 + 4) >> 4) | ((byte_of(s0, s1, s2, j2) >> 6) << 4);
    }
    float d1 = mul_rn(d, (float)sc1), dm1 = mul_rn(dmin, (float)m1);
    float d2 = mul_rn(d, (float)sc2), dm2 = mul_rn(dmin, (float)m2);
    u32x4 qv = ldg_nc4(blk + 16 + 32 * j + 16 * hh);
    u32 qw[4] = {qv.x, qv.y, qv.z, qv.w};
    int e1 = sb * 256 + 64 * j + 16 * hh;
#pragma unroll
    for (int r = 0; r < GQ_ROWS; r++) {
      if (r < nr) {
        const f32x4* xa = (const f32x4*)(xg + (u64)r * ldx + e1);
        const f32x4* xb = (const f32x4*)(xg + (u64)r * ldx + e1 + 32);
        float sq1 = 0, sx1 = 0, sq2 = 0, sx2 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
          f32x4 a = xa[i], b = xb[i];
          float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
          for (int t = 0; t < 4; t++) {
            u32 byte = (qw[i] >> (8 * t)) & 0xff;
            sq1 += av[t] * (float)(byte & 15);
            sx1 += av[t];
            sq2 += bv[t] * (float)(byte >> 4);
            sx2 += bv[t];
          }
        }
        float s = acc[r];
        s += mul_rn(d1, sq1) - mul_rn(dm1, sx1);
        s += mul_rn(d2, sq2) - mul_rn(dm2, sx2);
        acc[r] = s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < GQ_ROWS; r++) {
    if (r < nr) {
      float v = warp_sum(acc[r]);
      if (lane == 0) {
        float* o = out + (u64)(r0 + r) * ldo + n;
        *o = accumulate ? *o + v : v;
      }
    }
  }
}

// gemm_q: gemm_bf16's tiled product for the prefill rows, the weight tile dequantized (dq) as it
// is loaded and the activations used unrounded: out[m][n] (+)= sum_k x[m][k] * w[n][k], f32
// accumulation in k order. Grid (ceil(N/64), ceil(M/64)), block 256.
#define QTM 64
#define QTN 64
#define QTK 16
extern "C" __global__ void gemm_q(float* out, const float* x, const unsigned char* w, int M, int N, int K, int ldx, int ldo,
                                  int accumulate, int qtype) {
  __shared__ float xs[QTK][QTM + 1];
  __shared__ float ws[QTK][QTN + 1];
  int n0 = bid_x() * QTN, m0 = bid_y() * QTM;
  int t = tid();
  int tm = (t / 16) * 4, tn = (t % 16) * 4;
  u64 rb = row_bytes(qtype, K);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0;
  for (int k0 = 0; k0 < K; k0 += QTK) {
    for (int e = t; e < QTM * QTK; e += 256) {
      int mm = e / QTK, kk = e % QTK;
      int gm = m0 + mm, gk = k0 + kk;
      xs[kk][mm] = (gm < M && gk < K) ? x[(u64)gm * ldx + gk] : 0.0f;
      int gn = n0 + mm;
      ws[kk][mm] = (gn < N && gk < K) ? dq(qtype, w + (u64)gn * rb, gk) : 0.0f;
    }
    sync();
#pragma unroll
    for (int kk = 0; kk < QTK; kk++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = xs[kk][tm + i];
#pragma unroll
      for (int j = 0; j < 4; j++) b[j] = ws[kk][tn + j];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    sync();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int gm = m0 + tm + i;
    if (gm >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int gn = n0 + tn + j;
      if (gn >= N) continue;
      float* o = out + (u64)gm * ldo + gn;
      *o = accumulate ? *o + acc[i][j] : acc[i][j];
    }
  }
}

// embed_q: out[r][:H] = the dequantized row ids[r] of a quantized embedding table. Grid (Rows).
extern "C" __global__ void embed_q(float* out, const unsigned char* table, const int* ids, int rows, int H, int qtype) {
  int r = bid_x();
  if (r >= rows) return;
  const unsigned char* row = table + (u64)ids[r] * row_bytes(qtype, H);
  for (int i = tid(); i < H; i += ntid()) out[(u64)r * H + i] = dq(qtype, row, i);
}
