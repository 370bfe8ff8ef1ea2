// GPU sampling, one block per sampled row; the algorithm of kernels/ref/sampling_ref.cpp.
// Greedy: one argmax pass. Otherwise: max pass; top-k threshold by a 4-pass 8-bit radix select
// over order-preserving keys (shared-memory histograms of counts); top-p threshold by the same
// select over 2^-32 fixed-point masses (integer atomics: the same sums in any order); then one
// Gumbel-max pass with Philox noise (four vocabulary entries per Philox call).
#include <climits>
#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/philox.h"
#include "kernels/ref/sampling_ref.h"
#include "kernels/sampling.h"

namespace servelab::kernels {
namespace {

constexpr int kThreads = 512;

struct ArgBest {
  float value;
  int index;  // -1 = none
};

/// Better = larger value, then lower index; entries with index -1 always lose.
__device__ __forceinline__ ArgBest better(ArgBest a, ArgBest b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__device__ ArgBest block_best(ArgBest v, ArgBest* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ArgBest other{__shfl_xor_sync(0xffffffffu, v.value, o), __shfl_xor_sync(0xffffffffu, v.index, o)};
    v = better(v, other);
  }
  __syncthreads();  // scratch may still be read from a previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  ArgBest r = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) r = better(r, scratch[w]);
  return r;
}

__device__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) r = fmaxf(r, scratch[w]);
  return r;
}

/// Largest key t with weight(keys >= t, keys >= floor) >= target; weights are counts or masses.
template <bool kMass>
__device__ uint32_t select_threshold(const float* x, int n, float inv_t, float max_x, uint64_t target, uint32_t floor,
                                     unsigned long long* hist) {
  uint32_t prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t hi_mask = shift == 24 ? 0u : ~((1u << (shift + 8)) - 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float xi = __fmul_rn(x[i], inv_t);
      const uint32_t key = order_key(xi);
      if (key < floor || (key & hi_mask) != prefix) continue;
      const unsigned long long w = kMass ? fixed_weight(expf(xi - max_x)) : 1ull;
      atomicAdd(&hist[(key >> shift) & 0xffu], w);
    }
    __syncthreads();
    // 256 buckets scanned from the top by one thread: cheap next to the pass over the row.
    __shared__ uint32_t sh_digit;
    __shared__ unsigned long long sh_below;
    if (threadIdx.x == 0) {
      unsigned long long cum = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (cum + hist[b] >= target) break;
        cum += hist[b];
      }
      sh_digit = uint32_t(b);
      sh_below = cum;
    }
    __syncthreads();
    target -= sh_below;
    prefix |= sh_digit << shift;
  }
  return prefix;
}

__device__ double block_sum_d(double v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  double r = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) r += scratch[w];  // fixed order: every thread the same sum
  return r;
}

