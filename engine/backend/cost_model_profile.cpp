// SimCostModel::from_profile_json: reads a `servelab profile --json` file (servelab.profile/1 and
// /2, with the optional verification points and the draft model's own profile) into a cost model.
#include "engine/backend/cost_model.h"
#include "engine/backend/profile_lora.h"
#include "engine/backend/sim_sustained.h"
#include "engine/backend/step_shape_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace servelab {

namespace {

std::string canonical_device(const std::string& name) { return name == "h100-sxm" ? "h100" : name; }

/// A sample of a servelab.profile/1 file (phase, batch_size, n_tokens, sum_context, n_sampled):
/// every sequence of a step had the same length, so the attention features follow.
StepShape shape_from_v1(const std::string& phase, int64_t batch, int64_t n_tokens, int64_t sum_context,
                        int64_t n_sampled) {
  StepShape s;
  s.n_tokens = n_tokens;
  s.n_sampled = n_sampled;
  s.n_seqs = batch;
  s.sum_context = sum_context;
  s.max_context = batch > 0 ? sum_context / batch : sum_context;
  if (phase == "decode") {
    s.decode_context = static_cast<double>(sum_context);
    s.attention_pairs = s.decode_context;
  } else {
    const double t = batch > 0 ? double(n_tokens) / batch : double(n_tokens);
    const double begin = s.max_context - t;
    s.prefill_pairs = batch * (t * begin + 0.5 * t * (t + 1.0));
    s.attention_pairs = s.prefill_pairs;
  }
  return s;
}

/// The step samples of a profile's "samples" list (`prefix` names where the list sits in the
/// file, for errors). Throws std::runtime_error naming the file and the sample.
std::vector<TimedStep> read_profile_samples(const std::string& path, const std::string& prefix, const nlohmann::json& list);
/// ProfiledStepModel::fit with its errors naming the file.
ProfiledStepModel fit_profile_steps(const std::string& path, const std::string& prefix, const std::vector<TimedStep>& steps,
                                    const std::vector<int>& graph_buckets = {});
/// The draft's timed proposer rounds ("draft"."rounds"). Throws std::runtime_error naming the entry.
std::vector<DraftRound> read_draft_rounds(const std::string& path, const nlohmann::json& list);

}  // namespace

double retarget_step_seconds(double measured_s, double from_bound_s, double to_bound_s, double fixed_s) {
  if (!(from_bound_s > 0.0) || !(to_bound_s > 0.0)) return measured_s;
  const double fixed = std::clamp(fixed_s, 0.0, measured_s);
  return fixed + (measured_s - fixed) * (to_bound_s / from_bound_s);
}

