// qkv_post: per row and head of the fused q|k|v projection, bias, Qwen3's per-head RMSNorm of q
// and k, RoPE (rotate_half pairing, the host's cos/sin table), and the bf16 store of k and v in
// the paged cache (f32 with kv_f32) at the row's block-table slot. Grid (rows, heads + 2 kv heads).
#include "kern.cuh"

extern "C" __global__ void qkv_post(float* qkv, const float* bias, const float* qnorm, const float* knorm,
                                    const float* rope_cos, const float* rope_sin, bf16* kcache, bf16* vcache,
                                    const int* pos, const int* row_seq, const int* tables, int rows, int num_heads, int num_kv_heads,
                                    int head_dim, int block_size, int max_blocks, int kv_f32, float eps) {
  const int nh = num_heads, nkv = num_kv_heads, hd = head_dim, bs = block_size;
  __shared__ float red[32];
  int r = bid_x(), h = bid_y();
  if (r >= rows || h >= nh + 2 * nkv) return;
  int stride = (nh + 2 * nkv) * hd, half = hd / 2;
  float* head = qkv + (u64)r * stride + (u64)h * hd;
  if (bias)
    for (int i = tid(); i < hd; i += ntid()) head[i] += bias[h * hd + i];
  sync();
  int p = pos[r];
  if (h < nh + nkv) {
    const float* nw = h < nh ? qnorm : knorm;
    if (nw) {
      float ss = 0;
      for (int i = tid(); i < hd; i += ntid()) ss += head[i] * head[i];
      ss = block_sum(ss, red);
      float scale = rcp(sqrt_rn(ss / (float)hd + eps));
      for (int i = tid(); i < hd; i += ntid()) head[i] = nw[i] * (head[i] * scale);
      sync();
    }
    const float* c = rope_cos + (u64)p * half;
    const float* s = rope_sin + (u64)p * half;
    for (int i = tid(); i < half; i += ntid()) {
      float x0 = head[i], x1 = head[i + half];
      head[i] = x0 * c[i] - x1 * s[i];
      head[i + half] = x1 * c[i] + x0 * s[i];
    }
    sync();
  }
  if (h < nh) return;
  bf16* cache = kcache;
  int kh = h - nh;
  if (h >= nh + nkv) {
    cache = vcache;
    kh = h - nh - nkv;
  }
  int blk = tables[row_seq[r] * max_blocks + p / bs];
  u64 at = (((u64)blk * nkv + kh) * bs + p % bs) * hd;
  if (kv_f32) {
    float* dst = (float*)cache + at;
    for (int i = tid(); i < hd; i += ntid()) dst[i] = head[i];
    return;
  }
  bf16* dst = cache + at;
  for (int i = tid(); i < hd; i += ntid()) dst[i] = f2bf(head[i]);
}
