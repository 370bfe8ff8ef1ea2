#include "analysis/structured_stats.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>

#include "analysis/constraint_check.h"
#include "analysis/json_format.h"
#include "analysis/json_schema_check.h"
#include "analysis/percentiles.h"
#include "loadgen/records/constraint_entry.h"

namespace servelab::analysis {
namespace {

struct Samples {
  std::vector<double> ttft, tpot, tokens, decode;
  void add(const RequestRecord& r) {
    if (r.first_token_s >= 0) ttft.push_back((r.first_token_s - r.arrival_s) * 1000.0);
    tokens.push_back(r.output_tokens);
    const double last = r.token_times_s.empty() ? r.end_s : r.token_times_s.back();
    if (r.output_tokens > 1 && r.first_token_s >= 0 && last > r.first_token_s) {
      tpot.push_back((last - r.first_token_s) * 1000.0 / (r.output_tokens - 1));
      decode.push_back((r.output_tokens - 1) / (last - r.first_token_s));
    }
  }
  RequestGroupStats stats() const {
    RequestGroupStats g;
    g.n = tokens.size();
    if (!ttft.empty()) {
      const auto d = summarize(ttft);
      g.ttft_p50_ms = d.p50, g.ttft_p99_ms = d.p99;
    }
    if (!tpot.empty()) {
      const auto d = summarize(tpot);
      g.tpot_p50_ms = d.p50, g.tpot_p99_ms = d.p99;
      g.decode_tok_s_mean = summarize(decode).mean;
    }
    if (!tokens.empty()) g.output_tokens_mean = summarize(tokens).mean;
    return g;
  }
};

/// The entry's checker by kind (each independent of the grammar engine).
std::string check_structured_output(const std::string& text, const ConstraintEntry& e) {
  if (e.kind == "json_schema") return validate_json_text(text, e.value);
  if (e.kind == "regex") return check_regex_output(text, e.value.get<std::string>());
  if (e.kind == "grammar") return check_gbnf_output(text, e.value.get<std::string>());
  return check_choice_output(text, e.value.get<std::vector<std::string>>());
}

/// The first line of a validator's answer, without request-specific values after a colon kept
/// short: reasons group by what went wrong.
std::string reason_of(const std::string& why) {
  std::string r = why.substr(0, why.find('\n'));
  if (r.size() > 120) r = r.substr(0, 117) + "...";
  return r;
}

void group_to_json(nlohmann::ordered_json& j, const RequestGroupStats& g) {
  j = nlohmann::ordered_json::object();
  j["n"] = g.n;
  j["ttft_p50_ms"] = json_number(g.ttft_p50_ms);
  j["ttft_p99_ms"] = json_number(g.ttft_p99_ms);
  j["tpot_p50_ms"] = json_number(g.tpot_p50_ms);
  j["tpot_p99_ms"] = json_number(g.tpot_p99_ms);
  j["output_tokens_mean"] = json_number(g.output_tokens_mean);
  j["decode_tok_s_mean"] = json_number(g.decode_tok_s_mean);
}

RequestGroupStats group_from_json(const nlohmann::ordered_json& j) {
  RequestGroupStats g;
  if (!j.is_object()) return g;
  g.n = j.value("n", std::size_t{0});
  g.ttft_p50_ms = number_or_nan(j, "ttft_p50_ms");
  g.ttft_p99_ms = number_or_nan(j, "ttft_p99_ms");
  g.tpot_p50_ms = number_or_nan(j, "tpot_p50_ms");
  g.tpot_p99_ms = number_or_nan(j, "tpot_p99_ms");
  g.output_tokens_mean = number_or_nan(j, "output_tokens_mean");
  g.decode_tok_s_mean = number_or_nan(j, "decode_tok_s_mean");
  return g;
}

}  // namespace

std::optional<StructuredStats> structured_stats(const std::vector<std::string>& labels,
                                                const std::vector<RequestRecord>& records,
                                                const std::vector<std::string>& schemas) {
  StructuredStats s;
  Samples with, without;
  std::map<std::string, std::size_t> reasons;
  std::vector<std::optional<ConstraintEntry>> parsed(schemas.size());
  bool any = false;
  for (const auto& r : records) {
    if (r.warmup || std::find(labels.begin(), labels.end(), r.run) == labels.end()) continue;
    if (r.schema < 0) {
      if (r.status == RecordStatus::ok) without.add(r);
      continue;
    }
    any = true;
    if (r.status != RecordStatus::ok) {
      ++s.n_failed;
      continue;
    }
    ++s.n_constrained;
    with.add(r);
    std::string why;
    const auto k = static_cast<std::size_t>(r.schema);
    if (k >= schemas.size()) {
      why = "schema " + std::to_string(k) + " not in schemas.jsonl";
    } else {
      if (!parsed[k]) parsed[k] = parse_constraint_line(schemas[k]);
      why = check_structured_output(r.output_text, *parsed[k]);
    }
    if (why.empty()) ++s.n_valid;
    else ++reasons[reason_of(why)];
  }
  if (!any) return std::nullopt;
  if (s.n_constrained > 0) s.validity_rate = static_cast<double>(s.n_valid) / static_cast<double>(s.n_constrained);
  s.invalid_reasons.assign(reasons.begin(), reasons.end());
  std::stable_sort(s.invalid_reasons.begin(), s.invalid_reasons.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (s.invalid_reasons.size() > 5) s.invalid_reasons.resize(5);
  s.constrained = with.stats();
  s.unconstrained = without.stats();
  if (std::isfinite(s.constrained.tpot_p50_ms) && std::isfinite(s.unconstrained.tpot_p50_ms) &&
      s.unconstrained.tpot_p50_ms > 0)
    s.tpot_cost_pct = (s.constrained.tpot_p50_ms / s.unconstrained.tpot_p50_ms - 1.0) * 100.0;
  return s;
}

std::vector<std::string> read_schemas_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<std::string> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      parse_constraint_line(line);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": " + e.what());
    }
    out.push_back(line);
  }
  return out;
}

