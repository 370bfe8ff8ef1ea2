#include "engine/backend/make_backend.h"

#include "engine/backend/cuda/lora_pack.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "engine/backend/cpu_backend.h"
#ifdef SERVELAB_HAVE_CUDA_BACKEND
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/lora_pack.h"
#include "engine/backend/cuda/tp_backend.h"
#endif
#include "engine/backend/cuda/tp_plan.h"
#include "engine/model/hf_config.h"
#include "engine/model/induction_weights.h"
#include "engine/model/quant_checkpoint.h"
#include "engine/model/quantize_weights.h"
#include "engine/model/weights.h"

namespace servelab {

namespace {

bool is_checkpoint_dir(const std::string& model) {
  std::error_code ec;
  return std::filesystem::is_directory(model, ec);
}

/// The preset `spec.model` names, rounded through spec.dtype, cut to spec.first_layers.
ModelConfig preset_config(const BackendSpec& spec) {
  ModelConfig config = preset(spec.model);
  if (spec.dtype) config.dtype = *spec.dtype;
  if (spec.first_layers > 0) {
    if (spec.first_layers > config.n_layers)
      throw std::invalid_argument("first_layers " + std::to_string(spec.first_layers) + " is more than " + spec.model +
                                  "'s " + std::to_string(config.n_layers) + " layers");
    config.n_layers = spec.first_layers;
    config.name += "-first" + std::to_string(spec.first_layers);
  }
  return config;
}

}  // namespace

const char* to_string(BackendKind k) {
  switch (k) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::sim: return "sim";
    case BackendKind::cuda: return "cuda";
  }
  return "?";
}

BackendKind parse_backend_kind(const std::string& s) {
  if (s == "cpu") return BackendKind::cpu;
  if (s == "sim") return BackendKind::sim;
  if (s == "cuda") return BackendKind::cuda;
  throw std::invalid_argument("backend must be cpu, sim or cuda (got '" + s + "')");
}

int cuda_devices() {
#ifdef SERVELAB_HAVE_CUDA_BACKEND
  return cuda_device_count();
#else
  return 0;
#endif
}

std::string cuda_device_name(int device) {
#ifdef SERVELAB_HAVE_CUDA_BACKEND
  if (device >= 0 && device < cuda_device_count()) return cuda_device_description(device);
  return "cuda device " + std::to_string(device) + " (not present)";
#else
  return "cuda device " + std::to_string(device) + " (servelab built without CUDA)";
#endif
}

int64_t kv_bytes_for_gpu_utilization(const Backend& backend, double utilization, int max_tokens, int max_seqs,
                                     const LoraConfig& lora) {
  const std::optional<int64_t> bytes = backend.kv_bytes_for_memory_share(utilization, max_tokens, max_seqs);
  if (!bytes) throw std::invalid_argument("gpu_memory_utilization applies to backend cuda, not " + backend.name());
  if (!lora.enabled) return *bytes;
  const int64_t pool = cuda::lora_pool_bytes(backend.config(), lora.max_loras, lora.max_lora_rank);
  if (*bytes - pool < backend.kv_bytes_per_slot())
    throw std::invalid_argument("gpu_memory_utilization " + std::to_string(utilization) + " leaves " +
                                std::to_string(double(*bytes) / 1e9) + " GB for the KV cache, less than the LoRA adapter pool's " +
                                std::to_string(double(pool) / 1e9) + " GB (max_loras " + std::to_string(lora.max_loras) +
                                ", max_lora_rank " + std::to_string(lora.max_lora_rank) + ")");
  return *bytes - pool;
}

