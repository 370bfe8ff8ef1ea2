#pragma once
// Each real step's roofline: the time its FLOPs and bytes would take at the device's ceilings,
// priced by the cost model's own terms (RooflineTerms / roofline_bound, engine/backend/cost_model.h)
// so the sim and this measure count the same work. A run's serving efficiency is Σ roofline over
// Σ measured step time (analysis/roofline_efficiency.h); this file supplies the per-step figures
// and the ceilings, with where they came from.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cost_model.h"
#include "engine/backend/make_backend.h"
#include "loadgen/records/roofline_record.h"

namespace servelab {

/// A step's class by its chunks: decode when every chunk is one token after a computed context,
/// prefill when none is, mixed otherwise.
StepClass step_class_of(const StepShape& shape);

/// Prices steps of one model at one set of ceilings. Keeps its own copies of the model and the
/// device (the roofline terms point at them), so it is neither copied nor moved.
class RooflineMeter {
 public:
  /// `base`: the device preset whose element sizes (weights, K/V) the backend computes in; its
  /// peak_flops and mem_bw_bytes_s are replaced by the ceilings. `tensor_parallel`: GPUs sharing
  /// the step (ceilings are per GPU). `formats`: the weights' and K/V's storage as the backend
  /// reads them (a quantized strategy's Linears in their bytes, an FP8 cache's codes and scales).
  /// Throws std::invalid_argument on bad ceilings.
  RooflineMeter(const ModelConfig& model, const SimDevice& base, const RooflineCeilings& ceilings, int tensor_parallel,
                const StorageFormats& formats = {});
  RooflineMeter(const RooflineMeter&) = delete;
  RooflineMeter& operator=(const RooflineMeter&) = delete;

  /// The roofline of the step's useful work: padding rows (static batching) are left out, since
  /// computing them is part of the distance from the hardware, not of the work.
  StepRoofline price(const StepShape& shape) const;

 private:
  ModelConfig model_;
  SimDevice device_;
  RooflineTerms terms_;
};

/// The device preset a real backend computes like: "cpu-2core" (fp32 weights and K/V) for cpu; for
/// cuda the preset matching its device description (sim_hardware_for_device); nullopt for a GPU
/// no preset matches, and for the sim.
std::optional<SimDevice> roofline_base_device(BackendKind kind, const std::string& device_description);

/// Reads measured ceilings from a JSON file: {"copy_bytes_s", "gemm_flops"} at the top level or
/// under "ceilings" (as a `servelab profile` file may hold them). Throws std::runtime_error naming
/// the file and the field.
RooflineCeilings read_ceilings_file(const std::string& path);

/// What a sweep needs to record every real step's roofline. Resolves the ceilings once, at the
/// first backend it wraps: from `ceilings_file` when given, else (cpu) a probe of this machine,
/// else (cuda) the device preset's datasheet figures.
class RooflineRecorder {
 public:
  /// `threads`: the cpu backend's thread count (the probe uses as many).
  RooflineRecorder(BackendKind kind, std::string ceilings_file, int threads, int tensor_parallel);
  ~RooflineRecorder();

  /// `inner` wrapped so that every execute() leaves its step's roofline for take(), priced in
  /// `formats` (BackendFactory::formats: a strategy's weight and KV formats as its backend reads
  /// them). Returns `inner` unwrapped when there are no ceilings (note() says why).
  std::unique_ptr<Backend> wrap(std::unique_ptr<Backend> inner, const StorageFormats& formats = {});
  /// The roofline of the step executed since the last take(), if any (idle steps execute nothing).
  std::optional<StepRoofline> take();

  const std::optional<RooflineCeilings>& ceilings() const { return ceilings_; }
  /// Why there are no ceilings ("" when there are).
  const std::string& note() const { return note_; }

 private:
  BackendKind kind_;
  std::string ceilings_file_;
  int threads_ = 0;
  int tensor_parallel_ = 1;
  bool resolved_ = false;
  std::optional<RooflineCeilings> ceilings_;
  std::optional<SimDevice> base_;
  std::string note_;
  std::vector<std::pair<std::string, std::unique_ptr<RooflineMeter>>> meters_;  // one per storage format
  std::optional<StepRoofline> last_;
};

}  // namespace servelab
