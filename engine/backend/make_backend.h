#pragma once
// make_backend: builds the backend a scenario names, from a model preset or a checkpoint folder.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu_gemm.h"
#include "engine/backend/cuda/mixed_attention_plan.h"
#include "engine/backend/cuda/tp_all_reduce_mode.h"
#include "engine/backend/sim_backend.h"
#include "engine/lora/lora_config.h"
#include "engine/model/residual_scale.h"

namespace servelab {

enum class BackendKind { cpu, sim, cuda };
const char* to_string(BackendKind k);        ///< "cpu", "sim", "cuda"
BackendKind parse_backend_kind(const std::string& s);  ///< throws listing the kinds

/// What to build. validate() names the bad field.
struct BackendSpec {
  BackendKind kind = BackendKind::cpu;
  /// A preset name (see preset_names()) or a Hugging Face folder (config.json + *.safetensors).
  /// cpu: random weights of the preset drawn with `seed`, or the folder's weights.
  /// sim: only the shapes are needed (the folder's config.json; weights are never read).
  std::string model = "tiny";
  /// sim only: the shapes themselves, in place of `model` (for callers that hold a config rather
  /// than a name: the host-overhead probe of `servelab profile`, tests).
  std::optional<ModelConfig> sim_model_config;
  uint64_t seed = 0;
  int threads = 0;              ///< cpu: attention and BLAS threads, 0 = all cores
  CpuGemmPath cpu_gemm = CpuGemmPath::tuned;  ///< cpu: small-rows products (CpuBackendOptions::gemm)
  SimDevice sim_device = SimDevice::preset("h100");  ///< sim: roofline device
  /// sim with a profile: false = price beyond the grid on the device the profile names; true =
  /// sim_device was asked for, and a profile of another device is refused.
  bool sim_device_set = false;
  std::string sim_profile;      ///< sim: profile JSON to calibrate the cost model (overrides the roofline)
  bool sim_retarget = false;    ///< sim: a profile of another device than sim_device is scaled to it, not refused
  double sim_cost_scale = 1.0;  ///< sim: every step's predicted time times this (SimCostModel::scale), > 0
  /// GPUs per replica. sim: weights, KV heads and FLOPs split, all-reduces added to the step's
  /// price. cuda: > 1 runs TpCudaBackend (cuda/tp_backend.h) on devices 0..N-1 over NCCL (refused
  /// with a message when servelab was built without NCCL); N must divide the heads, the KV heads,
  /// the FFN size and the vocabulary. cpu: ignored.
  int tensor_parallel = 1;
  // cuda (engine/backend/cuda/cuda_backend.h): weights in storage_dtype on the GPU, presets drawn there.
  int device = 0;               ///< cuda: device ordinal
  bool fusion = true;           ///< cuda: false runs the unfused kernels
  bool batch_invariant = false; ///< cuda: results independent of the batch
  bool cuda_graphs = true;      ///< cuda: decode steps replayed from CUDA graphs
  cuda::MixedDecodes mixed_decodes = cuda::MixedDecodes::auto_select;  ///< cuda: CudaBackendOptions::mixed_decodes
  /// cuda, tensor_parallel > 1: the all-reduce (CudaBackendOptions::tp_all_reduce: auto, nccl,
  /// custom) and the largest message ours takes (tp_all_reduce_max_bytes).
  TpAllReduce all_reduce = TpAllReduce::auto_select;
  int64_t all_reduce_max_bytes = kTpCustomAllReduceDefaultMaxBytes;
  /// Presets (cpu and cuda): round the random weights through this dtype (the preset's own when
  /// unset). The cpu backend's arithmetic and KV stay fp32 whatever it says.
  std::optional<DType> dtype;
  /// cuda: weights, activations and KV stored in bf16 or f16 (CudaBackendOptions::dtype), fp32
  /// accumulation. sim: accepted, no effect (K and V cost 2 bytes an element either way). cpu:
  /// only bf16 (the default) is accepted, since it computes in fp32.
  DType storage_dtype = DType::bf16;
  /// The decoder Linears' weight format (`quantization:`, `--quantization`). cpu: a quantized
  /// checkpoint runs as it is (its method must match, or be none here); otherwise the weights are
  /// quantized on load (quantize_weights.h), dequantized for the fp32 forward. sim: priced from
  /// the format's bytes and FLOPs. cuda (one GPU, bf16): the Linears quantized on load from the
  /// drawn or loaded bf16 weights, or a quantized checkpoint as stored (cuda/quant_linear.h).
  Quantization quantization = Quantization::none;
  /// Synthesized weights (`model.residual_scale`, engine/model/residual_scale.h): layers from
  /// from_layer on add scale × their branches to the residual stream, so the model's first layers
  /// (or a smaller draft) predict it at a rate set by construction. cpu and cuda (one GPU); sim:
  /// no effect on prices.
  std::optional<ResidualScale> residual_scale;
  /// > 0: only the model's first N layers with its embedding, final norm and LM head (a
  /// self-speculative draft on cuda: the same random tensors as the full model's, keyed by name).
  /// Presets only; 0 = all layers.
  int first_layers = 0;
  /// fp8: FP8 weights with per-channel scales and per-token activations (compressed-tensors'
  /// FP8-Dynamic); false: vLLM's dynamic FP8 (per-tensor weights and activations).
  bool fp8_per_channel = false;
  /// `kv_cache_dtype:` auto (the backend's element) or fp8 (E4M3 + per-(token, head) scales):
  /// stored for real on cpu and cuda (one GPU), priced and sized on sim.
  KvCacheDType kv_cache_dtype = KvCacheDType::auto_dtype;
  void validate() const;
};

/// The model shapes `model` names (preset, or the folder's config.json).
ModelConfig resolve_model_config(const std::string& model);
/// The spec's model shapes: sim_model_config where set, else resolve_model_config(model).
ModelConfig spec_model_config(const BackendSpec& spec);
/// A quantized checkpoint folder's scheme (its config.json's quantization_config); nullopt for a
/// preset name, a folder without config.json or an unquantized checkpoint.
std::optional<QuantScheme> checkpoint_quant_scheme(const std::string& model);

/// Bytes one token slot of the K/V arena takes in the backend `spec` builds, without drawing or
/// loading weights (scenario validation sizes the arena with it). Throws like make_backend.
int64_t kv_bytes_per_slot(const BackendSpec& spec);

/// CUDA devices this process can use: 0 when servelab was built without CUDA or sees no GPU.
int cuda_devices();
/// "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90, 132 SMs" (or why there is none), for reports.
std::string cuda_device_name(int device);
/// The KV budget a `gpu_memory_utilization` share leaves on a cuda backend (vLLM's rule: the share
/// of total GPU memory, minus what is in use, minus the activations of a step of max_tokens rows
/// and max_seqs sampled rows; Backend::kv_bytes_for_memory_share), and with `lora` enabled minus
/// the adapter pool reserve_loras will allocate after the arena (cuda/lora_pack.h's
/// lora_pool_bytes). Throws std::invalid_argument for a backend without device memory or nothing
/// left, naming the figures.
int64_t kv_bytes_for_gpu_utilization(const Backend& backend, double utilization, int max_tokens, int max_seqs,
                                     const LoraConfig& lora = {});


/// The sim's cost model for `spec` (its profile or the roofline of spec.sim_device, scaled).
SimCostModel sim_cost_model(const BackendSpec& spec, const ModelConfig& config);
/// The device a sim backend built from `spec` prices with: the profile's, unless spec names one.
SimDevice sim_device_for(const BackendSpec& spec);

/// Builds the backend. Throws std::invalid_argument (bad spec, unknown preset) or
/// std::runtime_error (checkpoint or profile file problems, naming the file).
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

struct ModelWeights;

/// Builds fresh backends of one spec, run after run (sweeps, capacity probes): the cpu backend's
/// weights are loaded or drawn once, in the constructor, and shared by every backend made; the
/// other kinds are built by make_backend each time. The one place engines' backends are made.
class BackendFactory {
 public:
  explicit BackendFactory(const BackendSpec& spec);
  ~BackendFactory();
  std::unique_ptr<Backend> make() const;
  /// A backend of this spec in other storage formats (a strategy's `quantization:` and
  /// `kv_cache_dtype:`). cpu: the weights quantized once per format and shared.
  std::unique_ptr<Backend> make(Quantization quantization, KvCacheDType kv_cache_dtype) const;
  /// The storage formats make(quantization, kv_cache_dtype)'s backend reads in, as a roofline
  /// counts bytes: a quantized checkpoint in its own scheme, else `quantization` as quantized on
  /// load; the cpu backend's Linears unquantized (it dequantizes them once and multiplies in fp32).
  StorageFormats formats(Quantization quantization, KvCacheDType kv_cache_dtype) const;
  const BackendSpec& spec() const { return spec_; }
  /// The cpu backend's weights (what a self-speculative draft is cut from); null for other kinds.
  std::shared_ptr<const ModelWeights> weights() const { return weights_; }

 private:
  BackendSpec spec_;
  std::shared_ptr<const ModelWeights> weights_;  // cpu only: as loaded or drawn
  mutable std::mutex mu_;
  mutable std::map<Quantization, std::shared_ptr<const ModelWeights>> quantized_;  // cpu: per format
};

}  // namespace servelab
