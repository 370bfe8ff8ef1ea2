#pragma once
// Dense layers of the CPU backend on its own thread pool: a GEMM is cut into (row block, column
// block) items, each one single-threaded OpenBLAS call on a slice of the weight matrix. Splitting
// by output columns streams each weight once in total (decode is bound by reading weights), and
// one pool for everything keeps OpenBLAS's own threads from spinning beside ours.
#include <cstdint>
#include <functional>
#include <string>

#include "engine/backend/thread_pool.h"

namespace servelab {

/// Below this many multiply-adds a job runs inline: waking the pool costs more than it saves.
inline constexpr int64_t kMinParallelMacs = int64_t(1) << 18;
/// The least work worth one item (a few microseconds): OpenBLAS spends about one per call.
inline constexpr int64_t kMinItemMacs = int64_t(1) << 17;

/// Sets OpenBLAS single-threaded (process-wide; the pool splits the work) and, once per process,
/// repairs its kernel choice: OpenBLAS 0.3.21 (Debian 12) does not know newer Intel models
/// (Emerald Rapids, the 2-core VM's CPU) and falls back to its SSE3 "Prescott" kernels, about
/// half the speed of the AVX-512 ones here. When it reports Prescott on a CPU with AVX-512 (or
/// AVX2 and FMA) and OPENBLAS_CORETYPE is unset, it re-selects SkylakeX (or Haswell) kernels
/// through OpenBLAS's dynamic-arch entry points. Call before any BLAS call is in flight.
void configure_openblas();

/// The kernel set OpenBLAS uses, e.g. "SkylakeX" (openblas_get_corename).
std::string blas_core();
/// OpenBLAS's own thread count (1 once configure_openblas ran).
int blas_threads();

/// How gemm_nt multiplies a few rows. tuned: the small-rows SIMD loop and the padding below.
/// openblas: plain OpenBLAS (sgemv for one row, sgemm otherwise), the comparison
/// scripts/cpu-gemm-bench.sh makes (CpuBackendOptions::gemm, `servelab profile --cpu-gemm`).
enum class CpuGemmPath { tuned, openblas };

/// out[r, j] = Σ_i in[r, i] · w[j, i] (+ out[r, j] when accumulate) for r < rows, j < n_cols.
/// in: [rows, n_in]; w: n_cols rows of a row-major [*, n_in] weight; out: row stride ldo.
/// tuned: up to kSmallGemmMaxRows rows the small-rows SIMD loop (cpu_small_gemm.h) where the CPU
/// has AVX-512 or AVX2; otherwise one sgemm (on a zero row more where rows % 4 == 3), or sgemv for
/// a lone row (it streams the weight once, where gemm would pack it).
void gemm_nt(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
             bool accumulate, CpuGemmPath path = CpuGemmPath::tuned);

/// How a [rows, n_out] output is cut into items: row blocks × column blocks, row-block major.
struct GemmTiling {
  int rows = 0, n_out = 0;
  int row_block = 1, col_block = 1;
  int n_row_blocks = 0, n_col_blocks = 0;

  /// Column blocks are multiples of col_align (a head's width, or a SIMD-friendly 16), small
  /// enough for about four items per thread and large enough for kMinItemMacs each (n_in is the
  /// inner dimension); long prefills are also cut into row blocks.
  static GemmTiling make(int rows, int n_in, int n_out, int col_align, int n_threads);
  int64_t n_items() const { return int64_t(n_row_blocks) * n_col_blocks; }
  /// Item i's rows [r0, r1) and columns [c0, c1).
  void item(int64_t i, int& r0, int& r1, int& c0, int& c1) const;
};

/// Runs body(worker, item) for items [0, n_items) on the pool, or inline on the caller when
/// work (multiply-adds in all) is below kMinParallelMacs or the pool has one thread.
void run_items(ThreadPool& pool, int64_t n_items, int64_t work, const std::function<void(int, int64_t)>& body);

/// out[rows, n_out] (+)= in[rows, n_in] · W[n_out, n_in]ᵀ, split by run_items over GemmTiling::make.
void parallel_gemm_nt(ThreadPool& pool, const float* in, int rows, int n_in, const float* w, int n_out,
                      float* out, bool accumulate, CpuGemmPath path = CpuGemmPath::tuned);

}  // namespace servelab
