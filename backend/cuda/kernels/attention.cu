// Paged attention over the KV cache (bf16, or f32 with kv_f32; [block][kv head][block size][head dim] per layer),
// keys and values read through each sequence's block table.
//
// attn_decode splits a row's context into partitions of PART positions (their number follows
// from the context length alone, so a row's result does not depend on its batch) and writes
// each partition's softmax state; attn_merge combines them. attn_prefill runs tiles of
// consecutive rows of one sequence, each row causal at its own position.
//
// A warp runs an online softmax over chunks of 32 keys: lane j scores key j of the chunk, then
// the warp accumulates the chunk's values, lane l owning dimensions l, l+32, ... (head dim at
// most 256, GQA groups at most 8). Decode shares each K/V read across the GQA group; prefill
// attends one (row, head) per warp; tensor-core tiles (mma.sync) are the M2 work.
#include "kern.cuh"

#define PART 512
#define MAX_HD 256
#define MAX_GROUP 8

struct Attend {
  float m, l;
  float o[MAX_HD / 32];
};

// kv_at reads element e of a cache row at u64 offset at: bf16, or f32 with f32 set.
KERN float kv_at(const bf16* c, u64 at, int f32) { return f32 ? ((const float*)c)[at] : bf2f(c[at]); }

// attend runs one warp over keys [lo, hi) for query q (global, hd floats).
KERN void attend(Attend& a, const float* q, const bf16* kc, const bf16* vc, const int* table, int nkv, int g, int bs,
                 int hd, int lo, int hi, float scale, int f32) {
  int lane = tid() & 31;
  a.m = neg_inf();
  a.l = 0;
#pragma unroll
  for (int i = 0; i < MAX_HD / 32; i++) a.o[i] = 0;
  for (int c = lo; c < hi; c += 32) {
    int j = c + lane;
    float s = neg_inf();
    if (j < hi) {
      u64 k = (((u64)table[j / bs] * nkv + g) * bs + j % bs) * hd;
      float d = 0;
      for (int e = 0; e < hd; e++) d += q[e] * kv_at(kc, k + e, f32);
      s = d * scale;
    }
    float cm = warp_max(s);
    float m = fmaxf_(a.m, cm);
    float corr = expf_(a.m - m);
    float p = j < hi ? expf_(s - m) : 0.0f;
    a.l = a.l * corr + warp_sum(p);
#pragma unroll
    for (int i = 0; i < MAX_HD / 32; i++) a.o[i] *= corr;
    a.m = m;
    int n = imin(32, hi - c);
    for (int jj = 0; jj < n; jj++) {
      float pj = shfl_idx(p, jj);
      int pos = c + jj;
      u64 v = (((u64)table[pos / bs] * nkv + g) * bs + pos % bs) * hd;
#pragma unroll
      for (int i = 0; i < MAX_HD / 32; i++) {
        int d = lane + 32 * i;
        if (d < hd) a.o[i] += pj * kv_at(vc, v + d, f32);
      }
    }
  }
}

