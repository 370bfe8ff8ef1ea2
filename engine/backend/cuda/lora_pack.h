#pragma once
// One LoRA adapter as the cuda backend's device pool holds it (cuda_lora.h), in plain C++ so the
// layout is built and tested without a GPU (tests/cuda_backend/lora_pack_test.cpp). Per layer the
// adapted linears are grouped as the forward fuses them: q|k|v, o, gate|up, down. A slot's image
// is, per layer and group, A [n_seg · rank, in] (segment m's ranks at m · rank) then
// B [out, rank] (the fused weight's output columns), 16-bit: kernels/lora.h's LoraPool layout
// for one slot.
#include <array>
#include <cstdint>
#include <vector>

#include "engine/lora/lora_adapter.h"
#include "engine/model/config.h"

namespace servelab::cuda {

/// The adapted linears of a layer as the forward fuses them.
enum class LoraGroup : int { qkv = 0, o, gate_up, down };
inline constexpr int kLoraGroups = 4;

/// One group: its linears (segments) in the fused weight's order, their shared input width and
/// their output columns.
struct LoraGroupShape {
  LoraTarget targets[3] = {};
  int n_seg = 0, in = 0, out = 0;
  int seg_end[3] = {};  ///< output column where segment m ends (the last one's is out)
  int64_t a_elems(int rank) const { return int64_t(n_seg) * rank * in; }
  int64_t b_elems(int rank) const { return int64_t(out) * rank; }
};

/// q|k|v, o, gate|up and down of `config` (one GPU: every head and FFN column).
std::array<LoraGroupShape, kLoraGroups> lora_group_shapes(const ModelConfig& config);
/// The pool's rank for adapters of rank <= max_rank: rounded up to 8 (the expand's 16-byte loads).
inline int lora_pool_rank(int max_rank) { return (max_rank + 7) / 8 * 8; }
/// 16-bit elements of one slot's image at pool rank `rank`.
int64_t lora_image_elems(const ModelConfig& config, int rank);
/// Device bytes of a pool of n_slots slots for adapters of rank <= max_rank (DeviceLoraPool::reserve:
/// every slot's 16-bit image at the pool rank, and a float scale per slot): what a
/// gpu_memory_utilization budget leaves out of the KV cache when LoRA is on.
int64_t lora_pool_bytes(const ModelConfig& config, int n_slots, int max_rank);
/// Writes `adapter` (validated against config, its rank <= `rank`) as one slot's image into
/// out[0, lora_image_elems): its A rows and B columns rounded to bf16 (or fp16 with `f16`), ranks
/// past its own and linears it leaves alone zero. Throws std::invalid_argument when its rank
/// exceeds `rank`. The layers are split over `threads` threads (0: the machine's cores, at most 8).
/// `ffn_order` (one per layer, an empty one: the natural order): the FFN channels in the order an
/// act-order checkpoint's gate|up rows were put in (PackedQuantLinear::row_order): gate's and up's
/// B rows and down's A columns taken in that order, so the deltas meet the products' outputs and
/// inputs channel for channel.
void pack_lora_image(const ModelConfig& config, int rank, const LoraAdapter& adapter, bool f16, uint16_t* out,
                     int threads = 0, const std::vector<std::vector<int32_t>>* ffn_order = nullptr);

}  // namespace servelab::cuda