/// Rejection sampling of the row's draft (SampleArgs::draft_dist; verify_draft_ref's algorithm):
/// returns the token, or -1 where the residual has no mass (the caller then draws as usual).
/// x: the row's logits, kept: key >= floor, weights expf(x / T - max_x) summed into tot.
__device__ int verify_draft_device(const SampleArgs& a, int row, const float* x, float inv_t, float max_x,
                                   uint32_t floor, double tot, double* dscratch) {
  const int n = a.vocab;
  const int draft = a.draft_token[row];
  const float* q = a.draft_probs + int64_t(a.draft_dist[row]) * n;
  auto p_of = [&](int i) {
    const float xi = __fmul_rn(x[i], inv_t);
    return order_key(xi) >= floor ? __double2float_rn(double(expf(xi - max_x)) / tot) : 0.0f;
  };
  const uint64_t seed = a.seed[row], key = a.seq_key[row];
  const int32_t pos = a.position[row];
  if (draft < 0 || draft >= n) return -1;  // the host checks; never reached
  if (sampling_uniform(seed, key, pos, 0) * double(q[draft]) < double(p_of(draft))) return draft;
  // Rejected: the residual max(0, p - q) without the draft, inverse CDF in index order. Each
  // thread sums a contiguous chunk; chunk prefixes in order, then the chunk that holds the target.
  auto r_of = [&](int i) { return i == draft ? 0.0f : fmaxf(0.0f, __fsub_rn(p_of(i), q[i])); };
  const int chunk = (n + kThreads - 1) / kThreads, i0 = min(n, int(threadIdx.x) * chunk), i1 = min(n, i0 + chunk);
  double mine = 0.0;
  for (int i = i0; i < i1; ++i) mine += double(r_of(i));
  __shared__ double prefix[kThreads + 1];
  prefix[threadIdx.x + 1] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    prefix[0] = 0.0;
    for (int t = 1; t <= kThreads; ++t) prefix[t] += prefix[t - 1];
  }
  __syncthreads();
  const double total = prefix[kThreads];
  if (!(total > 1e-12)) return -1;  // p == q up to rounding
  const double target = sampling_uniform(seed, key, pos, 2) * total;
  __shared__ int hit, last;
  if (threadIdx.x == 0) {
    hit = INT_MAX;
    last = -1;
  }
  __syncthreads();
  double cum = prefix[threadIdx.x];
  int my_last = -1;
  for (int i = i0; i < i1; ++i) {
    const float r = r_of(i);
    if (!(r > 0.0f)) continue;
    my_last = i;
    cum += double(r);
    if (target < cum) {
      atomicMin(&hit, i);
      break;
    }
  }
  if (my_last >= 0) atomicMax(&last, my_last);
  __syncthreads();
  (void)dscratch;
  return hit != INT_MAX ? hit : last;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const SampleArgs a) {
  __shared__ ArgBest best_scratch[kThreads / 32];
  __shared__ float max_scratch[kThreads / 32];
  __shared__ unsigned long long hist[256];
  const int row = blockIdx.x, n = a.vocab;
  const float* x = a.logits + int64_t(row) * n;
  const float temp = a.temperature[row];
  const int top_k = a.top_k[row];

  if (!(temp > 0.0f) || top_k == 1) {  // greedy
    ArgBest b{0.0f, -1};
    for (int i = threadIdx.x; i < n; i += kThreads)
      if (!isnan(x[i])) b = better(b, ArgBest{x[i], i});
    b = block_best(b, best_scratch);
    if (threadIdx.x == 0) a.tokens[row] = b.index < 0 ? 0 : b.index;
    if (a.probs_out)  // the distribution of a greedy draw: one-hot at the argmax
      for (int i = threadIdx.x; i < n; i += kThreads) a.probs_out[int64_t(row) * n + i] = i == max(b.index, 0) ? 1.0f : 0.0f;
    return;
  }
  const float inv_t = 1.0f / temp;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float xi = __fmul_rn(x[i], inv_t);
    if (!isnan(xi)) m = fmaxf(m, xi);
  }
  const float max_x = block_max(m, max_scratch);

  uint32_t floor = 1;
  if (max_x != -INFINITY) {
    if (top_k > 0 && top_k < n) floor = max(floor, select_threshold<false>(x, n, inv_t, max_x, uint64_t(top_k), 1, hist));
    const float top_p = a.top_p[row];
    if (top_p < 1.0f) {
      __shared__ unsigned long long total;
      if (threadIdx.x == 0) total = 0;
      __syncthreads();
      unsigned long long mine = 0;
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const float xi = __fmul_rn(x[i], inv_t);
        if (order_key(xi) >= floor) mine += fixed_weight(expf(xi - max_x));
      }
      atomicAdd(&total, mine);
      __syncthreads();
      uint64_t target = static_cast<uint64_t>(static_cast<double>(top_p) * static_cast<double>(total));
      if (target < 1) target = 1;
      floor = max(floor, select_threshold<true>(x, n, inv_t, max_x, target, floor, hist));
    }
  }

  // The distribution this draw samples (probs_out), and rejection sampling of a draft against q.
  const bool verify = a.draft_dist && a.draft_dist[row] >= 0 && max_x != -INFINITY;
  if ((a.probs_out || verify) && max_x != -INFINITY) {
    __shared__ double dscratch[kThreads / 32];
    double mine = 0.0;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float xi = __fmul_rn(x[i], inv_t);
      if (order_key(xi) >= floor) mine += double(expf(xi - max_x));
    }
    const double tot = block_sum_d(mine, dscratch);
    if (a.probs_out)
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const float xi = __fmul_rn(x[i], inv_t);
        a.probs_out[int64_t(row) * n + i] = order_key(xi) >= floor ? __double2float_rn(double(expf(xi - max_x)) / tot) : 0.0f;
      }
    if (verify) {
      const int t = verify_draft_device(a, row, x, inv_t, max_x, floor, tot, dscratch);
      if (t >= 0) {
        if (threadIdx.x == 0) a.tokens[row] = t;
        return;
      }
    }
  }
  const uint64_t seed = a.seed[row], key = a.seq_key[row];
  const int32_t pos = a.position[row];
  ArgBest b{0.0f, -1};
  if (max_x != -INFINITY) {
    for (int c = threadIdx.x; c * 4 < n; c += kThreads) {  // one Philox call serves four entries
      const Philox4 r = philox4x32(uint32_t(c), uint32_t(pos), uint32_t(key), uint32_t(key >> 32), uint32_t(seed),
                                   uint32_t(seed >> 32));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = c * 4 + j;
        if (i >= n) break;
        const float xi = __fmul_rn(x[i], inv_t);
        if (order_key(xi) < floor) continue;
        const float u = philox_uniform(r.v[j]);
        b = better(b, ArgBest{__fsub_rn(xi, logf(-logf(u))), i});
      }
    }
  }
  b = block_best(b, best_scratch);
  if (b.index >= 0) {
    if (threadIdx.x == 0) a.tokens[row] = b.index;
    return;
  }
  // Every logit NaN or -inf: greedy's answer (lowest non-NaN index, or 0).
  ArgBest g{0.0f, -1};
  for (int i = threadIdx.x; i < n; i += kThreads)
    if (!isnan(x[i])) g = better(g, ArgBest{x[i], i});
  g = block_best(g, best_scratch);
  if (threadIdx.x == 0) a.tokens[row] = g.index < 0 ? 0 : g.index;
  if (a.probs_out)
    for (int i = threadIdx.x; i < n; i += kThreads) a.probs_out[int64_t(row) * n + i] = i == max(g.index, 0) ? 1.0f : 0.0f;
}

}  // namespace

