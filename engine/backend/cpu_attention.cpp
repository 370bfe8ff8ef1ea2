#include "engine/backend/cpu_attention.h"

#include <algorithm>
#include <cmath>

// The build targets baseline x86-64 (SSE2); cloning the kernels lets them use the wider vectors
// of the machine they run on without a -march flag that would tie the binary to one CPU.
// Not under the sanitizers: gcc instruments the clones' ifunc resolver, which the dynamic loader
// runs before the sanitizer runtime is up (a TSan build crashed before main).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define SERVELAB_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SERVELAB_VECTOR_CLONES
#endif

namespace servelab {

SERVELAB_VECTOR_CLONES
void gather_keys_transposed(const float* keys, const int64_t* slots, int n_ctx, int head_dim, float* kt) {
  for (int p = 0; p < n_ctx; ++p) {
    const float* k = keys + slots[p] * head_dim;
    for (int i = 0; i < head_dim; ++i) kt[size_t(i) * n_ctx + p] = k[i];
  }
}

namespace {

/// sc[h * n_ctx + p] = scale · q_h · kᵀ over the transposed keys: head_dim passes over the
/// positions, four key dims per pass (fewer loads and stores of the scores).
__attribute__((always_inline)) inline void scores_transposed(const AttentionGroupArgs& a) {
  const int n_ctx = a.n_ctx, hd = a.head_dim;
  for (int h = 0; h < a.group; ++h) {
    const float* q = a.q + h * hd;
    float* __restrict sc = a.scores + h * n_ctx;
    std::fill(sc, sc + n_ctx, 0.0f);
    int i = 0;
    for (; i + 4 <= hd; i += 4) {
      const float q0 = q[i] * a.scale, q1 = q[i + 1] * a.scale, q2 = q[i + 2] * a.scale, q3 = q[i + 3] * a.scale;
      const float* __restrict k0 = a.kt + size_t(i) * a.kt_stride;
      const float* __restrict k1 = k0 + a.kt_stride;
      const float* __restrict k2 = k1 + a.kt_stride;
      const float* __restrict k3 = k2 + a.kt_stride;
      for (int p = 0; p < n_ctx; ++p) sc[p] += (q0 * k0[p] + q1 * k1[p]) + (q2 * k2[p] + q3 * k3[p]);
    }
    for (; i < hd; ++i) {
      const float qi = q[i] * a.scale;
      const float* __restrict k = a.kt + size_t(i) * a.kt_stride;
      for (int p = 0; p < n_ctx; ++p) sc[p] += qi * k[p];
    }
  }
}

/// The same scores read from the keys' own slots: per position, a dot product over head_dim in
/// 16 independent lanes (one AVX-512 register, two AVX2 ones) and a fixed reduction tree, so the
/// result does not depend on the vector width the clone uses.
__attribute__((always_inline)) inline void scores_direct(const AttentionGroupArgs& a) {
  constexpr int kLanes = 16;
  const int n_ctx = a.n_ctx, hd = a.head_dim, hd_main = hd / kLanes * kLanes;
  for (int p = 0; p < n_ctx; ++p) {
    const float* __restrict k = a.keys + a.slots[p] * hd;
    for (int h = 0; h < a.group; ++h) {
      const float* __restrict q = a.q + h * hd;
      float acc[kLanes] = {};
      for (int i = 0; i < hd_main; i += kLanes)
        for (int j = 0; j < kLanes; ++j) acc[j] += q[i + j] * k[i + j];
      for (int i = hd_main; i < hd; ++i) acc[i - hd_main] += q[i] * k[i];
      for (int w = kLanes / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
      a.scores[h * n_ctx + p] = acc[0] * a.scale;
    }
  }
}

}  // namespace

SERVELAB_VECTOR_CLONES
void attend_group(const AttentionGroupArgs& a) {
  const int n_ctx = a.n_ctx, group = a.group, hd = a.head_dim;
  if (a.kt)
    scores_transposed(a);
  else
    scores_direct(a);
  for (int h = 0; h < group; ++h) {
    float* __restrict sc = a.scores + h * n_ctx;
    float max_score = sc[0];
    for (int p = 1; p < n_ctx; ++p) max_score = std::max(max_score, sc[p]);
    float sum = 0.0f;
    for (int p = 0; p < n_ctx; ++p) sum += (sc[p] = std::exp(sc[p] - max_score));
    const float inv = 1.0f / sum;
    for (int p = 0; p < n_ctx; ++p) sc[p] *= inv;
  }
  std::fill(a.out, a.out + group * hd, 0.0f);
  int p = 0;
  for (; p + 4 <= n_ctx; p += 4) {  // four positions per pass over the outputs
    const float* __restrict v0 = a.values + a.slots[p] * hd;
    const float* __restrict v1 = a.values + a.slots[p + 1] * hd;
    const float* __restrict v2 = a.values + a.slots[p + 2] * hd;
    const float* __restrict v3 = a.values + a.slots[p + 3] * hd;
    for (int h = 0; h < group; ++h) {
      const float* w = a.scores + h * n_ctx + p;
      float* __restrict o = a.out + h * hd;
      for (int i = 0; i < hd; ++i) o[i] += (w[0] * v0[i] + w[1] * v1[i]) + (w[2] * v2[i] + w[3] * v3[i]);
    }
  }
  for (; p < n_ctx; ++p) {
    const float* __restrict vp = a.values + a.slots[p] * hd;
    for (int h = 0; h < group; ++h) {
      const float w = a.scores[h * n_ctx + p];
      float* __restrict o = a.out + h * hd;
      for (int i = 0; i < hd; ++i) o[i] += w * vp[i];
    }
  }
}

}  // namespace servelab
