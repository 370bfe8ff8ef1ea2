#pragma once
// What a real run records about its distance from the hardware: each step's roofline (the time its
// FLOPs and bytes need at the device's ceilings, loadgen/roofline_meter.h) and the ceilings used.
// Plain data with JSON, so the analysis layer reads them without the engine.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace servelab {

/// Which work a step did, by its chunks: only prompt chunks (and multi-token catch-ups or
/// speculative verifications: anything of more than one new token), only one-token decodes, or both.
enum class StepClass { prefill, decode, mixed };
const char* to_string(StepClass c);
/// "prefill" | "decode" | "mixed"; throws std::invalid_argument listing the names.
StepClass parse_step_class(const std::string& s);

/// What the cost model needs of a step beyond the step record's own fields (batch_size, n_tokens,
/// n_padding_tokens, max_context): its sequences, draws and attention work (engine/backend/
/// cost_model.h's StepShape). With it `servelab price-steps` prices any real run's steps.
struct StepShapeRecord {
  int64_t n_seqs = 0;
  int64_t n_sampled = 0;
  int64_t sum_context = 0;
  double prefill_pairs = 0.0;
  double decode_context = 0.0;
  int64_t verify_rows = 0;
  double verify_pairs = 0.0;
};

/// One step's roofline. JSON (in steps.jsonl, key "roofline"): {"class", "s", "flops", "bytes",
/// "shape": {"n_seqs", "n_sampled", "sum_context", "prefill_pairs", "decode_context",
/// "verify_rows", "verify_pairs"}} ("shape" absent in files written before 2026-11-30).
struct StepRoofline {
  StepClass step_class = StepClass::decode;
  double seconds = 0.0;  ///< max(flops / peak, bytes / bandwidth): the step at the ceilings
  double flops = 0.0;
  double bytes = 0.0;
  std::optional<StepShapeRecord> shape;
  /// Throws std::invalid_argument naming the field: seconds, flops and bytes finite and >= 0.
  void validate() const;
};

/// Where a run's ceilings came from.
enum class CeilingSource {
  profile,  ///< measured earlier, read from a file (`backend.ceilings`)
  probe,    ///< measured at the start of the run (cpu: a copy and a GEMM, engine/backend/ceiling_probe.h)
  table,    ///< a device preset's datasheet figures (SimDevice::preset)
};
const char* to_string(CeilingSource s);
CeilingSource parse_ceiling_source(const std::string& s);  ///< throws std::invalid_argument listing the names

/// The device's ceilings a run's rooflines were priced at. JSON: {"copy_bytes_s", "gemm_flops",
/// "source", "detail"}.
struct RooflineCeilings {
  double copy_bytes_s = 0.0;  ///< memory bandwidth: a large copy's (read + write) bytes per second
  double gemm_flops = 0.0;    ///< a large GEMM's FLOP/s at the backend's compute dtype
  CeilingSource source = CeilingSource::table;
  std::string detail;         ///< the file, the probe's sizes, or the preset's name
  /// Throws std::invalid_argument naming the field: both ceilings finite and > 0.
  void validate() const;
};

void to_json(nlohmann::json& j, const StepRoofline& r);
void from_json(const nlohmann::json& j, StepRoofline& r);
void to_json(nlohmann::json& j, const RooflineCeilings& c);
void from_json(const nlohmann::json& j, RooflineCeilings& c);
void to_json(nlohmann::ordered_json& j, const RooflineCeilings& c);
void from_json(const nlohmann::ordered_json& j, RooflineCeilings& c);

}  // namespace servelab
