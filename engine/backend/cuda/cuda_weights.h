#pragma once
// The model's weights in bf16 or fp16 (the backend's dtype) on the GPU, in the layouts the kernels expect: per layer a merged
// QKV matrix [(n_heads + 2 n_kv_heads) * head_dim, d] (Q rows, then K, then V, each [out, in] as
// in HF checkpoints) with its merged bias, and a merged gate|up matrix [2 ffn, d] (gate rows
// first), so each is one GEMM. Never held as fp32 on the host.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/cuda/device_memory.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/model/residual_scale.h"
#include "engine/model/tensors.h"

namespace servelab::cuda {

/// Device pointers into DeviceWeights::storage, one layer's worth.
struct DeviceLayer {
  const void* attn_norm = nullptr;  // [d]
  const void* w_qkv = nullptr;      // [dq + 2 dkv, d]
  const void* b_qkv = nullptr;      // [dq + 2 dkv] or null (no attention bias)
  const void* w_o = nullptr;        // [d, dq]
  const void* ffn_norm = nullptr;   // [d]
  const void* w_gate_up = nullptr;  // [2 ffn, d]
  const void* w_down = nullptr;     // [d, ffn]
};

/// All weights in one device allocation.
struct DeviceWeights {
  ModelConfig config;
  DeviceBuffer storage;
  std::vector<DeviceLayer> layers;
  const void* embedding = nullptr;   // [vocab, d]
  const void* final_norm = nullptr;  // [d]
  const void* lm_head = nullptr;     // [vocab, d]; the embedding when tied
  int64_t bytes = 0;                 // bytes of all tensors (2 per element)
  DType storage_dtype = DType::bf16; // bf16 or f16: every tensor above

  /// Random weights drawn on the GPU: the same counter-based stream as fill_random (engine/model/
  /// tensors.h: keyed by seed and tensor name, Box-Muller over splitmix64, rounded through
  /// config.dtype), then stored in `storage` (bf16 or f16), so they equal ModelWeights::random up
  /// to the last bit of the device's log/cos/sin and the storage rounding. A 7B model takes well
  /// under a second.
  static DeviceWeights random(const ModelConfig& config, uint64_t seed, DType storage = DType::bf16);
  /// A Hugging Face folder (config.json + model.safetensors or an index with shards): each tensor
  /// is checked against the config, copied from the memory-mapped file in chunks through a device
  /// staging buffer and converted to `storage` (bf16 or f16) on the GPU. Throws std::runtime_error
  /// naming the file and tensor.
  static DeviceWeights load(const std::string& dir, DType storage = DType::bf16);
  /// Weights already in host memory (fp32), converted to `storage` on the GPU. A quantized
  /// checkpoint loaded with ModelWeights::QuantLinears::keep_only (or load_streamed) has no fp32 Linears: they take
  /// no device memory here and their pointers stay null (upload_quant_weights then runs them in
  /// their format), so neither host nor device ever holds the model's Linears unquantized.
  static DeviceWeights from_host(const ModelWeights& host, DType storage = DType::bf16);
};

// For tensor-parallel shards (tp_weights.cu), on the current device:
/// Lays the model's tensors out in one 16-bit allocation in the order the forward reads them (Q|K|V
/// and gate|up rows adjacent, each tensor 16-byte aligned), allocates w.storage (`what` names it
/// in an out-of-memory error) and sets w's pointers; w.config must be set. `append(name)` is
/// called once per tensor in that order and returns its element count (the whole tensor, or a
/// rank's shard); `tied_head(embedding_offset)` gives the LM head's offset when the embeddings are
/// tied. Returns the element offset of each appended tensor, in call order.
std::vector<int64_t> allocate_layout(DeviceWeights& w, const std::function<int64_t(const std::string&)>& append,
                                     const std::function<int64_t(int64_t)>& tied_head, const char* what);

/// DeviceWeights::random's values of `spec` (same stream, scale and rounding) in a window of the
/// row-major tensor: out[i·cols + j] = element(first + i·full_cols + j), i < rows, j < cols, in
/// `storage` (bf16 or f16). Synchronous.
void random_window(const TensorSpec& spec, uint64_t seed, DType dtype, int64_t first, int64_t full_cols, int64_t rows,
                   int64_t cols, void* out, DType storage);
/// `n` raw checkpoint values (f32, f16 or bf16) already on the device to `storage` (bf16 or f16)
/// at `out`, on the default stream.
void convert_to_storage(const void* in, DType dtype, void* out, int64_t n, DType storage);

/// residual_scale.h on the device: wo and w_down of layers [r.from_layer, n_layers) times
/// r.scale, in their storage dtype (from_layer past the model's layers: nothing). Synchronous.
void scale_residual_branches(DeviceWeights& w, const ResidualScale& r);

}  // namespace servelab::cuda