void sample_tokens(const SampleArgs& a, cudaStream_t stream) {
  if (a.n_rows == 0) return;
  if (a.vocab <= 0) throw std::invalid_argument("sample_tokens: vocab must be > 0");
  sample_kernel<<<a.n_rows, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

namespace {

/// One thread per (row, 32 tokens): reads the row's mask word once, clears the logits it rules out.
__global__ void apply_token_masks_kernel(float* logits, int vocab, const int32_t* mask_index, const uint32_t* words,
                                         int words_per_row) {
  const int row = blockIdx.y;
  const int m = mask_index[row];
  const int w = blockIdx.x * blockDim.x + threadIdx.x;
  if (m < 0 || w >= words_per_row) return;
  const uint32_t bits = words[size_t(m) * words_per_row + w];
  if (bits == 0xffffffffu) return;
  float* out = logits + size_t(row) * vocab + size_t(w) * 32;
  const int n = min(32, vocab - w * 32);
  for (int i = 0; i < n; ++i)
    if (!((bits >> i) & 1u)) out[i] = -INFINITY;
}

}  // namespace

void apply_token_masks(float* logits, int n_rows, int vocab, const int32_t* mask_index, const uint32_t* words,
                       int words_per_row, cudaStream_t stream) {
  if (n_rows <= 0) return;
  const dim3 grid((words_per_row + 127) / 128, n_rows);
  apply_token_masks_kernel<<<grid, 128, 0, stream>>>(logits, vocab, mask_index, words, words_per_row);
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
