// Paged attention over the KV cache (bf16, or f32 with kv_f32; [block][kv head][block size][head dim] per layer),
// keys and values read through each sequence's block table.
//
// attn_decode splits a row's context into partitions of PART positions (their number follows
// from the context length alone, so a row's result does not depend on its batch) and writes
// each partition's softmax state; attn_merge combines them. attn_prefill runs tiles of
// consecutive rows of one sequence, each row causal at its own position.
//
// Decode reads each K/V row once for the whole GQA group (at most 8 heads, head dim at most 256):
// with a bf16 cache and head dim 64, 128 or 256, a row at a time per hd/8 lanes with 16-byte
// loads, many rows in flight per warp (decode_vec); otherwise, and in prefill (one (row, head) per
// warp), a warp runs an online softmax over chunks of 32 keys, lane j scoring key j, then
// accumulates the chunk's values, lane l owning dimensions l, l+32, .... Tensor-core tiles
// (mma.sync) for prefill are the M2 work.
#include "kern.cuh"

#define PART 128  // dev.PartitionTokens
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

// The decode CTA's shared memory, carved per path: 10,304 floats (41 KB) for the scalar path's
// query, warp states and warp outputs; the vector path needs 6,160 of them.
#define DEC_SMEM (MAX_GROUP * MAX_HD + 2 * 4 * MAX_GROUP + 4 * MAX_GROUP * MAX_HD)
// The vector path's limits: the query group's width (heads x head dim) it keeps per warp.
#define VEC_GH 1024

