#pragma once
// The small-rows GEMM loop, written once over a vector type V (included only by
// cpu_small_gemm_avx512.cpp and cpu_small_gemm_avx2.cpp, each compiled for its instruction set;
// keep this header free of non-template functions so no code built for one set leaks into
// another file).
//
// V provides: T (the register), kLanes, kCols (weight rows multiplied together), zero(),
// load(const float*), fma(a, b, c) = a·b + c, sum(T) (a fixed tree over the lanes).
namespace servelab::small_gemm {

/// out[g, c] (+)= in[g] · w[c] for G input rows and C weight rows: each step loads C weight
/// vectors once and multiplies them into all G rows' vectors (G·C accumulators in registers).
template <class V, int G, int C>
inline void tile(const float* in, int n_in, const float* w, float* out, int ldo, bool accumulate) {
  typename V::T acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = V::zero();
  int i = 0;
  for (; i + V::kLanes <= n_in; i += V::kLanes) {
    typename V::T wv[C];
    for (int c = 0; c < C; ++c) wv[c] = V::load(w + long(c) * n_in + i);
    for (int g = 0; g < G; ++g) {
      const typename V::T x = V::load(in + long(g) * n_in + i);
      for (int c = 0; c < C; ++c) acc[g][c] = V::fma(x, wv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) {
      float s = V::sum(acc[g][c]);
      for (int k = i; k < n_in; ++k) s += in[long(g) * n_in + k] * w[long(c) * n_in + k];
      float& o = out[long(g) * ldo + c];
      o = accumulate ? o + s : s;
    }
}

/// Every row against C weight rows, the rows in groups of up to 4: the C weight rows leave
/// memory once and stay in cache while the later groups pass over them.
template <class V, int C>
inline void all_rows(const float* in, int rows, int n_in, const float* w, float* out, int ldo, bool accumulate) {
  for (int r = 0; r < rows; r += 4) {
    const float* x = in + long(r) * n_in;
    float* o = out + long(r) * ldo;
    switch (rows - r) {
      case 1: tile<V, 1, C>(x, n_in, w, o, ldo, accumulate); break;
      case 2: tile<V, 2, C>(x, n_in, w, o, ldo, accumulate); break;
      case 3: tile<V, 3, C>(x, n_in, w, o, ldo, accumulate); break;
      default: tile<V, 4, C>(x, n_in, w, o, ldo, accumulate); break;
    }
  }
}

/// The whole product, kCols weight rows at a time (the last n_cols % kCols one by one).
template <class V>
inline void gemm(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                 bool accumulate) {
  int j = 0;
  for (; j + V::kCols <= n_cols; j += V::kCols)
    all_rows<V, V::kCols>(in, rows, n_in, w + long(j) * n_in, out + j, ldo, accumulate);
  for (; j < n_cols; ++j) all_rows<V, 1>(in, rows, n_in, w + long(j) * n_in, out + j, ldo, accumulate);
}

}  // namespace servelab::small_gemm