SimCostModel SimCostModel::from_profile_json(const std::string& path, const ModelConfig& model,
                                             const std::optional<SimDevice>& device, int tensor_parallel,
                                             bool retarget) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the profile");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("samples") || !j["samples"].is_array())
    throw std::runtime_error(path + ": expected a servelab profile (an object with \"samples\"; write one with "
                                    "`servelab profile --json FILE`)");
  // The model: same shapes, or the profile says nothing about this model's steps.
  const nlohmann::json jm = j.value("model", nlohmann::json::object());
  ModelConfig pm;
  pm.name = jm.value("name", std::string("?"));
  pm.hidden_size = jm.value("hidden_size", 0);
  pm.n_layers = jm.value("n_layers", 0);
  pm.n_heads = jm.value("n_heads", 0);
  pm.n_kv_heads = jm.value("n_kv_heads", 0);
  pm.intermediate_size = jm.value("intermediate_size", 0);
  pm.vocab_size = jm.value("vocab_size", 0);
  if (pm.n_heads > 0 && jm.value("head_dim", pm.head_dim()) != pm.head_dim())
    throw std::runtime_error(path + ": model.head_dim does not match hidden_size / n_heads");
  const std::string want = model_shape_hash(model), got = pm.n_heads > 0 ? model_shape_hash(pm) : "none";
  if (want != got)
    throw std::runtime_error(path + ": profile was measured on model " + pm.name + " (shape " + got +
                             ") but this run simulates " + model.name + " (shape " + want +
                             "); a profile is only valid for the model shape it timed: run `servelab profile` on " +
                             model.name);
  // The device: the roofline beyond the grid must be the profiled device's.
  const std::string backend = j.value("backend", std::string("cpu"));
  const std::string hardware = canonical_device(j.value("hardware", backend == "cpu" ? std::string("cpu-2core") : std::string("")));
  const std::string measured_on = j.value("device", hardware);
  const bool other_device = device && canonical_device(device->name) != hardware;
  if (other_device && (!retarget || hardware.empty()))
    throw std::runtime_error(path + ": profile was measured on " + (hardware.empty() ? "an unnamed device" : hardware) +
                             " (" + measured_on + ") but the sim device is " + device->name +
                             "; profile that device, leave backend.sim_device unset to use the profile's, or retarget it "
                             "(backend.sim_retarget: true; price-steps --retarget) to scale it to " + device->name +
                             " by the two devices' rooflines");
  const int profile_tp = j.value("tensor_parallel", 1);
  if (profile_tp != tensor_parallel)
    throw std::runtime_error(path + ": profile was measured at tensor_parallel " + std::to_string(profile_tp) +
                             " but this run uses " + std::to_string(tensor_parallel));

  SimCostModel m;
  m.kind = Kind::profile;
  try {
    m.device = device ? *device : SimDevice::preset(hardware);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": \"hardware\": " + e.what());
  }
  if (j.contains("kv_dtype_bytes") && j["kv_dtype_bytes"].is_number_integer())
    m.device.kv_dtype_bytes = j["kv_dtype_bytes"].get<int>();
  try {
    m.device.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  m.tensor_parallel = tensor_parallel;
  if (tensor_parallel > 1 && j.contains("all_reduce") && j["all_reduce"].is_array()) {
    std::vector<std::pair<double, double>> points;
    for (const auto& p : j["all_reduce"])
      if (p.is_object() && p.contains("bytes") && p.contains("seconds") && p["bytes"].is_number() && p["seconds"].is_number())
        points.push_back({p["bytes"].get<double>(), p["seconds"].get<double>()});
    try {
      m.device = fit_allreduce(m.device, tensor_parallel, points);
      m.allreduce_measured = true;
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path + ": \"all_reduce\": " + e.what());
    }
  }

  m.kv_layout = "paged";
  if (j.contains("options") && j["options"].is_object() && j["options"].contains("kv")) {
    const nlohmann::json& kv = j["options"]["kv"];
    if (!kv.is_string() || (kv != "paged" && kv != "naive"))
      throw std::runtime_error(path + ": options.kv must be \"paged\" or \"naive\"");
    m.kv_layout = kv.get<std::string>();
  }
  if (j.contains("host_overhead")) {
    const nlohmann::json& h = j["host_overhead"];
    auto coefficient = [&](const char* key) {
      if (!h.is_object() || !h.contains(key) || !h[key].is_number())
        throw std::runtime_error(path + ": \"host_overhead\" needs numbers per_step_s and per_seq_s");
      const double v = h[key].get<double>();
      if (!std::isfinite(v) || v < 0 || v > 1.0)
        throw std::runtime_error(path + ": host_overhead." + key + " must be in [0, 1] seconds (got " +
                                 std::to_string(v) + ")");
      return v;
    };
    m.host.per_step_s = coefficient("per_step_s");
    m.host.per_seq_s = coefficient("per_seq_s");
  }

  // LoRA points (`servelab profile --lora-rank`): the sim's LoRA figures fitted to this device's
  // own steps. Retargeted, the target preset's figures stay (the points ran on another device).
  if (j.contains("lora") && !other_device) {
    try {
      m.device = fit_lora(m.device, model, lora_profile_from_json(j["lora"]));
      m.lora_measured = true;
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
  }

  // The sustained-load probe: how this device slows under back-to-back work (sim_sustained.h).
  // Retargeted, none: another GPU's power cap and clocks are its own.
  if (j.contains("sustained") && !other_device) {
    try {
      m.sustained = std::make_shared<const SustainedLoad>(sustained_from_json(j["sustained"]));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
  }

  std::vector<int> buckets;  // how the profiled backend ran its decodes (CUDA graphs), if it padded them
  if (j.contains("decode_row_buckets")) {
    const nlohmann::json& b = j["decode_row_buckets"];
    for (size_t i = 0; b.is_array() && i < b.size(); ++i) {
      if (!b[i].is_number_integer() || b[i].get<int64_t>() < 1 || b[i].get<int64_t>() > (1 << 20) ||
          (i > 0 && b[i].get<int64_t>() <= b[i - 1].get<int64_t>()))
        throw std::runtime_error(path + ": decode_row_buckets[" + std::to_string(i) + "] must be an integer in [1, 2^20] above the one before");
      buckets.push_back(b[i].get<int>());
    }
    if (!b.is_array()) throw std::runtime_error(path + ": decode_row_buckets must be an array of batch sizes");
  }
  if (other_device) {  // retarget: every sample's time beyond the fixed per-step part, by the two bounds
    SimDevice source;
    try {
      source = SimDevice::preset(hardware);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path + ": \"hardware\": " + e.what());
    }
    source.kv_dtype_bytes = m.device.kv_dtype_bytes;
    if (j.contains("draft"))
      throw std::runtime_error(path + ": a profile with a draft model cannot be retargeted to another device");
    const RooflineTerms from = RooflineTerms::of(model, source, tensor_parallel);
    const RooflineTerms to = RooflineTerms::of(model, m.device, tensor_parallel);
    // The part of a step no bound explains (launches, small kernels, syncs: the same on either
    // device): the profile's smallest excess over its own roofline bound, a batch-1 decode's.
    std::vector<TimedStep> steps = read_profile_samples(path, "", j["samples"]);
    double fixed = std::numeric_limits<double>::infinity();
    for (const TimedStep& t : steps) fixed = std::min(fixed, std::max(0.0, t.step_s - roofline_bound(from, t.shape).seconds()));
    if (!std::isfinite(fixed)) fixed = 0.0;
    for (TimedStep& t : steps)
      t.step_s = retarget_step_seconds(t.step_s, roofline_bound(from, t.shape).seconds(), roofline_bound(to, t.shape).seconds(), fixed);
    m.profiled = fit_profile_steps(path, "", steps, buckets);
    char kept[64];
    std::snprintf(kept, sizeof kept, "%.3f ms a step kept", 1e3 * fixed);
    m.source = path + " (measured on " + hardware + ", retargeted to " + m.device.name + ", " + kept + ")";
    return m;
  }
  m.profiled = fit_profile_steps(path, "", read_profile_samples(path, "", j["samples"]), buckets);
  if (j.contains("draft")) {  // a draft model profiled beside the target (`servelab profile --draft-layers`)
    const nlohmann::json& d = j["draft"];
    const nlohmann::json dm = d.is_object() ? d.value("model", nlohmann::json::object()) : nlohmann::json();
    if (!d.is_object() || !dm.is_object() || !dm.contains("shape_hash") || !dm["shape_hash"].is_string() ||
        !d.contains("samples") || !d["samples"].is_array())
      throw std::runtime_error(path + ": \"draft\" must be a profile object with model.shape_hash and samples");
    if (canonical_device(d.value("hardware", hardware)) != hardware)
      throw std::runtime_error(path + ": the draft was profiled on " + d.value("hardware", std::string("?")) +
                               ", the target on " + hardware);
    m.draft_profiles.push_back({dm["shape_hash"].get<std::string>(), dm.value("name", std::string("?")),
                                fit_profile_steps(path, "draft.", read_profile_samples(path, "draft.", d["samples"])), {}});
    if (d.contains("rounds")) m.draft_profiles.back().rounds = read_draft_rounds(path, d["rounds"]);
  }
  m.source = path + (m.allreduce_measured ? " (all-reduce measured)" : "") + (m.lora_measured ? " (LoRA measured)" : "") +
             (m.sustained ? " (sustained load)" : "");
  return m;
}

