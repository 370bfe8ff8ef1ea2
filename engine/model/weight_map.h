#pragma once
// The weight_map of a sharded Hugging Face checkpoint (model.safetensors.index.json): which shard
// file holds each tensor. Shared by ModelWeights::load (CPU) and the CUDA backend's loader.
#include <map>
#include <string>

namespace servelab {

/// Tensor name -> shard file name (a bare file name inside the model folder). Throws
/// std::runtime_error("PATH: ...") when the file cannot be read, is not JSON, has no
/// "weight_map" object, or names something other than a file in the folder.
std::map<std::string, std::string> read_weight_map(const std::string& path);

}  // namespace servelab
