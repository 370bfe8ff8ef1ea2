// The small-rows GEMM loop on AVX-512F (compiled with -mavx512f -mfma: see CMakeLists.txt; called
// only where small_gemm_isa() found the instructions). Includes nothing but the intrinsics and
// the loop, so that no inline library code built for AVX-512 can be shared with other files.
#if defined(__x86_64__)
#include <immintrin.h>

#include "engine/backend/cpu_small_gemm.h"
#include "engine/backend/cpu_small_gemm_loop.h"

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as a mask source and warn about it
// wherever they are inlined (GCC bug 105593): not a read of anything of ours.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace servelab {
namespace {

struct Avx512 {
  using T = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kCols = 4;  // 4 rows x 4 columns = 16 of the 32 registers
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  // The 128-bit steps repeat Avx2::sum's on purpose: an inline function shared by the two files
  // would be built once per instruction set and the linker would keep either copy.
  static float sum(T v) {  // 256-bit halves, then 128-bit quarters, then as Avx2's last steps
    T t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
    __m128 s = _mm512_castps512_ps128(t);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

void small_rows_gemm_avx512(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                            bool accumulate) {
  small_gemm::gemm<Avx512>(in, rows, n_in, w, n_cols, out, ldo, accumulate);
}

}  // namespace servelab
#endif  // __x86_64__
