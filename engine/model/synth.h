#pragma once
// Synthetic checkpoints: a preset's (or any config's) random weights written in Hugging Face's
// layout, so the same loader serves real and synthetic models.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/config.h"

namespace servelab {

/// One file of a planned checkpoint and the tensors it holds, in file order.
struct ShardPlan {
  std::string file;                  ///< "model.safetensors" or "model-00001-of-00003.safetensors"
  std::vector<std::string> tensors;  ///< HF names
  int64_t nbytes = 0;                ///< tensor data bytes (headers not counted)
};

/// How tensor_specs(config) split into files of at most max_shard_bytes of tensor data, the
/// way transformers' save_pretrained splits them: tensors in order, a new shard when the next
/// one would overflow (a tensor larger than the limit gets a shard of its own). One shard is
/// named model.safetensors.
std::vector<ShardPlan> plan_shards(const ModelConfig& config, int64_t max_shard_bytes);

/// Write config.json and the weights of ModelWeights::random(config, seed) in config.dtype
/// into dir (created if needed): model.safetensors, or model-0000i-of-0000n.safetensors plus
/// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}). Tensors are drawn
/// and written a slice at a time, so memory stays small whatever the model's size.
/// Throws std::invalid_argument for a bad config or limit, std::runtime_error on I/O errors.
void synthesize_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed,
                           int64_t max_shard_bytes = 2'000'000'000);

/// Parse a size such as "2GB", "500MB", "10KB", "4GiB" or "123" (bytes); GB = 1e9, GiB = 2^30,
/// as transformers' max_shard_size. Throws std::invalid_argument.
int64_t parse_byte_size(const std::string& text);

}  // namespace servelab
