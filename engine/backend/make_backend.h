#pragma once
// make_backend: builds the backend a scenario names, from a model preset or a checkpoint folder.
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/sim_backend.h"

namespace servelab {

enum class BackendKind { cpu, sim };
const char* to_string(BackendKind k);        ///< "cpu", "sim"
BackendKind parse_backend_kind(const std::string& s);  ///< throws listing the kinds

/// What to build. validate() names the bad field.
struct BackendSpec {
  BackendKind kind = BackendKind::cpu;
  /// A preset name (see preset_names()) or a Hugging Face folder (config.json + *.safetensors).
  /// cpu: random weights of the preset drawn with `seed`, or the folder's weights.
  /// sim: only the shapes are needed (the folder's config.json; weights are never read).
  std::string model = "tiny";
  uint64_t seed = 0;
  int threads = 0;              ///< cpu: attention and BLAS threads, 0 = all cores
  SimDevice sim_device = SimDevice::preset("h100");  ///< sim: roofline device
  /// sim with a profile: false = price beyond the grid on the device the profile names; true =
  /// sim_device was asked for, and a profile of another device is refused.
  bool sim_device_set = false;
  std::string sim_profile;      ///< sim: profile JSON to calibrate the cost model (overrides the roofline)
  int tensor_parallel = 1;      ///< sim: GPUs per replica (weights, KV heads, FLOPs split; all-reduces added)
  void validate() const;
};

/// The model shapes `model` names (preset, or the folder's config.json).
ModelConfig resolve_model_config(const std::string& model);

/// Bytes one token slot of the K/V arena takes in the backend `spec` builds, without drawing or
/// loading weights (scenario validation sizes the arena with it). Throws like make_backend.
int64_t kv_bytes_per_slot(const BackendSpec& spec);

/// Builds the backend. Throws std::invalid_argument (bad spec, unknown preset) or
/// std::runtime_error (checkpoint or profile file problems, naming the file).
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

}  // namespace servelab