void to_json(nlohmann::ordered_json& j, const StructuredStats& s) {
  j = nlohmann::ordered_json::object();
  j["n_constrained"] = s.n_constrained;
  j["n_valid"] = s.n_valid;
  j["n_failed"] = s.n_failed;
  j["validity_rate"] = json_number(s.validity_rate);
  j["invalid_reasons"] = nlohmann::ordered_json::array();
  for (const auto& [reason, count] : s.invalid_reasons) j["invalid_reasons"].push_back({{"reason", reason}, {"count", count}});
  group_to_json(j["constrained"], s.constrained);
  group_to_json(j["unconstrained"], s.unconstrained);
  j["tpot_cost_pct"] = json_number(s.tpot_cost_pct);
}

void from_json(const nlohmann::ordered_json& j, StructuredStats& s) {
  if (!j.is_object()) throw std::invalid_argument("structured_output must be an object");
  s.n_constrained = j.value("n_constrained", std::size_t{0});
  s.n_valid = j.value("n_valid", std::size_t{0});
  s.n_failed = j.value("n_failed", std::size_t{0});
  s.validity_rate = number_or_nan(j, "validity_rate");
  s.invalid_reasons.clear();
  if (j.contains("invalid_reasons") && j["invalid_reasons"].is_array())
    for (const auto& e : j["invalid_reasons"])
      s.invalid_reasons.emplace_back(e.value("reason", std::string()), e.value("count", std::size_t{0}));
  s.constrained = group_from_json(j.value("constrained", nlohmann::ordered_json()));
  s.unconstrained = group_from_json(j.value("unconstrained", nlohmann::ordered_json()));
  s.tpot_cost_pct = number_or_nan(j, "tpot_cost_pct");
}

}  // namespace servelab::analysis
