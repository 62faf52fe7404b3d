// kern.cuh: what the kernels need, without any CUDA header, so that both nvcc (the fatbin) and
// Debian's clang 14 with -nocudainc -nocudalib (the CI compile check) accept every source.
// Thread indices, barriers, shuffles and the fast math come from inline PTX; bfloat16 is a
// 16-bit integer converted by bit operations.
#pragma once

#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#define KERN __device__ __attribute__((always_inline)) inline

typedef unsigned short bf16;
typedef unsigned int u32;
typedef unsigned long long u64;

KERN u32 tid() { u32 r; asm("mov.u32 %0, %%tid.x;" : "=r"(r)); return r; }
KERN u32 ntid() { u32 r; asm("mov.u32 %0, %%ntid.x;" : "=r"(r)); return r; }
KERN u32 bid_x() { u32 r; asm("mov.u32 %0, %%ctaid.x;" : "=r"(r)); return r; }
KERN u32 bid_y() { u32 r; asm("mov.u32 %0, %%ctaid.y;" : "=r"(r)); return r; }
KERN u32 bid_z() { u32 r; asm("mov.u32 %0, %%ctaid.z;" : "=r"(r)); return r; }
KERN void sync() { asm volatile("bar.sync 0;" ::: "memory"); }

KERN float shfl_xor(float v, int lane) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(lane));
  return r;
}
KERN int shfl_xor_i(int v, int lane) {
  int r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(lane));
  return r;
}
KERN float shfl_idx(float v, int lane) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(lane));
  return r;
}

KERN float bits_f(u32 u) { float f; asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u)); return f; }
KERN u32 f_bits(float f) { u32 u; asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f)); return u; }
KERN float bf2f(bf16 b) { return bits_f((u32)b << 16); }
// f2bf rounds to nearest even; NaN stays NaN.
KERN bf16 f2bf(float f) {
  u32 u = f_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16)(u >> 16);
}
KERN float round_bf(float f) { return bf2f(f2bf(f)); }

KERN float ex2(float x) { float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
KERN float lg2(float x) { float r; asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
KERN float expf_(float x) { return ex2(x * 1.4426950408889634f); }
KERN float logf_(float x) { return lg2(x) * 0.6931471805599453f; }
KERN float rcp(float x) { float r; asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
KERN float sqrt_rn(float x) { float r; asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
KERN double sqrt_d(double x) { double r; asm("sqrt.rn.f64 %0, %1;" : "=d"(r) : "d"(x)); return r; }
KERN float neg_inf() { return bits_f(0xff800000u); }
KERN bool is_nan(float x) { return x != x; }
KERN float fmaxf_(float a, float b) { return a > b ? a : b; }
KERN int imin(int a, int b) { return a < b ? a : b; }
KERN int imax(int a, int b) { return a > b ? a : b; }

KERN float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}
KERN float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf_(v, shfl_xor(v, o));
  return v;
}

// block_sum and block_max reduce over the whole block (a multiple of 32 threads, at most 1024);
// every thread gets the result. red is 32 floats of shared memory.
KERN float block_sum(float v, float* red) {
  v = warp_sum(v);
  u32 w = tid() >> 5, nw = ntid() >> 5;
  sync();
  if ((tid() & 31) == 0) red[w] = v;
  sync();
  float s = 0;
  for (u32 i = 0; i < nw; i++) s += red[i];
  return s;
}
KERN float block_max(float v, float* red) {
  v = warp_max(v);
  u32 w = tid() >> 5, nw = ntid() >> 5;
  sync();
  if ((tid() & 31) == 0) red[w] = v;
  sync();
  float m = red[0];
  for (u32 i = 1; i < nw; i++) m = fmaxf_(m, red[i]);
  return m;
}

// 16-byte vectors for streaming loads (no CUDA headers: uint4/float4 are not declared).
struct __attribute__((aligned(16))) u32x4 { u32 x, y, z, w; };
struct __attribute__((aligned(16))) f32x4 { float x, y, z, w; };
// ldg_nc4 reads 16 bytes of read-only global memory (weights) through the non-coherent path.
KERN u32x4 ldg_nc4(const void* p) {
  u32x4 r;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// h2f widens an IEEE half (the scales of llama.cpp's blocks) exactly.
KERN float h2f(u32 h) {
  unsigned short s = (unsigned short)h;
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
  return f;
}
// mul_rn and sub_rn are never fused into an FMA, so dequantized weights equal quant.Dequantize's.
KERN float mul_rn(float a, float b) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
KERN float sub_rn(float a, float b) { float r; asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