namespace {

std::vector<DraftRound> read_draft_rounds(const std::string& path, const nlohmann::json& list) {
  if (!list.is_array()) throw std::runtime_error(path + ": draft.rounds must be an array");
  std::vector<DraftRound> rounds;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& o = list[i];
    const std::string where = path + ": draft.rounds[" + std::to_string(i) + "]";
    auto number = [&](const char* key) -> double {
      if (o.is_object() && o.contains(key) && o[key].is_number()) return o[key].get<double>();
      throw std::runtime_error(where + ": missing number '" + key + "'");
    };
    DraftRound r;
    r.n_seqs = static_cast<int>(number("n_seqs"));
    r.k = static_cast<int>(number("k"));
    r.context = static_cast<int>(number("context"));
    r.catchup_rows = static_cast<int>(number("catchup_rows"));
    r.round_s = number("round_s");
    if (o.contains("first_use_s") && o["first_use_s"].is_number()) r.first_use_s = o["first_use_s"].get<double>();
    if (r.n_seqs < 1 || r.k < 1 || r.catchup_rows < 1 || r.context < r.catchup_rows || !(r.round_s > 0) ||
        !std::isfinite(r.round_s))
      throw std::runtime_error(where + ": needs n_seqs >= 1, k >= 1, 1 <= catchup_rows <= context and round_s > 0");
    rounds.push_back(r);
  }
  return rounds;
}