// attn_decode: one CTA per (row, KV head, partition); its warps split the partition's keys
// (warp w takes chunks w, w+4, ... of 32 keys) and each warp serves the whole GQA group, so every
// K and V row is read once per CTA for all the group's heads; the warps' softmax states are then
// merged through shared memory.
extern "C" __global__ void attn_decode(const float* qkv, const bf16* kcache, const bf16* vcache, const int* tables,
                                       const int* row_seq, const int* pos, const int* rows, float* part_o,
                                       float* part_m, float* part_l, int num_rows, int num_heads, int num_kv_heads,
                                       int head_dim, int block_size, int max_blocks, int max_parts, int kv_f32,
                                       float scale) {
  const int nh = num_heads, nkv = num_kv_heads, hd = head_dim, bs = block_size;
  __shared__ float qs[MAX_GROUP][MAX_HD];
  __shared__ float wm[4][MAX_GROUP], wl[4][MAX_GROUP];
  __shared__ float wo[4][MAX_GROUP][MAX_HD];
  int i = bid_x(), g = bid_y(), part = bid_z();
  if (i >= num_rows || g >= nkv) return;
  int r = rows[i];
  int ctx = pos[r] + 1;
  int lo = part * PART;
  if (lo >= ctx) return;
  int hi = imin(ctx, lo + PART);
  const int* table = tables + (u64)row_seq[r] * max_blocks;
  int group = nh / nkv, warp = tid() >> 5, lane = tid() & 31;
  int stride = (nh + 2 * nkv) * hd;
  for (int e = tid(); e < group * hd; e += ntid()) qs[e / hd][e % hd] = qkv[(u64)r * stride + (u64)(g * group) * hd + e];
  sync();
  float m[MAX_GROUP], l[MAX_GROUP], o[MAX_GROUP][MAX_HD / 32];
#pragma unroll
  for (int h = 0; h < MAX_GROUP; h++) {
    m[h] = neg_inf();
    l[h] = 0;
#pragma unroll
    for (int e = 0; e < MAX_HD / 32; e++) o[h][e] = 0;
  }
  for (int c = lo + warp * 32; c < hi; c += 4 * 32) {
    int j = c + lane;
    float s[MAX_GROUP];
#pragma unroll
    for (int h = 0; h < MAX_GROUP; h++) s[h] = neg_inf();
    if (j < hi) {
      u64 k = (((u64)table[j / bs] * nkv + g) * bs + j % bs) * hd;
#pragma unroll
      for (int h = 0; h < MAX_GROUP; h++) s[h] = h < group ? 0.0f : neg_inf();
      for (int e = 0; e < hd; e++) {
        float kv = kv_at(kcache, k + e, kv_f32);
#pragma unroll
        for (int h = 0; h < MAX_GROUP; h++)
          if (h < group) s[h] += qs[h][e] * kv;
      }
#pragma unroll
      for (int h = 0; h < MAX_GROUP; h++) s[h] *= scale;
    }
    float p[MAX_GROUP];
#pragma unroll
    for (int h = 0; h < MAX_GROUP; h++) {
      if (h >= group) continue;  // uniform across the warp: the shuffles below stay converged
      float mn = fmaxf_(m[h], warp_max(s[h]));
      float corr = expf_(m[h] - mn);
      p[h] = j < hi ? expf_(s[h] - mn) : 0.0f;
      l[h] = l[h] * corr + warp_sum(p[h]);
#pragma unroll
      for (int e = 0; e < MAX_HD / 32; e++) o[h][e] *= corr;
      m[h] = mn;
    }
    int n = imin(32, hi - c);
    for (int jj = 0; jj < n; jj++) {
      int ps = c + jj;
      u64 v = (((u64)table[ps / bs] * nkv + g) * bs + ps % bs) * hd;
      float vv[MAX_HD / 32];
#pragma unroll
      for (int e = 0; e < MAX_HD / 32; e++) {
        int d = lane + 32 * e;
        vv[e] = d < hd ? kv_at(vcache, v + d, kv_f32) : 0.0f;
      }
#pragma unroll
      for (int h = 0; h < MAX_GROUP; h++) {
        if (h >= group) continue;
        float pj = shfl_idx(p[h], jj);
#pragma unroll
        for (int e = 0; e < MAX_HD / 32; e++) o[h][e] += pj * vv[e];
      }
    }
  }
#pragma unroll
  for (int h = 0; h < MAX_GROUP; h++) {
    if (h >= group) continue;
    if (lane == 0) {
      wm[warp][h] = m[h];
      wl[warp][h] = l[h];
    }
#pragma unroll
    for (int e = 0; e < MAX_HD / 32; e++) {
      int d = lane + 32 * e;
      if (d < hd) wo[warp][h][d] = o[h][e];
    }
  }
  sync();
  int nw = ntid() >> 5;
  for (int e = tid(); e < group * hd; e += ntid()) {
    int h = e / hd, d = e % hd;
    float mm = neg_inf();
    for (int w = 0; w < nw; w++) mm = fmaxf_(mm, wm[w][h]);
    float ll = 0, oo = 0;
    for (int w = 0; w < nw; w++) {
      float f = wm[w][h] == neg_inf() ? 0.0f : expf_(wm[w][h] - mm);
      ll += wl[w][h] * f;
      oo += wo[w][h][d] * f;
    }
    u64 at = ((u64)i * nh + g * group + h) * max_parts + part;
    part_o[at * hd + d] = oo;
    if (d == 0) {
      part_m[at] = mm;
      part_l[at] = ll;
    }
  }
}

extern "C" __global__ void attn_merge(float* out, const float* part_o, const float* part_m, const float* part_l,
                                      const int* rows, const int* pos, int num_rows, int num_heads, int head_dim, int max_parts) {
  const int nh = num_heads;
  const int hd = head_dim;
  int i = bid_x(), h = bid_y();
  if (i >= num_rows || h >= nh) return;
  int r = rows[i];
  int parts = (pos[r] + PART) / PART;
  u64 at = ((u64)i * nh + h) * max_parts;
  float m = neg_inf();
  for (int p = 0; p < parts; p++) m = fmaxf_(m, part_m[at + p]);
  float l = 0;
  for (int p = 0; p < parts; p++) l += part_l[at + p] * expf_(part_m[at + p] - m);
  float inv = rcp(l);
  for (int d = tid(); d < hd; d += ntid()) {
    float o = 0;
    for (int p = 0; p < parts; p++) o += part_o[(at + p) * hd + d] * expf_(part_m[at + p] - m);
    out[((u64)r * nh + h) * hd + d] = o * inv;
  }
}

extern "C" __global__ void attn_prefill(float* out, const float* qkv, const bf16* kcache, const bf16* vcache,
                                        const int* tables, const int* row_seq, const int* pos, const int* tiles,
                                        int num_tiles, int num_heads, int num_kv_heads, int head_dim, int block_size, int max_blocks, int kv_f32, float scale) {
  const int nh = num_heads;
  const int nkv = num_kv_heads;
  const int hd = head_dim;
  const int bs = block_size;
  int t = bid_x(), h = bid_y();
  if (t >= num_tiles || h >= nh) return;
  int first = tiles[2 * t], n = tiles[2 * t + 1];
  int warp = tid() >> 5, lane = tid() & 31;
  int stride = (nh + 2 * nkv) * hd, g = h / (nh / nkv);
  for (int r = first + warp; r < first + n; r += ntid() >> 5) {
    const int* table = tables + (u64)row_seq[r] * max_blocks;
    Attend a;
    attend(a, qkv + (u64)r * stride + (u64)h * hd, kcache, vcache, table, nkv, g, bs, hd, 0, pos[r] + 1, scale, kv_f32);
    float inv = rcp(a.l);
#pragma unroll
    for (int e = 0; e < MAX_HD / 32; e++) {
      int d = lane + 32 * e;
      if (d < hd) out[((u64)r * nh + h) * hd + d] = a.o[e] * inv;
    }
  }
}
