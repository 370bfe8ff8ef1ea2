#include "engine/spec/sim_acceptance.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/spec/adaptive.h"
#include "engine/splitmix64.h"

namespace servelab {

void SimAcceptance::validate() const {
  if (per_position.empty() || per_position.size() > 16)
    throw std::invalid_argument("sim_acceptance.per_position needs 1 to 16 entries (got " +
                                std::to_string(per_position.size()) + ")");
  for (size_t j = 0; j < per_position.size(); ++j)
    if (!std::isfinite(per_position[j]) || per_position[j] < 0.0 || per_position[j] > 1.0)
      throw std::invalid_argument("sim_acceptance.per_position[" + std::to_string(j) + "] must be in [0, 1] (got " +
                                  std::to_string(per_position[j]) + ")");
  for (size_t r = 0; r < request_scale.size(); ++r)
    if (!std::isfinite(request_scale[r]) || request_scale[r] < 0.0)
      throw std::invalid_argument("sim_acceptance.request_scale[" + std::to_string(r) + "] must be finite and >= 0 (got " +
                                  std::to_string(request_scale[r]) + ")");
}

double SimAcceptance::at(int j) const {
  return j >= 0 && size_t(j) < per_position.size() ? per_position[size_t(j)] : 0.0;
}

double SimAcceptance::at(int j, double s) const {
  return std::clamp(1.0 - s * (1.0 - at(j)), 0.0, 1.0);
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

namespace {

/// Rejections over those expected at rejection rates `q` (ŝ = O / E); 0 / 0 reads as no evidence.
struct Ratio {
  double observed = 0.0, expected = 0.0;
  double value() const { return expected > 0.0 ? observed / expected : 1.0; }
};

double variance(const std::vector<double>& x) {
  if (x.size() < 2) return 0.0;
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double ss = 0.0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return ss / static_cast<double>(x.size() - 1);
}

/// One request of n_output tokens at conditional acceptance 1 - q[j]: what a real run's request
/// would have verified had every request been alike (the engine's loop: k capped by the room left
/// less the bonus token, next_num_drafts after each verification).
Ratio replay(const std::vector<double>& q, int n_output, int k_max, bool adaptive, uint64_t& state) {
  Ratio r;
  int generated = 1, k = k_max;  // the prefill's token
  while (generated < n_output) {
    const int n = std::min(k, n_output - generated - 1);
    if (n < 1) {
      ++generated;
      continue;
    }
    int a = 0;
    for (; a < n; ++a) {
      r.expected += q[size_t(a)];
      const double u = static_cast<double>(splitmix64_next(state) >> 11) * 0x1.0p-53;
      if (u < q[size_t(a)]) break;
    }
    if (a < n) r.observed += 1.0;
    generated += a + 1;
    if (adaptive) k = next_num_drafts(k, n, a, k_max);
  }
  return r;
}

}  // namespace

SimAcceptance::Spread SimAcceptance::request_spread(const std::vector<RequestCounts>& requests, int k_max,
                                                    bool adaptive, int replays, uint64_t seed) {
  if (k_max < 1 || k_max > 16) throw std::invalid_argument("request_spread: k_max must be in [1, 16] (got " + std::to_string(k_max) + ")");
  if (replays < 2) throw std::invalid_argument("request_spread: replays must be >= 2");
  std::vector<double> tried(size_t(k_max), 0.0), kept(size_t(k_max), 0.0);
  for (const RequestCounts& r : requests)
    for (size_t j = 0; j < size_t(k_max); ++j) {
      tried[j] += j < r.tried.size() ? static_cast<double>(r.tried[j]) : 0.0;
      kept[j] += j < r.accepted.size() ? static_cast<double>(r.accepted[j]) : 0.0;
    }
  std::vector<double> q(size_t(k_max), 1.0);  // pooled rejection rates; 1 where nothing was tried
  for (size_t j = 0; j < q.size(); ++j) q[j] = tried[j] > 0.0 ? 1.0 - kept[j] / tried[j] : 1.0;
  Spread out;
  out.scale.assign(requests.size(), 1.0);
  std::vector<double> measured;  // ŝ of the requests with evidence
  std::vector<size_t> which;
  double noise = 0.0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestCounts& r = requests[i];
    Ratio s;
    for (size_t j = 0; j < std::min(r.tried.size(), q.size()); ++j) {
      s.observed += static_cast<double>(r.tried[j] - (j < r.accepted.size() ? r.accepted[j] : 0));
      s.expected += static_cast<double>(r.tried[j]) * q[j];
    }
    if (s.expected <= 0.0) continue;
    measured.push_back(s.value());
    which.push_back(i);
    std::vector<double> again;
    uint64_t state = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
    for (int k = 0; k < replays; ++k) again.push_back(replay(q, r.n_output, k_max, adaptive, state).value());
    noise += variance(again);
  }
  if (measured.size() < 2) return out;
  out.noise_var = noise / static_cast<double>(measured.size());
  out.observed_var = variance(measured);
  const double spread = out.observed_var - out.noise_var;
  if (!(spread > 0.0)) return out;
  const double shrink = std::sqrt(spread / out.observed_var);
  double mean = 0.0;
  for (double v : measured) mean += v;
  mean /= static_cast<double>(measured.size());
  double sum = 0.0;
  for (size_t m = 0; m < measured.size(); ++m) sum += out.scale[which[m]] = std::max(0.0, 1.0 + shrink * (measured[m] - mean));
  // Rescaled to mean 1 over every request (those without evidence stay at their share).
  const double total = sum + static_cast<double>(requests.size() - measured.size());
  for (double& v : out.scale) v *= static_cast<double>(requests.size()) / total;
  return out;
}

std::vector<SimAcceptance::RequestCounts> SimAcceptance::read_requests(const std::string& path, int& k_max) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the requests file");
  std::vector<RequestCounts> out;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object() || !j.contains("requests") || !j["requests"].is_array() || !j.contains("k_max"))
      throw std::runtime_error("not a requests file (request_acceptance.py: \"k_max\" and a \"requests\" list)");
    k_max = j["k_max"].get<int>();
    if (k_max < 1 || k_max > 16) throw std::runtime_error("k_max must be in [1, 16] (got " + std::to_string(k_max) + ")");
    for (size_t i = 0; i < j["requests"].size(); ++i) {
      const auto& r = j["requests"][i];
      RequestCounts c;
      c.tried = r.at("tried_per_pos").get<std::vector<int64_t>>();
      c.accepted = r.at("accepted_per_pos").get<std::vector<int64_t>>();
      c.n_output = r.at("output_tokens").get<int>();
      const std::string at = "requests[" + std::to_string(i) + "]";
      if (c.tried.size() != size_t(k_max) || c.accepted.size() != size_t(k_max))
        throw std::runtime_error(at + " needs k_max (" + std::to_string(k_max) + ") counts a position");
      for (size_t p = 0; p < c.tried.size(); ++p)
        if (c.accepted[p] < 0 || c.accepted[p] > c.tried[p])
          throw std::runtime_error(at + ": position " + std::to_string(p) + " accepted " + std::to_string(c.accepted[p]) +
                                   " of " + std::to_string(c.tried[p]) + " tried");
      if (c.n_output < 1) throw std::runtime_error(at + ".output_tokens must be >= 1");
      out.push_back(std::move(c));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": bad requests file (" + e.what() + ")");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  if (out.size() < 2) throw std::runtime_error(path + ": needs at least 2 requests (got " + std::to_string(out.size()) + ")");
  return out;
}

void SimAcceptance::add_request_spread(const std::string& path, bool adaptive) {
  int k_max = 0;
  const std::vector<RequestCounts> requests = read_requests(path, k_max);
  request_scale = request_spread(requests, k_max, adaptive).scale;
}

}  // namespace servelab