std::vector<TimedStep> read_profile_samples(const std::string& path, const std::string& prefix, const nlohmann::json& list) {
  std::vector<TimedStep> steps;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& o = list[i];
    const std::string where = path + ": " + prefix + "samples[" + std::to_string(i) + "]";
    if (!o.is_object()) throw std::runtime_error(where + " is not an object");
    auto number = [&](const char* key) -> double {
      if (o.contains(key) && o[key].is_number()) return o[key].get<double>();
      throw std::runtime_error(where + ": missing number '" + key + "'");
    };
    auto number_or = [&](const char* key, double fallback) {
      return o.contains(key) && o[key].is_number() ? o[key].get<double>() : fallback;
    };
    TimedStep t;
    t.step_s = number("step_s");
    const int64_t n_tokens = static_cast<int64_t>(number("n_tokens"));
    const int64_t sum_context = static_cast<int64_t>(number("sum_context"));
    if (o.contains("prefill_pairs")) {  // servelab.profile/2: the full shape
      t.shape = step_shape_from_json(o, where);
    } else {
      const std::string phase = o.value("phase", std::string("prefill"));
      const int64_t batch = static_cast<int64_t>(number_or("batch_size", 1));
      t.shape = shape_from_v1(phase, batch, n_tokens, sum_context, static_cast<int64_t>(number_or("n_sampled", batch)));
    }
    if (t.shape.n_tokens < 1 || t.shape.sum_context < 0 || !(t.step_s > 0) || !std::isfinite(t.step_s))
      throw std::runtime_error(where + ": needs n_tokens >= 1, sum_context >= 0 and step_s > 0");
    t.served = o.contains("source") && o["source"] == "calibration";
    steps.push_back(t);
  }
  return steps;
}

ProfiledStepModel fit_profile_steps(const std::string& path, const std::string& prefix, const std::vector<TimedStep>& steps,
                                    const std::vector<int>& graph_buckets) {
  try {
    return ProfiledStepModel::fit(steps, graph_buckets);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + prefix + e.what());
  }
}

}  // namespace

}  // namespace servelab
