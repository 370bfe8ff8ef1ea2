#pragma once
// The CPU backend's LoRA adapters: a table of slots (Backend::load_lora) and, per step, the plain
// formula y += scale · (x · Aᵀ) · Bᵀ for each row with an adapter, rows grouped into runs of one
// adapter (a sequence's rows are consecutive). Split as the SGMV/BGMV kernels are: shrink
// (xa = scale · x · Aᵀ, [rows, r]) once per linear, then expand (y += xa · Bᵀ) over any block of
// rows and output columns, so the backend's column-split jobs add each block's delta before their
// epilogue (bias, RoPE, K/V store, SwiGLU).
#include <array>
#include <memory>
#include <vector>

#include "engine/lora/lora_adapter.h"
#include "engine/model/config.h"
#include "kernels/step_input.h"

namespace servelab {

class CpuLora {
 public:
  /// Slot `slot` holds `adapter` (null empties it). Throws std::invalid_argument when its shapes
  /// do not fit `config`.
  void load(int slot, std::shared_ptr<const LoraAdapter> adapter, const ModelConfig& config);
  /// Reads the step's lora_slot into runs of rows of one adapter; false when no row has one.
  /// Throws std::invalid_argument for a row naming an empty or unknown slot.
  bool plan(const kernels::StepInput& in);
  bool active() const { return !runs_.empty(); }
  /// xa(t) = scale · x · Aᵀ for the rows whose adapter targets t. x: [rows, in_dim(t)], rows contiguous.
  void shrink(int layer, LoraTarget t, const float* x);
  /// y[r, c] += Σ_k xa(t)[r, k] · B[c, k] for rows [r0, r1) and columns [c0, c1); y's row stride ld_y.
  /// Thread-safe for disjoint blocks of y.
  void expand(int layer, LoraTarget t, int r0, int r1, int c0, int c1, float* y, int ld_y) const;

 private:
  struct Run {
    int begin = 0, end = 0;  // rows
    const LoraAdapter* adapter = nullptr;
  };
  std::vector<std::shared_ptr<const LoraAdapter>> slots_;
  std::vector<Run> runs_;
  std::array<std::vector<float>, kLoraTargets> xa_;  // per target: run r's rows at begin · max_rank_, [len, rank]
  int max_rank_ = 0;
};

}  // namespace servelab
