// On-device sampling, in the host sampler's order (package sampling): sample_prep applies logit
// bias, repetition/frequency/presence penalties, bans and the grammar bitmask to a copy of each
// row; sample_pick takes the greedy argmax, or draws with the request's uniform number
// (sampling.Uniform: SplitMix64 of seed and step) over the tokens that survive temperature,
// top-k, top-p (measured before min-p) and min-p, walking them in id order; it also returns the
// chosen token's log-softmax under the raw row and the top logprobs (ties to the lower id).
//
// Exact top-k and top-p thresholds come from a bitwise search over the order-preserving bits of
// the logits and weights (32 counting passes), ties at the threshold resolved by id.
#include "kern.cuh"

#define THREADS 256
#define MAX_BIAS 100.0f

// SampleRow mirrors dev.SampleRow (backend/cuda/internal/dev).
struct SampleRow {
  int logit_row;
  float temperature, top_p, min_p;
  int top_k;
  float rep_penalty, freq_penalty, pres_penalty;
  int bias_off, bias_len, bias_val_off, forced;
  int seen_off, seen_len, gen_off, gen_len, ban_off, ban_len;
  int mask_row;
  u32 seed_lo, seed_hi, step;
  int top_logprobs;
};

KERN bool allowed(const u64* mask, int t) { return !mask || ((mask[t >> 6] >> (t & 63)) & 1ull); }

extern "C" __global__ void sample_prep(float* work, const float* logits, const SampleRow* specs, const int* ints,
                                       const float* floats, const u64* masks, int rows, int vocab, int mask_words) {
  int i = bid_x();
  if (i >= rows) return;
  const SampleRow& s = specs[i];
  const float* raw = logits + (u64)s.logit_row * vocab;
  float* w = work + (u64)i * vocab;
  for (int t = tid(); t < vocab; t += ntid()) w[t] = s.forced ? neg_inf() : raw[t];
  sync();
  if (tid() == 0) {
    for (int j = 0; j < s.bias_len; j++) {
      int id = ints[s.bias_off + j];
      float v = floats[s.bias_val_off + j];
      if (id < 0 || id >= vocab) continue;
      if (s.forced) {
        if (v >= MAX_BIAS) w[id] = raw[id] + v;
      } else if (v <= -MAX_BIAS) {
        w[id] = neg_inf();
      } else {
        w[id] += v;
      }
    }
    if (s.rep_penalty != 1.0f)
      for (int j = 0; j < s.seen_len; j++) {
        int id = ints[s.seen_off + j];
        if (id < 0 || id >= vocab) continue;
        float l = w[id];
        w[id] = l > 0 ? l / s.rep_penalty : l * s.rep_penalty;
      }
    if (s.freq_penalty != 0 || s.pres_penalty != 0)
      for (int j = 0; j < s.gen_len; j++) {
        int id = ints[s.gen_off + j];
        if (id >= 0 && id < vocab) w[id] -= s.freq_penalty * (float)ints[s.gen_off + s.gen_len + j] + s.pres_penalty;
      }
    for (int j = 0; j < s.ban_len; j++) {
      int id = ints[s.ban_off + j];
      if (id >= 0 && id < vocab) w[id] = neg_inf();
    }
  }
  sync();
  if (s.mask_row >= 0) {
    const u64* m = masks + (u64)s.mask_row * mask_words;
    for (int t = tid(); t < vocab; t += ntid())
      if (!allowed(m, t)) w[t] = neg_inf();
  }
}

