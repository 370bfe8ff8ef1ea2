#pragma once
// The tensors of a Llama-family checkpoint under their Hugging Face names, in file order, with
// their shapes, and where each one lives in ModelWeights. Shared by random init, load and synth,
// so the three agree on names and shapes by construction.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/weights.h"

namespace servelab {

/// What a tensor is, which decides how random weights are drawn for it.
enum class TensorRole { matrix, norm, bias };

/// One checkpoint tensor: HF name, shape (row-major, [out, in] for matrices) and role.
struct TensorSpec {
  std::string name;            ///< e.g. "model.layers.3.mlp.up_proj.weight"
  std::vector<int64_t> shape;  ///< [out, in] for matrices, [n] for norms and biases
  TensorRole role = TensorRole::matrix;

  int64_t numel() const;
  int64_t fan_in() const { return shape.size() == 2 ? shape[1] : shape[0]; }
};

/// Every tensor the config implies, in Hugging Face's order (embedding, layers, norm, lm_head).
/// lm_head.weight is absent when tied; q/k/v biases present only with attention_bias.
std::vector<TensorSpec> tensor_specs(const ModelConfig& config);

/// The storage in `w` for the tensor called `name` (one of tensor_specs' names). Throws
/// std::invalid_argument for an unknown name.
std::vector<float>& tensor_storage(ModelWeights& w, const std::string& name);
const std::vector<float>& tensor_storage(const ModelWeights& w, const std::string& name);

/// "[704, 256]"
std::string shape_string(const std::vector<int64_t>& shape);

/// Fill out[0..count) with elements [begin, begin + count) of the tensor's random values for
/// `seed`, rounded through `dtype`. The stream is counter-based and keyed by (seed, name), so any
/// slice can be drawn alone and tensors are independent of the order they are drawn in.
void fill_random(const TensorSpec& spec, uint64_t seed, DType dtype, int64_t begin, int64_t count,
                 float* out);

}  // namespace servelab
