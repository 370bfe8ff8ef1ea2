#pragma once
// Structured output in a report (workload.structured_output, loadgen/structured_output.h): of a
// run's constrained requests, how many outputs are valid against their schema (parsed and
// checked by json_schema_check.h, which shares no code with the grammar engine), and what the
// constraint cost: constrained and unconstrained requests' latencies side by side (fraction < 1
// puts both in one run; with fraction 1, compare against a run without structured_output).
// summary.json: runs[].structured_output, present only for runs with constrained requests:
//   {"n_constrained", "n_valid", "n_failed", "validity_rate", "invalid_reasons": [{reason, count}],
//    "constrained": {"n", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
//                    "output_tokens_mean", "decode_tok_s_mean"},
//    "unconstrained": {...the same...}, "tpot_cost_pct"}
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/records/record.h"

namespace servelab::analysis {

/// Latencies of one group of a run's ok measured requests (ms; NaN when the group is empty).
struct RequestGroupStats {
  std::size_t n = 0;
  double ttft_p50_ms = NAN, ttft_p99_ms = NAN;
  double tpot_p50_ms = NAN, tpot_p99_ms = NAN;
  double output_tokens_mean = NAN;
  /// Mean over requests of (output tokens − 1) / (last token − first token): each request's own
  /// decode speed, which a constraint's per-token mask slows.
  double decode_tok_s_mean = NAN;
};

struct StructuredStats {
  std::size_t n_constrained = 0;  ///< ok measured requests that carried a schema
  std::size_t n_valid = 0;        ///< of those, outputs valid against their schema
  std::size_t n_failed = 0;       ///< measured constrained requests that failed (not in the rate)
  double validity_rate = NAN;     ///< n_valid / n_constrained
  std::vector<std::pair<std::string, std::size_t>> invalid_reasons;  ///< most frequent first, at most 5
  RequestGroupStats constrained, unconstrained;
  /// (constrained TPOT p50 / unconstrained TPOT p50 − 1) × 100; NaN without both.
  double tpot_cost_pct = NAN;
};

/// The structured-output figures of the records labelled with any of `labels` (a run and its
/// repetitions), warm-up left out; nullopt when none carried a schema. `schemas` are the run
/// folder's schemas.jsonl texts (a record's "schema" indexes them); a record pointing past them
/// counts as invalid ("schema k not in schemas.jsonl").
std::optional<StructuredStats> structured_stats(const std::vector<std::string>& labels,
                                                const std::vector<RequestRecord>& records,
                                                const std::vector<std::string>& schemas);

/// Reads DIR/schemas.jsonl (one schema's JSON a line); throws std::runtime_error("path:line: ...").
std::vector<std::string> read_schemas_file(const std::string& path);

void to_json(nlohmann::ordered_json& j, const StructuredStats& s);
void from_json(const nlohmann::ordered_json& j, StructuredStats& s);

}  // namespace servelab::analysis
