#include "analysis/import_results.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "analysis/import_formats.h"

namespace servelab::analysis {

const char* to_string(ForeignFormat f) {
  switch (f) {
    case ForeignFormat::vllm_bench: return "vllm-bench";
    case ForeignFormat::genai_perf: return "genai-perf";
    case ForeignFormat::guidellm: return "guidellm";
    case ForeignFormat::llmperf: return "llmperf";
  }
  return "?";
}

std::optional<ForeignFormat> detect_format(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  if (j.contains("schema")) return std::nullopt;  // servelab's own files name their schema
  if (j.contains("benchmarks") && j["benchmarks"].is_array()) {
    for (const auto& b : j["benchmarks"])
      if (b.is_object() && b.contains("metrics") && b["metrics"].is_object() &&
          (b["metrics"].contains("time_to_first_token_ms") || b["metrics"].contains("request_latency")))
        return ForeignFormat::guidellm;
    return std::nullopt;
  }
  if (j.contains("mean_ttft_ms") || j.contains("median_e2el_ms") || (j.contains("completed") && j.contains("ttfts")))
    return ForeignFormat::vllm_bench;
  for (const char* k : {"results_ttft_s_mean", "results_end_to_end_latency_s_mean", "results_num_completed_requests"})
    if (j.contains(k)) return ForeignFormat::llmperf;
  for (const char* k : {"time_to_first_token", "request_latency", "inter_token_latency"})
    if (j.contains(k) && j[k].is_object() && (j[k].contains("avg") || j[k].contains("p50")))
      return ForeignFormat::genai_perf;
  return std::nullopt;
}

std::vector<RunSummary> import_runs(const nlohmann::ordered_json& j, const std::string& source) {
  const auto f = detect_format(j);
  if (!f)
    throw std::invalid_argument(
        "not a result of vLLM bench serve (mean_ttft_ms, completed), GenAI-Perf (time_to_first_token: "
        "{unit, avg}), guidellm (benchmarks[].metrics) or LLMPerf (results_ttft_s_mean), nor a servelab "
        "summary.json");
  std::vector<RunSummary> runs;
  switch (*f) {
    case ForeignFormat::vllm_bench: runs = {import_detail::from_vllm(j)}; break;
    case ForeignFormat::genai_perf: runs = {import_detail::from_genai_perf(j)}; break;
    case ForeignFormat::guidellm: runs = import_detail::from_guidellm(j); break;
    case ForeignFormat::llmperf: runs = {import_detail::from_llmperf(j)}; break;
  }
  for (auto& r : runs) {
    const auto& m = r.metrics;
    if (m.ttft_ms.empty() && m.tpot_ms.empty() && m.e2e_ms.empty())
      throw std::invalid_argument(std::string(to_string(*f)) + " result without any latency figure (TTFT, TPOT, E2E)");
    nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
    cfg["imported_from"] = source;
    cfg["tool"] = to_string(*f);
    for (const auto& [k, v] : r.info.config.items()) cfg[k] = v;
    r.info.config = std::move(cfg);
    r.info.validate();
  }
  return runs;
}

std::vector<RunSummary> import_result_file(const std::string& path) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
  const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(path + ": not JSON");
  try {
    return import_runs(j, path);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

bool is_imported(const RunSummary& r) { return r.info.config.is_object() && r.info.config.contains("imported_from"); }

Summary read_any_summary(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return read_summary_or_dir(path);
  const auto j = nlohmann::ordered_json::parse(read_text_file(path), nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("schema")) return read_summary(path);
  Summary s;
  s.scenario.name = "imported";
  s.scenario.file = path;
  s.runs = import_result_file(path);
  return s;
}

}  // namespace servelab::analysis