// decode_scalar is the general decode path (f32 caches, head dims that are not 64, 128 or 256,
// wide GQA groups): warp w takes chunks w, w+4, ... of 32 keys, lane j scoring key j of a chunk,
// each warp serving the whole GQA group, and the warps' softmax states merge through shared
// memory.
KERN void decode_scalar(float* smem, const float* qkv, const bf16* kcache, const bf16* vcache, const int* table,
                        float* part_o, float* part_m, float* part_l, int i, int r, int g, int part, int lo, int hi,
                        int nh, int nkv, int hd, int bs, int max_parts, int kv_f32, float scale) {
  float(*qs)[MAX_HD] = (float(*)[MAX_HD])smem;
  float(*wm)[MAX_GROUP] = (float(*)[MAX_GROUP])(smem + MAX_GROUP * MAX_HD);
  float(*wl)[MAX_GROUP] = (float(*)[MAX_GROUP])(smem + MAX_GROUP * MAX_HD + 4 * MAX_GROUP);
  float(*wo)[MAX_GROUP][MAX_HD] = (float(*)[MAX_GROUP][MAX_HD])(smem + MAX_GROUP * MAX_HD + 8 * MAX_GROUP);
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

// unpack8 widens 8 bf16 (16 bytes) to floats.
KERN void unpack8(u32x4 q, float* f) {
  f[0] = bits_f(q.x << 16), f[1] = bits_f(q.x & 0xffff0000u), f[2] = bits_f(q.y << 16), f[3] = bits_f(q.y & 0xffff0000u);
  f[4] = bits_f(q.z << 16), f[5] = bits_f(q.z & 0xffff0000u), f[6] = bits_f(q.w << 16), f[7] = bits_f(q.w & 0xffff0000u);
}

// VEC_UNROLL is how many keys (or value rows) a lane loads before it uses them: loads in flight
// together instead of one latency per key.
#define VEC_UNROLL 8

// decode_vec is the bf16 path for head dims 64, 128 and 256: lpk = hd/8 lanes read one key or
// value row with 16-byte loads (a warp reads 32/lpk rows at once, coalesced), in three phases
// over the partition's keys: scores for the whole GQA group into shared memory (lanes of a row
// reduce by shuffles), the softmax per head (one warp per head), then the values weighted by
// those probabilities, each lane owning 8 dimensions, the warps' sums added through shared
// memory.
KERN void decode_vec(float* smem, const float* qkv, const bf16* kcache, const bf16* vcache, const int* table,
                     float* part_o, float* part_m, float* part_l, int i, int r, int g, int part, int lo, int hi,
                     int nh, int nkv, int hd, int bs, int max_parts, float scale) {
  const int nw = 4;  // warps per CTA (the launch's 128 threads)
  int group = nh / nkv, warp = tid() >> 5, lane = tid() & 31;
  int lpk = hd >> 3, kpw = 32 / lpk;  // lanes per row, rows per warp load
  int sub = lane / lpk, d0 = (lane % lpk) * 8;
  int n = hi - lo;
  float* qs = smem;               // [group][hd]
  float* ss = qs + VEC_GH;        // [group][PART]: scores, then probabilities
  float* wo = ss + MAX_GROUP * PART;  // [warp][group * hd]
  float* ml = wo + nw * VEC_GH;   // m[MAX_GROUP], l[MAX_GROUP]
  int stride = (nh + 2 * nkv) * hd;
  for (int e = tid(); e < group * hd; e += ntid()) qs[e] = qkv[(u64)r * stride + (u64)(g * group) * hd + e];
  sync();
  // scores: warp w takes rows [w*step, (w+1)*step) of each pass of nw*step rows
  const int step = VEC_UNROLL * kpw;
  for (int j0 = warp * step; j0 < n; j0 += nw * step) {
    u32x4 kq[VEC_UNROLL];
#pragma unroll
    for (int u = 0; u < VEC_UNROLL; u++) {
      int j = j0 + u * kpw + sub;
      if (j < n) {
        int ps = lo + j;
        kq[u] = ldg_nc4(kcache + (((u64)table[ps / bs] * nkv + g) * bs + ps % bs) * hd + d0);
      } else {
        kq[u].x = kq[u].y = kq[u].z = kq[u].w = 0;
      }
    }
#pragma unroll
    for (int u = 0; u < VEC_UNROLL; u++) {
      float kf[8];
      unpack8(kq[u], kf);
      int j = j0 + u * kpw + sub;
#pragma unroll
      for (int h = 0; h < MAX_GROUP; h++) {
        if (h >= group) continue;  // uniform across the warp
        const float* q = qs + h * hd + d0;
        float a = 0;
#pragma unroll
        for (int e = 0; e < 8; e++) a += q[e] * kf[e];
        for (int off = lpk >> 1; off > 0; off >>= 1) a += shfl_xor(a, off);
        if (j < n && d0 == 0) ss[h * PART + j] = a * scale;
      }
    }
  }
  sync();
  // softmax of each head's scores over the partition
  for (int h = warp; h < group; h += nw) {
    float mx = neg_inf();
    for (int j = lane; j < n; j += 32) mx = fmaxf_(mx, ss[h * PART + j]);
    mx = warp_max(mx);
    float sum = 0;
    for (int j = lane; j < n; j += 32) {
      float p = expf_(ss[h * PART + j] - mx);
      ss[h * PART + j] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      ml[h] = mx;
      ml[MAX_GROUP + h] = sum;
    }
  }
  sync();
  // values: lane owns dims d0..d0+7 of rows sub, sub+kpw, ...
  float o[MAX_GROUP][8];
#pragma unroll
  for (int h = 0; h < MAX_GROUP; h++)
#pragma unroll
    for (int e = 0; e < 8; e++) o[h][e] = 0;
  for (int j0 = warp * step; j0 < n; j0 += nw * step) {
    u32x4 vq[VEC_UNROLL];
#pragma unroll
    for (int u = 0; u < VEC_UNROLL; u++) {
      int j = j0 + u * kpw + sub;
      if (j < n) {
        int ps = lo + j;
        vq[u] = ldg_nc4(vcache + (((u64)table[ps / bs] * nkv + g) * bs + ps % bs) * hd + d0);
      } else {
        vq[u].x = vq[u].y = vq[u].z = vq[u].w = 0;
      }
    }
#pragma unroll
    for (int u = 0; u < VEC_UNROLL; u++) {
      int j = j0 + u * kpw + sub;
      if (j >= n) continue;
      float vf[8];
      unpack8(vq[u], vf);
#pragma unroll
      for (int h = 0; h < MAX_GROUP; h++) {
        if (h >= group) continue;
        float p = ss[h * PART + j];
#pragma unroll
        for (int e = 0; e < 8; e++) o[h][e] += p * vf[e];
      }
    }
  }
  // the warp's row groups (lanes d0 apart by lpk) add up, then the warps through shared memory
#pragma unroll
  for (int h = 0; h < MAX_GROUP; h++) {
    if (h >= group) continue;
#pragma unroll
    for (int e = 0; e < 8; e++) {
      float v = o[h][e];
      for (int off = lpk; off < 32; off <<= 1) v += shfl_xor(v, off);
      if (sub == 0) wo[warp * VEC_GH + h * hd + d0 + e] = v;
    }
  }
  sync();
  for (int e = tid(); e < group * hd; e += ntid()) {
    int h = e / hd, d = e % hd;
    float oo = 0;
    for (int w = 0; w < nw; w++) oo += wo[w * VEC_GH + e];
    u64 at = ((u64)i * nh + g * group + h) * max_parts + part;
    part_o[at * hd + d] = oo;
    if (d == 0) {
      part_m[at] = ml[h];
      part_l[at] = ml[MAX_GROUP + h];
    }
  }
}

// attn_decode: one CTA of 128 threads per (row, KV head, partition of PART positions); the bf16
// vector path where the shape allows, else the scalar path.
extern "C" __global__ void attn_decode(const float* qkv, const bf16* kcache, const bf16* vcache, const int* tables,
                                       const int* row_seq, const int* pos, const int* rows, float* part_o,
                                       float* part_m, float* part_l, int num_rows, int num_heads, int num_kv_heads,
                                       int head_dim, int block_size, int max_blocks, int max_parts, int kv_f32,
                                       float scale) {
  __shared__ __attribute__((aligned(16))) float smem[DEC_SMEM];
  const int nh = num_heads, nkv = num_kv_heads, hd = head_dim;
  int i = bid_x(), g = bid_y(), part = bid_z();
  if (i >= num_rows || g >= nkv) return;
  int r = rows[i];
  int ctx = pos[r] + 1;
  int lo = part * PART;
  if (lo >= ctx) return;
  int hi = imin(ctx, lo + PART);
  const int* table = tables + (u64)row_seq[r] * max_blocks;
  int group = nh / nkv;
  if (!kv_f32 && (hd == 64 || hd == 128 || hd == 256) && group * hd <= VEC_GH) {
    decode_vec(smem, qkv, kcache, vcache, table, part_o, part_m, part_l, i, r, g, part, lo, hi, nh, nkv, hd,
               block_size, max_parts, scale);
  } else {
    decode_scalar(smem, qkv, kcache, vcache, table, part_o, part_m, part_l, i, r, g, part, lo, hi, nh, nkv, hd,
                  block_size, max_parts, kv_f32, scale);
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
