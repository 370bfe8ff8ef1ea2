#include "engine/backend/profile_lora.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "engine/backend/hardware.h"
#include "engine/lora/lora_adapter.h"

namespace servelab {

namespace profile_lora_detail {  // named: a unity batch shares one translation unit

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// 1 and every count in `asked` up to b, ascending.
std::vector<int> adapter_counts(const std::vector<int>& asked, int b) {
  std::set<int> out = {1};
  for (int k : asked)
    if (k <= b) out.insert(k);
  return {out.begin(), out.end()};
}

ProfilePoint with_adapters(ProfilePhase phase, std::vector<ProfilePoint::Seq> seqs, int k) {
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].lora_slot = static_cast<int>(i % size_t(k));
  return ProfilePoint{phase, std::move(seqs)};
}

int distinct_slots(const ProfilePoint& p) {
  std::set<int> s;
  for (const ProfilePoint::Seq& q : p.seqs) s.insert(q.lora_slot);
  return static_cast<int>(s.size());
}

}  // namespace profile_lora_detail

using namespace profile_lora_detail;

std::vector<ProfilePoint> lora_profile_grid(const ProfileOptions& o) {
  std::vector<ProfilePoint> points;
  if (o.lora_rank <= 0) return points;
  using Seq = ProfilePoint::Seq;
  std::vector<int> batches = o.batch_sizes;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  // Every batch size on one adapter (what adapter rows add is not linear in them: on an H200 it
  // is about the same from 8 rows to 32, the sim interpolates it: sim_lora.h), at most kSpread of
  // them; the smallest, middle and largest with each adapter count too (the weights' read).
  constexpr size_t kSpread = 6;
  auto spread = [](std::vector<int> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    if (v.size() <= kSpread) return v;
    std::vector<int> out;
    for (size_t i = 0; i < kSpread; ++i) out.push_back(v[i * (v.size() - 1) / (kSpread - 1)]);
    return out;
  };
  std::vector<int> picks = {batches.front(), batches[batches.size() / 2], batches.back()};
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  const int c_mid = o.contexts[o.contexts.size() / 2];
  const int at = o.max_len > 0 ? std::max(0, std::min(c_mid, o.max_len - 1)) : c_mid;
  for (int b : spread(batches)) {
    const bool pick = std::find(picks.begin(), picks.end(), b) != picks.end();
    for (int k : pick ? adapter_counts(o.lora_adapters, b) : std::vector<int>{1})
      points.push_back(with_adapters(ProfilePhase::decode, std::vector<Seq>(size_t(b), Seq{at, 1}), k));
  }
  // One prompt of each length: a serving run's prefill steps.
  for (int len : spread(o.prefill_lens)) points.push_back(with_adapters(ProfilePhase::prefill, {Seq{0, len}}, 1));
  // A batched prefill: the per-adapter part of a prefill step against its per-row part.
  int b_prefill = 0;
  for (int b : {batches[batches.size() / 2], batches.back()})
    if (b >= 2 && int64_t(b) * o.prompt_lens.front() <= o.max_rows) {
      b_prefill = b;
      break;
    }
  if (b_prefill > 0)
    for (int k : adapter_counts(o.lora_adapters, b_prefill))
      points.push_back(with_adapters(ProfilePhase::prefill, std::vector<Seq>(size_t(b_prefill), Seq{0, o.prompt_lens.front()}), k));
  return points;
}

