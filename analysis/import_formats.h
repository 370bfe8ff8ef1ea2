#pragma once
// The four mappers behind import_results.h (not part of the public API): each reads one tool's
// documented keys into a RunSummary (label "<tool>@<rate>", "@c<N>" or "@max", backend "http").
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/summary.h"

namespace servelab::analysis::import_detail {

RunSummary from_vllm(const nlohmann::ordered_json& j);
RunSummary from_genai_perf(const nlohmann::ordered_json& j);
std::vector<RunSummary> from_guidellm(const nlohmann::ordered_json& j);
RunSummary from_llmperf(const nlohmann::ordered_json& j);

}  // namespace servelab::analysis::import_detail