void BackendSpec::validate() const {
  if (model.empty()) throw std::invalid_argument("model must name a preset or a checkpoint folder (got '')");
  if (threads < 0) throw std::invalid_argument("threads must be >= 0 (got " + std::to_string(threads) + ")");
  if (kind == BackendKind::sim) sim_device.validate();
  if (sim_model_config && kind != BackendKind::sim)
    throw std::invalid_argument("sim_model_config is for backend sim only (the other backends load `model`)");
  if (!(sim_cost_scale > 0.0) || !std::isfinite(sim_cost_scale))
    throw std::invalid_argument("sim_cost_scale must be a finite number > 0 (got " + std::to_string(sim_cost_scale) + ")");
  if (device < 0) throw std::invalid_argument("device must be >= 0 (got " + std::to_string(device) + ")");
  if (tensor_parallel < 1)
    throw std::invalid_argument("tensor_parallel must be >= 1 (got " + std::to_string(tensor_parallel) + ")");
  if (storage_dtype != DType::bf16 && storage_dtype != DType::f16)
    throw std::invalid_argument(std::string("dtype must be bf16 or f16 (got ") + to_string(storage_dtype) + ")");
  if (kind == BackendKind::cuda && kv_cache_dtype != KvCacheDType::auto_dtype && tensor_parallel > 1)
    throw std::invalid_argument(std::string("kv_cache_dtype ") + to_string(kv_cache_dtype) + " with tensor_parallel " +
                                std::to_string(tensor_parallel) +
                                ": the tensor-parallel cuda backend keeps its KV cache in bf16/f16 so far; an FP8 KV "
                                "cache runs on one GPU (tensor_parallel 1), backend cpu and sim");
  if (kind == BackendKind::cuda && quantization != Quantization::none && tensor_parallel > 1)
    throw std::invalid_argument(std::string("quantization ") + to_string(quantization) +
                                " with tensor_parallel " + std::to_string(tensor_parallel) +
                                ": the tensor-parallel cuda backend runs bf16/f16 Linears only so far; quantized "
                                "formats run on one GPU (tensor_parallel 1), backend cpu and sim");
  if (residual_scale) residual_scale->validate("residual_scale");
  if (residual_scale && kind == BackendKind::cuda && tensor_parallel > 1)
    throw std::invalid_argument("residual_scale runs on one GPU so far (tensor_parallel " +
                                std::to_string(tensor_parallel) + " shards the scaled projections)");
  if (first_layers < 0) throw std::invalid_argument("first_layers must be >= 0 (got " + std::to_string(first_layers) + ")");
  if (first_layers > 0 && is_checkpoint_dir(model))
    throw std::invalid_argument("first_layers (a self-speculative draft's layers) applies to presets; " + model +
                                " is a checkpoint folder");
  if (kind == BackendKind::cpu && storage_dtype != DType::bf16)
    throw std::invalid_argument(std::string("dtype ") + to_string(storage_dtype) +
                                " applies to backend cuda or sim; the cpu backend computes and stores K/V in fp32");
}


ModelConfig resolve_model_config(const std::string& model) {
  if (is_checkpoint_dir(model)) return read_hf_config((std::filesystem::path(model) / "config.json").string());
  return preset(model);
}

ModelConfig spec_model_config(const BackendSpec& spec) {
  if (spec.sim_model_config) return *spec.sim_model_config;
  return spec.first_layers > 0 ? preset_config(spec) : resolve_model_config(spec.model);
}

int64_t kv_bytes_per_slot(const BackendSpec& spec) {
  spec.validate();
  const ModelConfig config = spec_model_config(spec);
  if (spec.kind == BackendKind::sim) {  // cheap to build: shapes and a cost model only
    // The slot depends on the shapes and the K/V element of the device the sim runs as: its
    // profile's (a cpu profile's fp32) unless sim_device is set, as make_backend builds it.
    SimCostModel roofline = SimCostModel::roofline(sim_device_for(spec), spec.tensor_parallel);
    roofline.formats.kv_cache_dtype = spec.kv_cache_dtype;
    return SimBackend(config, roofline).kv_bytes_per_slot();
  }
  if (spec.kind == BackendKind::cuda && spec.kv_cache_dtype == KvCacheDType::fp8)  // one GPU (validate)
    return cuda_kv_cache_spec(config, spec.storage_dtype, spec.kv_cache_dtype).bytes_per_slot();
  if (spec.kind == BackendKind::cuda) {  // bf16 or f16 K and V (of one GPU's KV heads with tensor_parallel)
    const int64_t element = static_cast<int64_t>(dtype_size(spec.storage_dtype));
    return spec.tensor_parallel == 1 ? 2ll * config.n_layers * config.kv_dim() * element
                                     : cuda::TpPlan::make(config, spec.tensor_parallel).kv_bytes_per_slot(int(element));
  }
  return KvCacheSpec::of(config, DType::f32, 1, spec.kv_cache_dtype).bytes_per_slot();  // CpuBackend: fp32 or fp8 K and V
}

