#include "engine/backend/make_backend.h"

#include <filesystem>
#include <stdexcept>

#include "engine/backend/cpu_backend.h"
#include "engine/model/hf_config.h"
#include "engine/model/weights.h"

namespace servelab {

namespace {

bool is_checkpoint_dir(const std::string& model) {
  std::error_code ec;
  return std::filesystem::is_directory(model, ec);
}

}  // namespace

const char* to_string(BackendKind k) { return k == BackendKind::cpu ? "cpu" : "sim"; }

BackendKind parse_backend_kind(const std::string& s) {
  if (s == "cpu") return BackendKind::cpu;
  if (s == "sim") return BackendKind::sim;
  throw std::invalid_argument("backend must be cpu or sim (got '" + s + "')");
}

void BackendSpec::validate() const {
  if (model.empty()) throw std::invalid_argument("model must name a preset or a checkpoint folder (got '')");
  if (threads < 0) throw std::invalid_argument("threads must be >= 0 (got " + std::to_string(threads) + ")");
  if (kind == BackendKind::sim) sim_device.validate();
  if (tensor_parallel < 1)
    throw std::invalid_argument("tensor_parallel must be >= 1 (got " + std::to_string(tensor_parallel) + ")");
}

ModelConfig resolve_model_config(const std::string& model) {
  if (is_checkpoint_dir(model)) return read_hf_config((std::filesystem::path(model) / "config.json").string());
  return preset(model);
}

int64_t kv_bytes_per_slot(const BackendSpec& spec) {
  spec.validate();
  const ModelConfig config = resolve_model_config(spec.model);
  if (spec.kind == BackendKind::sim) {  // cheap to build: shapes and a cost model only
    // The slot size depends on the shapes and the device's K/V element size, not on the profile.
    return SimBackend(config, SimCostModel::roofline(spec.sim_device, spec.tensor_parallel)).kv_bytes_per_slot();
  }
  return 2ll * config.n_layers * config.kv_dim() * static_cast<int64_t>(sizeof(float));  // CpuBackend: fp32 K and V
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  spec.validate();
  if (spec.kind == BackendKind::sim) {
    const ModelConfig config = resolve_model_config(spec.model);
    const SimCostModel cost =
        spec.sim_profile.empty()
            ? SimCostModel::roofline(spec.sim_device, spec.tensor_parallel)
            : SimCostModel::from_profile_json(spec.sim_profile, config,
                                              spec.sim_device_set ? std::optional<SimDevice>(spec.sim_device) : std::nullopt,
                                              spec.tensor_parallel);
    return std::make_unique<SimBackend>(config, cost);
  }
  CpuBackendOptions options;
  options.n_threads = spec.threads;
  if (is_checkpoint_dir(spec.model)) return std::make_unique<CpuBackend>(ModelWeights::load(spec.model), options);
  return std::make_unique<CpuBackend>(ModelWeights::random(preset(spec.model), spec.seed), options);
}

}  // namespace servelab
