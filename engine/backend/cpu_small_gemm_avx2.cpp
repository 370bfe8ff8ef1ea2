// The small-rows GEMM loop on AVX2 with FMA (compiled with -mavx2 -mfma: see CMakeLists.txt;
// called only where small_gemm_isa() found the instructions). Includes nothing but the
// intrinsics and the loop, so that no inline library code built for AVX2 can be shared with
// other files.
#if defined(__x86_64__)
#include <immintrin.h>

#include "engine/backend/cpu_small_gemm.h"
#include "engine/backend/cpu_small_gemm_loop.h"

namespace servelab {
namespace {

struct Avx2 {
  using T = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kCols = 2;  // 4 rows x 2 columns = 8 of the 16 registers
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(T v) {  // (lanes i and i + 4), then pairs, then the last two
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

void small_rows_gemm_avx2(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                          bool accumulate) {
  small_gemm::gemm<Avx2>(in, rows, n_in, w, n_cols, out, ldo, accumulate);
}

}  // namespace servelab
#endif  // __x86_64__
