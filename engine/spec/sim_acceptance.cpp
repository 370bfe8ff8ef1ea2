#include "engine/spec/sim_acceptance.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace servelab {

void SimAcceptance::validate() const {
  if (per_position.empty() || per_position.size() > 16)
    throw std::invalid_argument("sim_acceptance.per_position needs 1 to 16 entries (got " +
                                std::to_string(per_position.size()) + ")");
  for (size_t j = 0; j < per_position.size(); ++j)
    if (!std::isfinite(per_position[j]) || per_position[j] < 0.0 || per_position[j] > 1.0)
      throw std::invalid_argument("sim_acceptance.per_position[" + std::to_string(j) + "] must be in [0, 1] (got " +
                                  std::to_string(per_position[j]) + ")");
}

double SimAcceptance::at(int j) const {
  return j >= 0 && size_t(j) < per_position.size() ? per_position[size_t(j)] : 0.0;
}

double SimAcceptance::expected_accepted(int k) const {
  double sum = 0.0, run = 1.0;
  for (int j = 0; j < k; ++j) sum += (run *= at(j));
  return sum;
}

SimAcceptance SimAcceptance::from_counters(int64_t num_drafts, const std::vector<int64_t>& accepted,
                                           const std::vector<int64_t>& drafted) {
  if (num_drafts <= 0) throw std::invalid_argument("no drafts were verified (num_drafts " + std::to_string(num_drafts) + ")");
  if (accepted.empty()) throw std::invalid_argument("num_accepted_tokens_per_pos is empty");
  if (accepted.size() > 16)
    throw std::invalid_argument("num_accepted_tokens_per_pos has " + std::to_string(accepted.size()) +
                                " positions (at most 16)");
  SimAcceptance a;
  double before = 1.0;  // p0...p(j-1)
  for (size_t j = 0; j < accepted.size(); ++j) {
    const int64_t d = drafted.empty() ? num_drafts : (j < drafted.size() ? drafted[j] : 0);
    if (accepted[j] < 0 || accepted[j] > d)
      throw std::invalid_argument("position " + std::to_string(j) + " accepted " + std::to_string(accepted[j]) +
                                  " of " + std::to_string(d) + " drafts");
    const double upto = d > 0 ? static_cast<double>(accepted[j]) / static_cast<double>(d) : 0.0;  // p0...pj
    a.per_position.push_back(before > 0.0 ? std::clamp(upto / before, 0.0, 1.0) : 0.0);
    before = upto;
  }
  a.source = "counters";
  return a;
}

SimAcceptance SimAcceptance::from_summary(const std::string& path, const std::string& strategy) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the summary");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array())
    throw std::runtime_error(path + ": not a servelab summary.json (no \"runs\" list)");
  int64_t drafts = 0;
  std::vector<int64_t> accepted, drafted;
  bool drafted_everywhere = true;
  auto add = [](std::vector<int64_t>& sum, const nlohmann::json& v) {
    if (sum.size() < v.size()) sum.resize(v.size(), 0);
    for (size_t p = 0; p < v.size(); ++p) sum[p] += v[p].get<int64_t>();
  };
  try {
    for (const auto& r : j["runs"]) {
      if (!strategy.empty() && r.value("strategy", std::string()) != strategy) continue;
      const auto m = r.find("metrics");
      if (m == r.end() || !m->contains("spec_decode")) continue;
      const auto& sd = (*m)["spec_decode"];
      drafts += sd.value("num_drafts", int64_t{0});
      add(accepted, sd.value("num_accepted_tokens_per_pos", nlohmann::json::array()));
      if (sd.contains("num_draft_tokens_per_pos")) add(drafted, sd["num_draft_tokens_per_pos"]);
      else drafted_everywhere = false;
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": bad spec_decode counters (" + e.what() + ")");
  }
  if (drafts == 0)
    throw std::runtime_error(path + ": no run" + (strategy.empty() ? "" : " of strategy '" + strategy + "'") +
                             " verified any drafts (metrics.spec_decode)");
  try {
    SimAcceptance a = from_counters(drafts, accepted, drafted_everywhere ? drafted : std::vector<int64_t>{});
    a.source = path;
    return a;
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace servelab
