#pragma once
// A product with its LoRA runs inside (Hopper, sm_90a): y = x · Wᵀ, and for the rows of each run
// of one adapter (kernels/lora_runs.h) y += scale · (x · A[slot]ᵀ) · B[slot]ᵀ, in one launch
// instead of cuBLASLt's product plus a shrink beside it and an expand after it (lora_gemm.h).
// A block takes 128 rows of one run (or of rows without a run) by BN = 128 or 256 columns of one
// segment (q, k, v or gate, up), K in steps of 64 through a TMA pipeline (a producer warpgroup,
// two consumer warpgroups of 64 rows, wgmma m64nBNk16): the shrink is one more wgmma a k-step on
// the same x tile (m64nRk16 against the slot's A rows, R = the pool's rank), so xa costs no read
// of x of its own; the epilogue rounds xa · scale to 16 bits (as the shrink GEMM stores it) and
// adds xa · B to the accumulators (mma.sync m16n8k16, B from L2) before the one store of y.
// Rows in no run get the plain product (their adapters, if any, stay with the grouped kernels).
// Reference: kernels/ref/lora_ref.h (lora_fused_gemm_ref).
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/lora.h"
#include "kernels/lora_runs.h"

namespace servelab::kernels {

/// Whether the fused kernel takes a product of `out` x `in` with this pool: 16-bit, the pool's
/// rank 16 or 32, in % 8 == 0, out % 8 == 0, every segment's end a multiple of 128, and the
/// device of compute capability 9.0 with the sm_90a build. A pool with n_slots == 0 (no LoRA)
/// needs only the shape and the device.
bool lora_fused_fits(ScalarType t, const LoraPool& pool, int out, int in);

/// Owns the tensor maps (cached by address and shape: a step's buffers and the weights repeat).
class LoraFusedGemm {
 public:
  LoraFusedGemm();
  ~LoraFusedGemm();
  LoraFusedGemm(const LoraFusedGemm&) = delete;
  LoraFusedGemm& operator=(const LoraFusedGemm&) = delete;

  /// y[r, c] = Σ_i x[r, i] · w[c, i] (+ the tile's delta where its slot >= 0) for the tiles'
  /// rows; y [*, out] row-major (ld out), x [n_rows, in], w [out, in]. pool.n_slots == 0: the
  /// product alone for every tile. block_n 0 picks 128 or 256 columns by the grid's waves (128 or
  /// 256 forces one, where the segments allow it). Throws std::invalid_argument where
  /// lora_fused_fits is false.
  void run(ScalarType t, const void* x, const void* w, void* y, int n_rows, int out, int in, const LoraPool& pool,
           const LoraFusedTiles& tiles, cudaStream_t stream, int block_n = 0);
  /// The columns a block takes for this shape (run's choice with block_n 0).
  int pick_block_n(const LoraPool& pool, int out, int n_tiles) const;

 private:
  struct Maps;
  std::unique_ptr<Maps> maps_;
  int sms_ = 0;
};

}  // namespace servelab::kernels