SimCostModel sim_cost_model(const BackendSpec& spec, const ModelConfig& config) {
  SimCostModel cost =
      spec.sim_profile.empty()
          ? SimCostModel::roofline(spec.sim_device, spec.tensor_parallel)
          : SimCostModel::from_profile_json(spec.sim_profile, config,
                                            spec.sim_device_set ? std::optional<SimDevice>(spec.sim_device) : std::nullopt,
                                            spec.tensor_parallel, spec.sim_retarget);
  cost.scale = spec.sim_cost_scale;
  cost.formats.quant = scheme_for_model(spec.quantization, config, spec.fp8_per_channel);
  cost.formats.kv_cache_dtype = spec.kv_cache_dtype;
  return cost;
}

SimDevice sim_device_for(const BackendSpec& spec) {
  spec.validate();
  if (spec.kind != BackendKind::sim || spec.sim_device_set || spec.sim_profile.empty()) return spec.sim_device;
  return sim_cost_model(spec, spec_model_config(spec)).device;
}

#ifdef SERVELAB_HAVE_CUDA_BACKEND
/// Tensor parallelism's host and all-reduce settings from the environment, for measuring one
/// against another without a rebuild (docs/tensor-parallel.md): SERVELAB_TP_SPIN_US,
/// SERVELAB_TP_FUSE (0/1: the fused all-reduce + norm), SERVELAB_TP_PUSH (0/1: the products'
/// pushes), SERVELAB_TP_LAMPORT_MAX_BYTES (0: the barrier all-reduce for every message),
/// SERVELAB_TP_LAMPORT_EAGER (1: lamport in eager steps too). A value
/// that is not a whole number is an error naming the variable.
static void apply_tp_env(CudaBackendOptions& o) {
  const auto read = [](const char* name, int64_t lo, int64_t hi, auto& field) {
    const char* v = std::getenv(name);
    if (!v || !*v) return;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (*end || x < lo || x > hi)
      throw std::invalid_argument(std::string(name) + "=" + v + ": expected a whole number in [" + std::to_string(lo) +
                                  ", " + std::to_string(hi) + "]");
    field = static_cast<std::remove_reference_t<decltype(field)>>(x);
  };
  read("SERVELAB_TP_SPIN_US", 0, 10'000'000, o.tp_spin_us);
  read("SERVELAB_TP_FUSE", 0, 1, o.tp_fuse_all_reduce_norm);
  read("SERVELAB_TP_PUSH", 0, 1, o.tp_push_from_product);
  read("SERVELAB_TP_LAMPORT_MAX_BYTES", 0, int64_t(1) << 30, o.tp_lamport_max_bytes);
  read("SERVELAB_TP_LAMPORT_EAGER", 0, 1, o.tp_lamport_eager);
}
#endif

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  spec.validate();
  if (spec.kind == BackendKind::sim) {
    const ModelConfig config = spec_model_config(spec);
    return std::make_unique<SimBackend>(config, sim_cost_model(spec, config));
  }
  if (spec.kind == BackendKind::cuda) {
#ifdef SERVELAB_HAVE_CUDA_BACKEND
    CudaBackendOptions o;
    o.device = spec.device;
    o.fusion = spec.fusion;
    o.batch_invariant = spec.batch_invariant;
    o.cuda_graphs = spec.cuda_graphs;
    o.mixed_decodes = spec.mixed_decodes;
    o.tp_all_reduce = spec.all_reduce;
    o.tp_all_reduce_max_bytes = spec.all_reduce_max_bytes;
    o.dtype = spec.storage_dtype;
    o.quantization = spec.quantization;
    o.fp8_per_channel = spec.fp8_per_channel;
    o.kv_cache_dtype = spec.kv_cache_dtype;
    o.residual_scale = spec.residual_scale;
    apply_tp_env(o);
    if (spec.tensor_parallel > 1 && is_checkpoint_dir(spec.model) && checkpoint_quant_scheme(spec.model))
      throw std::invalid_argument(spec.model + ": a quantized checkpoint; the tensor-parallel cuda backend runs "
                                  "bf16/f16 Linears only (one GPU runs it in its own format)");
    if (is_constructed_preset(spec.model))
      throw std::invalid_argument(spec.model + ": its weights are constructed on the host; write them with `servelab "
                                  "model synth --preset " + spec.model + " --out DIR` and give model.path DIR");
    if (spec.tensor_parallel > 1) {  // tp_backend.h: a rank per GPU, NCCL between them
      if (is_checkpoint_dir(spec.model)) return TpCudaBackend::load(spec.model, spec.tensor_parallel, o);
      return TpCudaBackend::random(preset_config(spec), spec.seed, spec.tensor_parallel, o);
    }
    if (is_checkpoint_dir(spec.model)) return CudaBackend::load(spec.model, o);
    return CudaBackend::random(preset_config(spec), spec.seed, o);
#else
    throw std::runtime_error("backend cuda: this servelab was built without CUDA (nvcc was not found at configure "
                             "time, or -DSERVELAB_CUDA=OFF); rebuild on a machine with the CUDA toolkit, or use "
                             "backend cpu or sim");
#endif
  }
  return BackendFactory(spec).make();
}

