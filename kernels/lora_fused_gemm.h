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
/// rank 16 or 32, in % 8 == 0, out % 8 == 0, the segments' ends multiples of 8 and of 128 (rank 32)
/// or every segment at least 128 wide (rank 16: a block may cross one end), and the device of
/// compute capability 9.0 with the sm_90a build. A pool with n_slots == 0 (no LoRA) needs only
/// the shape and the device.
bool lora_fused_fits(ScalarType t, const LoraPool& pool, int out, int in);

/// A launch's blocks: 128, 192 or 256 columns, K split across `splits` blocks (> 1: each stores
/// fp32 partial sums, the tile's last block adds them in split order and runs the epilogue).
struct LoraFusedShape {
  int block_n = 0;  ///< 0: LoraFusedGemm::pick's
  int splits = 1;
};

/// Owns the tensor maps (cached by address and shape: a step's buffers and the weights repeat)
/// and the split-K workspace (grown in eager launches: never first used under graph capture).
class LoraFusedGemm {
 public:
  LoraFusedGemm();
  ~LoraFusedGemm();
  LoraFusedGemm(const LoraFusedGemm&) = delete;
  LoraFusedGemm& operator=(const LoraFusedGemm&) = delete;

  /// y[r, c] = Σ_i x[r, i] · w[c, i] (+ the tile's delta where its slot >= 0) for the tiles'
  /// rows; y [*, out] row-major (ld out), x [n_rows, in], w [out, in]. pool.n_slots == 0: the
  /// product alone for every tile. Throws std::invalid_argument where lora_fused_fits is false
  /// or the shape is not one the kernel has.
  /// x_rows: rows the x buffer holds (>= n_rows; 0: n_rows): a tile's rows past n_rows are read
  /// from there (never stored) instead of the tensor copy's out-of-bounds zeros.
  void run(ScalarType t, const void* x, const void* w, void* y, int n_rows, int out, int in, const LoraPool& pool,
           const LoraFusedTiles& tiles, cudaStream_t stream, LoraFusedShape shape = {}, int x_rows = 0);
  /// The blocks a launch takes with shape {}: by the grid's waves, the L2 traffic of the busy
  /// blocks and the splits' fixup (lora_fused_gemm.cu).
  LoraFusedShape pick(const LoraPool& pool, int out, int in, int n_tiles) const;

 private:
  struct Maps;
  std::unique_ptr<Maps> maps_;
  int sms_ = 0;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  void* counters_ = nullptr;
  int64_t n_counters_ = 0;
};

}  // namespace servelab::kernels
