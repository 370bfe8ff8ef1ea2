#include "engine/backend/cpu_small_gemm.h"


namespace servelab {
namespace {

std::string detect_isa() {
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "";
}

}  // namespace

const std::string& small_gemm_isa() {
  static const std::string isa = detect_isa();
  return isa;
}

bool small_rows_gemm_nt(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                        bool accumulate) {
  if (rows < 1 || rows > kSmallGemmMaxRows) return false;
  const std::string& isa = small_gemm_isa();
#if defined(__x86_64__)
  if (isa == "avx512") {
    small_rows_gemm_avx512(in, rows, n_in, w, n_cols, out, ldo, accumulate);
    return true;
  }
  if (isa == "avx2") {
    small_rows_gemm_avx2(in, rows, n_in, w, n_cols, out, ldo, accumulate);
    return true;
  }
#endif
  return false;
}

}  // namespace servelab