BackendFactory::BackendFactory(const BackendSpec& spec) : spec_(spec) {
  spec_.validate();
  if (spec_.kind != BackendKind::cpu) return;
  ModelWeights w = is_checkpoint_dir(spec_.model) ? ModelWeights::load(spec_.model)
                                                  : preset_weights(spec_.model, preset_config(spec_), spec_.seed);
  apply_residual_scale(w, spec_.residual_scale);
  weights_ = std::make_shared<const ModelWeights>(std::move(w));
  (void)make(spec_.quantization, spec_.kv_cache_dtype);  // a format the weights cannot take fails here
}

BackendFactory::~BackendFactory() = default;

std::optional<QuantScheme> checkpoint_quant_scheme(const std::string& model) {
  const std::filesystem::path config = std::filesystem::path(model) / "config.json";
  std::error_code ec;
  if (model.empty() || !std::filesystem::exists(config, ec)) return std::nullopt;
  return read_quant_scheme(config.string());
}

std::unique_ptr<Backend> BackendFactory::make() const { return make(spec_.quantization, spec_.kv_cache_dtype); }

StorageFormats BackendFactory::formats(Quantization quantization, KvCacheDType kv_cache_dtype) const {
  StorageFormats f;
  f.kv_cache_dtype = kv_cache_dtype;
  if (spec_.kind == BackendKind::cpu) return f;
  const std::optional<QuantScheme> checkpoint = checkpoint_quant_scheme(spec_.model);
  f.quant = checkpoint ? *checkpoint
                       : scheme_for_model(quantization, spec_model_config(spec_), spec_.fp8_per_channel);
  return f;
}

std::unique_ptr<Backend> BackendFactory::make(Quantization quantization, KvCacheDType kv_cache_dtype) const {
  if (!weights_) {
    BackendSpec spec = spec_;
    spec.quantization = quantization;
    spec.kv_cache_dtype = kv_cache_dtype;
    return make_backend(spec);
  }
  std::shared_ptr<const ModelWeights> weights = weights_;
  if (weights_->quant.quantized()) {  // a quantized checkpoint runs in its own format
    if (quantization != Quantization::none && quantization != weights_->quant.method)
      throw std::invalid_argument(std::string("quantization ") + to_string(quantization) + ": " + spec_.model +
                                  " is a " + weights_->quant.describe() + " checkpoint");
  } else if (quantization != Quantization::none) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& q = quantized_[quantization];
    if (!q)
      q = std::make_shared<const ModelWeights>(
          quantize_weights(*weights_, scheme_for_model(quantization, weights_->config, spec_.fp8_per_channel)));
    weights = q;
  }
  CpuBackendOptions options;
  options.n_threads = spec_.threads;
  options.gemm = spec_.cpu_gemm;
  options.kv_cache_dtype = kv_cache_dtype;
  return std::make_unique<CpuBackend>(weights, options);
}

}  // namespace servelab
