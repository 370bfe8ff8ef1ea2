#pragma once
// What a strategy's storage formats (`quantization:`, `kv_cache_dtype:`) cost in accuracy, measured
// by `servelab run` on the run's own backend before its first request (loadgen/format_accuracy.h):
// the model's unquantized weights and the strategy's formats run over the same teacher-forced
// token streams, their next-token logits compared position by position
// (engine/backend/quant_check.h). Reports show it beside the strategy's goodput and capacity.
//
// runs.json and summary.json, per run of a strategy whose formats are not the model's own:
//   "accuracy": {"weights", "kv_cache_dtype", "linear_bytes_per_weight", "reference", "positions",
//                "top1_agreement", "mean_kl", "max_kl", "max_logit_error", "rel_logit_error"}
// or, where it could not be measured (the sim has no weights; a quantized checkpoint has no
// unquantized reference): {"weights", "kv_cache_dtype", "linear_bytes_per_weight", "note"}.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace servelab::analysis {

struct FormatAccuracy {
  std::string weights;         ///< the Linears' format, "fp8 (per-tensor weight scales, ...)"; "none"
  std::string kv_cache_dtype;  ///< "auto" or "fp8"
  std::string reference;       ///< what was compared against, "bf16 weights and K/V on cuda"
  std::string note;            ///< why nothing was measured ("" when measured)
  int64_t positions = 0;       ///< compared positions (0 with a note)
  double top1_agreement = 0.0;   ///< share of positions whose argmax token is the reference's
  double mean_kl = 0.0;          ///< mean KL(P_ref ‖ P_format), nats
  double max_kl = 0.0;
  double max_logit_error = 0.0;  ///< max |logit − reference logit|
  double rel_logit_error = 0.0;  ///< ‖logits − reference‖ / ‖reference‖
  double linear_bytes_per_weight = 2.0;  ///< the format's bytes per decoder Linear weight (bf16 = 2)
  bool measured() const { return note.empty(); }
};

void to_json(nlohmann::ordered_json& j, const FormatAccuracy& a);
/// Throws std::invalid_argument naming the key when one is missing or malformed.
void from_json(const nlohmann::ordered_json& j, FormatAccuracy& a);

}  // namespace servelab::analysis
