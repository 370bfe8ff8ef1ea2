#include "engine/backend/cpu_gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "engine/backend/cpu_small_gemm.h"

namespace servelab {
namespace {

/// Rows per item of a long prefill: each item re-packs its weight slice once per row block,
/// 1/kRowBlock of the item's multiply-adds.
constexpr int kRowBlock = 128;
constexpr int kItemsPerThread = 4;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// The best OpenBLAS kernel set this CPU runs, or null when it has neither AVX-512 nor AVX2.
const char* wanted_core() {
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

void repair_core_choice() {
  const std::string core = blas_core();
  const char* want = wanted_core();
  if (core != "Prescott" || !want || std::getenv("OPENBLAS_CORETYPE")) return;
  using Fn = void (*)();
  const auto quit = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  const auto init = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (!quit || !init) return;  // not a dynamic-arch build: nothing to re-select
  setenv("OPENBLAS_CORETYPE", want, 1);  // what gotoblas_dynamic_init reads
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace

void configure_openblas() {
  openblas_set_num_threads(1);
  static std::once_flag once;
  std::call_once(once, repair_core_choice);
}

std::string blas_core() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

int blas_threads() { return openblas_get_num_threads(); }

void gemm_nt(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
             bool accumulate, CpuGemmPath path) {
  if (rows <= 0 || n_cols <= 0) return;
  const bool tuned = path == CpuGemmPath::tuned;
  if (tuned && small_rows_gemm_nt(in, rows, n_in, w, n_cols, out, ldo, accumulate)) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n_cols, n_in, 1.0f, w, n_in, in, 1, beta, out, 1);
    return;
  }
  if (rows % 4 != 3 || !tuned) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_cols, n_in, 1.0f, in, n_in, w, n_in, beta, out,
                ldo);
    return;
  }
  // OpenBLAS's sgemm takes the rows four at a time and pays more for a remainder of three than
  // for a fourth row (15 rows cost 1.15-1.18x 16 on the VM): run on a zero row more, in scratch.
  const int padded = rows + 1;
  thread_local std::vector<float> pin, pout;
  pin.assign(size_t(padded) * n_in, 0.0f);
  std::copy(in, in + size_t(rows) * n_in, pin.begin());
  pout.resize(size_t(padded) * n_cols);
  if (accumulate)
    for (int r = 0; r < rows; ++r) std::copy(out + size_t(r) * ldo, out + size_t(r) * ldo + n_cols, &pout[size_t(r) * n_cols]);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, padded, n_cols, n_in, 1.0f, pin.data(), n_in, w, n_in, beta,
              pout.data(), n_cols);
  for (int r = 0; r < rows; ++r) std::copy(&pout[size_t(r) * n_cols], &pout[size_t(r) * n_cols] + n_cols, out + size_t(r) * ldo);
}

GemmTiling GemmTiling::make(int rows, int n_in, int n_out, int col_align, int n_threads) {
  GemmTiling t;
  t.rows = rows;
  t.n_out = n_out;
  t.row_block = rows > kRowBlock ? kRowBlock : std::max(1, rows);
  t.n_row_blocks = rows > 0 ? ceil_div(rows, t.row_block) : 0;
  const int want_cols = std::max(1, kItemsPerThread * std::max(1, n_threads) / std::max(1, t.n_row_blocks));
  const int64_t min_cols = kMinItemMacs / std::max<int64_t>(1, int64_t(t.row_block) * n_in);
  const int cols = std::max<int>(ceil_div(n_out, want_cols), static_cast<int>(std::min<int64_t>(min_cols, n_out)));
  const int align = std::max(1, col_align);
  t.col_block = std::clamp(ceil_div(cols, align) * align, align, std::max(align, n_out));
  t.n_col_blocks = n_out > 0 ? ceil_div(n_out, t.col_block) : 0;
  return t;
}

void GemmTiling::item(int64_t i, int& r0, int& r1, int& c0, int& c1) const {
  const int rb = static_cast<int>(i / n_col_blocks), cb = static_cast<int>(i % n_col_blocks);
  r0 = rb * row_block;
  r1 = std::min(rows, r0 + row_block);
  c0 = cb * col_block;
  c1 = std::min(n_out, c0 + col_block);
}

void run_items(ThreadPool& pool, int64_t n_items, int64_t work, const std::function<void(int, int64_t)>& body) {
  if (n_items <= 0) return;
  if (pool.n_threads() == 1 || n_items == 1 || work < kMinParallelMacs) {
    for (int64_t i = 0; i < n_items; ++i) body(0, i);
    return;
  }
  pool.parallel_for(n_items, 1, [&](int worker, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) body(worker, i);
  });
}

void parallel_gemm_nt(ThreadPool& pool, const float* in, int rows, int n_in, const float* w, int n_out,
                      float* out, bool accumulate, CpuGemmPath path) {
  const int64_t work = int64_t(rows) * n_in * n_out;
  if (pool.n_threads() == 1 || work < kMinParallelMacs) {
    gemm_nt(in, rows, n_in, w, n_out, out, n_out, accumulate, path);
    return;
  }
  const GemmTiling t = GemmTiling::make(rows, n_in, n_out, 16, pool.n_threads());
  run_items(pool, t.n_items(), work, [&](int, int64_t i) {
    int r0, r1, c0, c1;
    t.item(i, r0, r1, c0, c1);
    gemm_nt(in + size_t(r0) * n_in, r1 - r0, n_in, w + size_t(c0) * n_in, c1 - c0, out + size_t(r0) * n_out + c0,
            n_out, accumulate, path);
  });
}

}  // namespace servelab
