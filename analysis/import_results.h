#pragma once
// Other benchmarking tools' result files read as servelab runs, so `servelab report --import`
// and `servelab compare` put a vLLM, GenAI-Perf, guidellm or LLMPerf run beside ours. Each
// format's keys are mapped onto RunMetrics (docs/importing-results.md has the table):
//   vLLM `bench serve --save-result` JSON: {mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms,
//       completed, failed, request_throughput, output_throughput, total_token_throughput,
//       request_rate, max_concurrency, duration
//   GenAI-Perf profile_export_genai_perf.json (and AIPerf's profile_export_aiperf.json):
//       {time_to_first_token, inter_token_latency, request_latency, request_throughput,
//        output_token_throughput, request_count}: {unit, avg, p50, ..., max}, input_config
//   guidellm benchmarks JSON: benchmarks[].metrics.{time_to_first_token_ms,
//       inter_token_latency_ms, request_latency, requests_per_second, output_tokens_per_second,
//       tokens_per_second}.successful.{mean, median, max, percentiles.pNN}, request_totals
//   LLMPerf *_summary.json: results_{ttft_s, inter_token_latency_s, end_to_end_latency_s}_{mean,
//       max, quantiles_pNN}, results_num_completed_requests, results_number_errors,
//       results_mean_output_throughput_token_per_s, num_concurrent_requests
// An imported run has no records: only the figures its tool reported (others are null), and its
// config says where it came from ("imported_from", "tool", "model").
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/summary.h"

namespace servelab::analysis {

enum class ForeignFormat { vllm_bench, genai_perf, guidellm, llmperf };

/// "vllm-bench", "genai-perf", "guidellm", "llmperf".
const char* to_string(ForeignFormat f);

/// Which tool wrote `j`, nullopt when none of the four (a servelab summary is none of them).
std::optional<ForeignFormat> detect_format(const nlohmann::ordered_json& j);

/// The runs of one foreign result document: one per benchmark it holds (guidellm: one per
/// strategy; the others: one). `source` names the file in configs and errors. Throws
/// std::invalid_argument when `j` is none of the formats or lacks every latency figure.
std::vector<RunSummary> import_runs(const nlohmann::ordered_json& j, const std::string& source);

/// Reads `path` and imports it. Throws std::runtime_error("path: message"): unreadable, not JSON,
/// or "not a result of vLLM bench serve, GenAI-Perf, guidellm or LLMPerf" naming the keys looked for.
std::vector<RunSummary> import_result_file(const std::string& path);

/// An imported run (its config carries "imported_from").
bool is_imported(const RunSummary& r);

/// A servelab summary.json (or a run folder holding one), else a foreign result file as a summary
/// of its imported runs (scenario name "imported", file = path). Throws std::runtime_error
/// ("path: message") for anything else.
Summary read_any_summary(const std::string& path);

}  // namespace servelab::analysis
