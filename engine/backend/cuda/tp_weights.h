#pragma once
// One tensor-parallel rank's weights on its GPU (issue 13), in the layout CudaBackend's forward
// reads (cuda_weights.h: merged QKV and gate|up, bf16 or fp16), holding only the rank's shard of each
// tensor as TpPlan (tp_plan.h) cuts it. The config stays the whole model's; the rank's widths are
// the plan's (heads, kv_heads, ffn, vocab). Built on the current device; synchronous.
#include <cstdint>
#include <string>

#include "engine/backend/cuda/cuda_weights.h"
#include "engine/backend/cuda/tp_plan.h"

namespace servelab::cuda {

/// Rank `rank`'s shard of the random weights DeviceWeights::random(plan.model, seed) draws: each
/// element comes from the whole tensor's stream at its index in the whole tensor, so the shards
/// together are exactly the TP = 1 model. Nothing but the shard is drawn or stored.
DeviceWeights shard_random(const TpPlan& plan, int rank, uint64_t seed, DType storage = DType::bf16);

/// Rank `rank`'s shard of the Hugging Face folder `dir` (whose config.json gave plan.model): only
/// the shard's rows / columns are copied from the memory-mapped safetensors (through a 64 MB
/// device staging buffer) and converted to `storage` (bf16 or f16). Throws std::runtime_error naming the file and
/// tensor (missing, wrong shape, unsupported dtype).
DeviceWeights shard_load(const std::string& dir, const TpPlan& plan, int rank, DType storage = DType::bf16);

}  // namespace servelab::cuda
