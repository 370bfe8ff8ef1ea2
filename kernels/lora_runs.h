#pragma once
// Which rows of an eager step (a prefill, a chunk, a mixed step) run their LoRA deltas on the tensor
// cores (kernels/lora_gemm.h: a shrink GEMM and an expand GEMM per run of rows of one adapter),
// and which stay on the grouped CUDA-core kernels (kernels/lora_sgmv.h). Plain C++, no CUDA: the
// cuda backend calls it on the step's host copy of lora_slot before it launches anything.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace servelab::kernels {

/// Consecutive rows [first, first + count) of one adapter slot.
struct LoraRun {
  int slot = 0, first = 0, count = 0;
  bool operator==(const LoraRun&) const = default;
};

/// The maximal runs of consecutive rows with the same slot >= 0 (rows with slot < 0 end a run and
/// are in none), in row order.
inline std::vector<LoraRun> lora_runs(const int32_t* row_slot, int n_rows) {
  std::vector<LoraRun> runs;
  for (int r = 0; r < n_rows; ++r) {
    const int s = row_slot[r];
    if (s < 0) continue;
    if (!runs.empty() && runs.back().slot == s && runs.back().first + runs.back().count == r) ++runs.back().count;
    else runs.push_back({s, r, 1});
  }
  return runs;
}

/// The runs the tensor cores take: runs of at least min_rows rows, at most max_runs of them (the
/// longest, ties to the earlier), in row order. min_rows <= 0 or max_runs <= 0: none. Each run
/// costs a shrink and an expand launch per product (their launch overhead does not shrink with
/// the run), so short runs (decode rows, the tail of a chunk) stay on the grouped kernels.
inline std::vector<LoraRun> lora_gemm_runs(const int32_t* row_slot, int n_rows, int min_rows, int max_runs) {
  if (min_rows <= 0 || max_runs <= 0) return {};
  std::vector<LoraRun> runs;
  for (const LoraRun& r : lora_runs(row_slot, n_rows))
    if (r.count >= min_rows) runs.push_back(r);
  if (int(runs.size()) > max_runs) {
    std::stable_sort(runs.begin(), runs.end(), [](const LoraRun& a, const LoraRun& b) { return a.count > b.count; });
    runs.resize(size_t(max_runs));
    std::sort(runs.begin(), runs.end(), [](const LoraRun& a, const LoraRun& b) { return a.first < b.first; });
  }
  return runs;
}

/// row_slot with the rows of `runs` set to -1: what the grouped kernels' plan is built from.
/// Returns whether any row keeps an adapter (else the grouped kernels need not run at all).
inline bool lora_rows_left(const int32_t* row_slot, int n_rows, const std::vector<LoraRun>& runs,
                           std::vector<int32_t>& left) {
  left.assign(row_slot, row_slot + n_rows);
  for (const LoraRun& r : runs) std::fill(left.begin() + r.first, left.begin() + r.first + r.count, -1);
  return std::any_of(left.begin(), left.end(), [](int32_t s) { return s >= 0; });
}

/// The fused product's blocks of rows (kernels/lora_fused_gemm.h): at most this many tiles of at
/// most 128 rows a launch (kernel parameters, no upload).
inline constexpr int kLoraFusedMaxTiles = 64;
inline constexpr int kLoraFusedTileRows = 128;
struct LoraFusedTile {
  int32_t row0 = 0, rows = 0, slot = -1;  ///< rows [row0, row0 + rows), rows <= 128; slot -1: the product alone
  float scale = 0;                        ///< the slot's alpha / r
};
struct LoraFusedTiles {
  int n = 0;
  LoraFusedTile tile[kLoraFusedMaxTiles];
};

/// Tiles over rows [0, n_rows): each run (in row order, not overlapping) cut into tiles of at most
/// 128 rows carrying its slot and scale (host_scale[slot]), the rows between and after the runs in
/// tiles of slot -1. False when they would be more than kLoraFusedMaxTiles (the caller keeps the
/// unfused path).
inline bool lora_fused_tiles(const std::vector<LoraRun>& runs, int n_rows, const float* host_scale, LoraFusedTiles& out) {
  out.n = 0;
  auto add = [&](int first, int count, int slot) {
    for (int r = first; r < first + count; r += kLoraFusedTileRows) {
      if (out.n == kLoraFusedMaxTiles) return false;
      out.tile[out.n++] = {r, std::min(kLoraFusedTileRows, first + count - r), slot, slot >= 0 ? host_scale[slot] : 0.f};
    }
    return true;
  };
  int row = 0;
  for (const LoraRun& run : runs) {
    if (run.first > row && !add(row, run.first - row, -1)) return false;
    if (!add(run.first, run.count, run.slot)) return false;
    row = run.first + run.count;
  }
  return row >= n_rows || add(row, n_rows - row, -1);
}

}  // namespace servelab::kernels