LoraProfile profile_lora(Backend& backend, ProfileRunner& runner, const ProfileOptions& o, const ProfilePlan& plan,
                         const std::function<void(const std::string&)>& progress) {
  if (!backend.caps().lora)
    throw std::invalid_argument("--lora-rank: backend " + backend.name() + " (" + backend.device_description() +
                                ") does not run LoRA adapters");
  const ModelConfig& model = backend.config();
  std::vector<ProfilePoint> points;
  for (ProfilePoint& p : lora_profile_grid(o)) {
    if (p.n_slots() <= plan.n_slots && p.max_len() <= plan.max_len) points.push_back(std::move(p));
    else if (progress) progress("LoRA point skipped (over the KV budget): " + p.describe());
  }
  if (points.empty()) throw std::invalid_argument("--lora-rank: no LoRA point fits the profile's KV arena");
  int slots = 1;
  for (const ProfilePoint& p : points) slots = std::max(slots, distinct_slots(p));
  const std::vector<LoraTarget> all = {LoraTarget::q,    LoraTarget::k,  LoraTarget::v,   LoraTarget::o,
                                       LoraTarget::gate, LoraTarget::up, LoraTarget::down};
  LoraProfile out;
  out.rank = o.lora_rank;
  backend.reserve_loras(slots, o.lora_rank);
  for (int s = 0; s < slots; ++s) {
    auto adapter = std::make_shared<LoraAdapter>(random_lora(model, "profile-lora-" + std::to_string(s), o.lora_rank,
                                                             2.0f * float(o.lora_rank), all, o.seed + 7919u * uint64_t(s + 1)));
    adapter->id = uint64_t(0x70726f66) << 16 | uint64_t(s + 1);  // unique in the process, as a registry's
    out.params = lora_params(model, adapter.get());
    backend.load_lora(s, std::move(adapter));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const ProfilePoint& p = points[i];
    ProfilePoint base = p;
    for (ProfilePoint::Seq& q : base.seqs) q.lora_slot = -1;
    auto time = [&](const ProfilePoint& q) { return runner.run(q, 0, 1, 0.0).times_s.front(); };
    for (int w = 0; w < std::max(1, o.warmup); ++w) {  // adapters' first use (kernels, weights' first touch)
      time(base);
      time(p);
    }
    std::vector<double> base_s, lora_s;
    for (int r = 0; r < o.repeats; ++r) {  // in turn, each first every other pair: drift cancels
      if (r % 2 == 0) base_s.push_back(time(base));
      lora_s.push_back(time(p));
      if (r % 2 == 1) base_s.push_back(time(base));
    }
    LoraProfilePoint lp;
    lp.prefill = p.phase == ProfilePhase::prefill;
    lp.n_seqs = static_cast<int>(p.seqs.size());
    for (const ProfilePoint::Seq& q : p.seqs) lp.rows += q.n_new;
    lp.adapters = distinct_slots(p);
    lp.context = p.seqs.front().context;
    lp.base_s = median_of(base_s);
    lp.lora_s = median_of(lora_s);
    out.points.push_back(lp);
    if (progress) {
      char line[200];
      std::snprintf(line, sizeof line, "[LoRA %zu/%zu] %-7s seqs %4d rows %5lld adapters %3d: %10.3f ms base, %10.3f ms with adapters",
                    i + 1, points.size(), lp.prefill ? "prefill" : "decode", lp.n_seqs, static_cast<long long>(lp.rows),
                    lp.adapters, lp.base_s * 1e3, lp.lora_s * 1e3);
      progress(line);
    }
  }
  for (int s = 0; s < slots; ++s) backend.load_lora(s, nullptr);
  return out;
}