// key maps a float to an unsigned integer of the same order (NaN excluded by the callers).
KERN u32 key(float f) {
  u32 u = f_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

KERN double block_sum_d(double v, double* red) {
  sync();
  red[tid()] = v;
  sync();
  for (int o = THREADS / 2; o > 0; o >>= 1) {
    if ((int)tid() < o) red[tid()] += red[tid() + o];
    sync();
  }
  double s = red[0];
  sync();
  return s;
}

// block_best returns the index of the largest valid value (ties to the lower index), -1 if none.
KERN int block_best(float v, int idx, float* rv, int* ri) {
  sync();
  rv[tid()] = v;
  ri[tid()] = idx;
  sync();
  for (int o = THREADS / 2; o > 0; o >>= 1) {
    if ((int)tid() < o) {
      float a = rv[tid()], b = rv[tid() + o];
      int ia = ri[tid()], ib = ri[tid() + o];
      if (ib >= 0 && (ia < 0 || b > a || (b == a && ib < ia))) {
        rv[tid()] = b;
        ri[tid()] = ib;
      }
    }
    sync();
  }
  int r = ri[0];
  sync();
  return r;
}

KERN u64 mix64(u64 x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

KERN double uniform(u64 seed, u32 step) {
  u64 x = mix64(seed ^ mix64((u64)step + 0x9e3779b97f4a7c15ull));
  return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

extern "C" __global__ void sample_pick(const float* work, const float* logits, const SampleRow* specs, const int* ints,
                                       const u64* masks, int* out_token, float* out_logprob, int* out_top_ids,
                                       float* out_top_logprobs, int rows, int vocab, int mask_words, int max_top) {
  __shared__ float rv[THREADS];
  __shared__ int ri[THREADS];
  __shared__ double rd[THREADS];
  __shared__ float red[32];
  __shared__ int tie_cut, chosen;
  int i = bid_x();
  if (i >= rows) return;
  const SampleRow& s = specs[i];
  const float* w = work + (u64)i * vocab;
  const float* raw = logits + (u64)s.logit_row * vocab;
  const u64* mask = s.mask_row >= 0 ? masks + (u64)s.mask_row * mask_words : 0;
  int T = tid();

  float bv = neg_inf();
  int bi = -1;
  for (int t = T; t < vocab; t += THREADS) {
    float l = w[t];
    if (!is_nan(l) && l != neg_inf() && (bi < 0 || l > bv)) {
      bv = l;
      bi = t;
    }
  }
  int best = block_best(bv, bi, rv, ri);
  int tok = best;
  if (best < 0) {
    if (T == 0) {
      chosen = -1;
      for (int t = 0; t < vocab && chosen < 0; t++) {
        if (!allowed(mask, t)) continue;
        bool banned = false;
        for (int j = 0; j < s.ban_len; j++) banned = banned || ints[s.ban_off + j] == t;
        if (!banned) chosen = t;
      }
    }
    sync();
    tok = chosen;
  } else if (!(s.temperature < 1e-6f || s.top_k == 1 || w[best] == bits_f(0x7f800000u))) {
    float mx = w[best], invT = rcp(s.temperature);
    float floor = mx - (logf_((float)vocab) + 16.11809565f) * s.temperature;  // ln(1e7) = 16.118...
    // top-k: the k-th largest key among candidates, ties at it by id
    u32 kth = key(floor);
    if (T == 0) tie_cut = vocab;
    int ncand = 0;
    for (int t = T; t < vocab; t += THREADS) ncand += w[t] >= floor;
    ncand = (int)block_sum((float)ncand, red);
    if (s.top_k > 0 && s.top_k < ncand) {
      u32 tau = 0;
      for (int bit = 31; bit >= 0; bit--) {
        u32 c = tau | (1u << bit);
        int n = 0;
        for (int t = T; t < vocab; t += THREADS) n += w[t] >= floor && key(w[t]) >= c;
        if ((int)block_sum((float)n, red) >= s.top_k) tau = c;
      }
      kth = tau;
      int gt = 0;
      for (int t = T; t < vocab; t += THREADS) gt += w[t] >= floor && key(w[t]) > tau;
      gt = (int)block_sum((float)gt, red);
      if (T == 0) {
        int need = s.top_k - gt;
        for (int t = 0; t < vocab; t++)
          if (w[t] >= floor && key(w[t]) == tau && --need == 0) {
            tie_cut = t + 1;
            break;
          }
      }
    }
    sync();
    int cut = tie_cut;
#define CAND(t) (w[t] >= floor && (key(w[t]) > kth || (key(w[t]) == kth && (t) < cut)))
#define WEIGHT(t) ex2((w[t] - mx) * invT * 1.4426950408889634f)
    // top-p over the candidates, measured before min-p; min-p on the weights
    u32 wcut = 0;  // keep weights with bits > wcut, or == wcut below tie id cut2
    int cut2 = vocab;
    if (s.top_p < 1.0f) {
      double total = 0;
      for (int t = T; t < vocab; t += THREADS)
        if (CAND(t)) total += WEIGHT(t);
      double target = (double)s.top_p * block_sum_d(total, rd);
      u32 th = 0;
      for (int bit = 30; bit >= 0; bit--) {
        u32 c = th | (1u << bit);
        double m = 0;
        for (int t = T; t < vocab; t += THREADS)
          if (CAND(t)) {
            float x = WEIGHT(t);
            if (x >= s.min_p && f_bits(x) >= c) m += x;
          }
        if (block_sum_d(m, rd) >= target) th = c;
      }
      double above = 0;
      for (int t = T; t < vocab; t += THREADS)
        if (CAND(t)) {
          float x = WEIGHT(t);
          if (x >= s.min_p && f_bits(x) > th) above += x;
        }
      above = block_sum_d(above, rd);
      if (T == 0) {
        tie_cut = vocab;
        double cum = above;
        bool any = above > 0;
        for (int t = 0; t < vocab; t++) {
          if (!CAND(t)) continue;
          float x = WEIGHT(t);
          if (x < s.min_p || f_bits(x) != th) continue;
          if (cum >= target && any) {
            tie_cut = t;
            break;
          }
          cum += x;
          any = true;
        }
      }
      sync();
      wcut = th;
      cut2 = tie_cut;
    }
#define KEEP(t, x) (CAND(t) && (x) >= s.min_p && (f_bits(x) > wcut || (f_bits(x) == wcut && (t) < cut2)))
    double kept = 0;
    for (int t = T; t < vocab; t += THREADS)
      if (CAND(t)) {
        float x = WEIGHT(t);
        if (KEEP(t, x)) kept += x;
      }
    double u = uniform(((u64)s.seed_hi << 32) | s.seed_lo, s.step) * block_sum_d(kept, rd);
    // walk the kept tokens in id order, a block of ids at a time (prefix sums in shared memory)
    if (T == 0) chosen = -1;
    double run = 0;
    int last = best;
    for (int base = 0; base < vocab; base += THREADS) {
      int t = base + T;
      double x = 0;
      if (t < vocab && CAND(t)) {
        float f = WEIGHT(t);
        if (KEEP(t, f)) x = f;
      }
      sync();
      rd[T] = x;
      sync();
      for (int o = 1; o < THREADS; o <<= 1) {
        double add = (int)T >= o ? rd[T - o] : 0;
        sync();
        rd[T] += add;
        sync();
      }
      if (x > 0 && run + rd[T] > u && run + rd[T] - x <= u) chosen = t;
      // the last kept id so far, in case rounding leaves u past the end
      rv[T] = x > 0 ? (float)t : -1.0f;
      sync();
      if (T == 0)
        for (int j = 0; j < THREADS; j++)
          if (rv[j] >= 0) last = (int)rv[j];
      run += rd[THREADS - 1];
      sync();
      if (chosen >= 0) break;
    }
    if (T == 0 && chosen < 0) chosen = last;
    sync();
    tok = chosen;
#undef KEEP
#undef WEIGHT
#undef CAND
  }

  // log-softmax of the raw row
  float m = neg_inf();
  for (int t = T; t < vocab; t += THREADS)
    if (!is_nan(raw[t])) m = fmaxf_(m, raw[t]);
  m = block_max(m, red);
  double z = 0;
  for (int t = T; t < vocab; t += THREADS)
    if (!is_nan(raw[t])) z += expf_(raw[t] - m);
  float logz = logf_((float)block_sum_d(z, rd));
  if (T == 0) {
    out_token[i] = tok;
    out_logprob[i] = tok >= 0 ? raw[tok] - m - logz : 0.0f;
  }
  int n = imin(s.top_logprobs, max_top);
  float pv = 0;
  int pid = -1;
  for (int j = 0; j < n && j < vocab; j++) {
    float cv = neg_inf();
    int ci = -1;
    for (int t = T; t < vocab; t += THREADS) {
      float l = raw[t];
      if (is_nan(l)) continue;
      bool after = pid < 0 || l < pv || (l == pv && t > pid);
      if (after && (ci < 0 || l > cv)) {
        cv = l;
        ci = t;
      }
    }
    pid = block_best(cv, ci, rv, ri);
    if (pid < 0) break;
    pv = raw[pid];
    if (T == 0) {
      out_top_ids[(u64)i * max_top + j] = pid;
      out_top_logprobs[(u64)i * max_top + j] = pv - m - logz;
    }
  }
}