namespace profile_lora_detail {

/// The preset `hardware` names, or none (empty or unknown: the fit is left out of the report).
std::optional<SimDevice> preset_or_none(const std::string& hardware) {
  if (hardware.empty()) return std::nullopt;
  try {
    return SimDevice::preset(hardware);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace profile_lora_detail

nlohmann::ordered_json lora_profile_json(const LoraProfile& lora, const ModelConfig& model, const std::string& hardware) {
  nlohmann::ordered_json j;
  j["rank"] = lora.rank;
  j["params"] = lora.params;
  nlohmann::ordered_json pts = nlohmann::ordered_json::array();
  for (const LoraProfilePoint& p : lora.points)
    pts.push_back({{"phase", p.prefill ? "prefill" : "decode"},
                   {"n_seqs", p.n_seqs},
                   {"rows", p.rows},
                   {"adapters", p.adapters},
                   {"context", p.context},
                   {"base_s", p.base_s},
                   {"lora_s", p.lora_s}});
  j["points"] = std::move(pts);
  if (const std::optional<SimDevice> d = preset_or_none(hardware); d && !lora.points.empty()) {
    const SimDevice f = fit_lora(*d, model, lora);
    nlohmann::ordered_json knots = nlohmann::ordered_json::array();
    for (int i = 0; i < f.lora_decode_knots; ++i)
      knots.push_back({{"rows", f.lora_decode_knot_rows[size_t(i)]}, {"layer_s", f.lora_decode_knot_s[size_t(i)]}});
    j["fit"] = {{"decode_knots", std::move(knots)},         {"decode_row_s", f.lora_decode_row_s},
                {"prefill_layer_s", f.lora_prefill_layer_s}, {"prefill_run_s", f.lora_prefill_run_s},
                {"prefill_row_s", f.lora_prefill_row_s},     {"bandwidth_share", f.lora_bandwidth_share}};
  }
  return j;
}

LoraProfile lora_profile_from_json(const nlohmann::json& j) {
  auto fail = [](const std::string& where, const std::string& why) -> void {
    throw std::runtime_error("\"lora\"" + where + ": " + why);
  };
  if (!j.is_object()) fail("", "must be an object");
  LoraProfile out;
  if (!j.contains("rank") || !j["rank"].is_number_integer()) fail(".rank", "needs an integer");
  if (!j.contains("params") || !j["params"].is_number_integer()) fail(".params", "needs an integer");
  out.rank = j["rank"].get<int>();
  out.params = j["params"].get<int64_t>();
  if (out.rank < 1 || out.params < 1) fail("", "rank and params must be >= 1");
  if (!j.contains("points") || !j["points"].is_array() || j["points"].empty()) fail(".points", "needs a non-empty array");
  for (size_t i = 0; i < j["points"].size(); ++i) {
    const nlohmann::json& p = j["points"][i];
    const std::string at = ".points[" + std::to_string(i) + "]";
    if (!p.is_object()) fail(at, "must be an object");
    for (const char* key : {"n_seqs", "rows", "adapters", "context"})
      if (!p.contains(key) || !p[key].is_number_integer()) fail(at + "." + key, "needs an integer");
    for (const char* key : {"base_s", "lora_s"})
      if (!p.contains(key) || !p[key].is_number()) fail(at + "." + key, "needs a number of seconds");
    const std::string phase = p.value("phase", std::string());
    if (phase != "decode" && phase != "prefill") fail(at + ".phase", "must be \"decode\" or \"prefill\" (got \"" + phase + "\")");
    LoraProfilePoint lp;
    lp.prefill = phase == "prefill";
    lp.n_seqs = p["n_seqs"].get<int>();
    lp.rows = p["rows"].get<int64_t>();
    lp.adapters = p["adapters"].get<int>();
    lp.context = p["context"].get<int>();
    lp.base_s = p["base_s"].get<double>();
    lp.lora_s = p["lora_s"].get<double>();
    out.points.push_back(lp);
  }
  return out;
}

std::string lora_profile_table(const LoraProfile& lora, const ModelConfig& model, const std::string& hardware) {
  std::ostringstream out;
  char line[200];
  std::snprintf(line, sizeof line, "LoRA, rank %d on all seven linears (%.2fM parameters an adapter):\n", lora.rank,
                double(lora.params) / 1e6);
  out << line;
  std::snprintf(line, sizeof line, "%-8s %6s %6s %8s %12s %12s %10s\n", "phase", "seqs", "rows", "adapters", "base_ms",
                "lora_ms", "base/lora");
  out << line;
  for (const LoraProfilePoint& p : lora.points) {
    std::snprintf(line, sizeof line, "%-8s %6d %6lld %8d %12.3f %12.3f %10.3f\n", p.prefill ? "prefill" : "decode",
                  p.n_seqs, static_cast<long long>(p.rows), p.adapters, p.base_s * 1e3, p.lora_s * 1e3, p.base_s / p.lora_s);
    out << line;
  }
  if (const std::optional<SimDevice> d = preset_or_none(hardware); d && !lora.points.empty()) {
    const SimDevice f = fit_lora(*d, model, lora);
    out << "sim's LoRA fit, per layer: decode";
    for (int i = 0; i < f.lora_decode_knots; ++i) {
      std::snprintf(line, sizeof line, "%s %.0f rows %.2f us", i ? "," : "", f.lora_decode_knot_rows[size_t(i)],
                    f.lora_decode_knot_s[size_t(i)] * 1e6);
      out << line;
    }
    std::snprintf(line, sizeof line,
                  " (then %.3f us a row); prefill %.2f us a step + %.2f us a run of one adapter after the first + "
                  "%.4f us a row; weights read at %.2f of %s's bandwidth\n",
                  f.lora_decode_row_s * 1e6, f.lora_prefill_layer_s * 1e6, f.lora_prefill_run_s * 1e6,
                  f.lora_prefill_row_s * 1e6, f.lora_bandwidth_share, hardware.c_str());
    out << line;
  }
  return out.str();
}

}  // namespace servelab
