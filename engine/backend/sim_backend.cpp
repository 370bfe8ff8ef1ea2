#include "engine/backend/sim_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/require.h"
#include "engine/splitmix64.h"

namespace servelab {

namespace {

/// Parameters every token multiplies through: all layers plus the final norm, not the
/// embedding table (a lookup) nor the LM head (only sampled rows use it).
double layer_params(const ModelConfig& m) {
  double p = static_cast<double>(m.n_params()) - static_cast<double>(m.vocab_size) * m.hidden_size;
  if (!m.tie_embeddings) p -= static_cast<double>(m.vocab_size) * m.hidden_size;
  return p;
}

/// Solves the least-squares problem for the first `k` columns of [1, n_tokens, sum_context];
/// false when they are (nearly) collinear over the samples.
bool solve_least_squares(std::span<const StepSample> samples, int k, std::array<double, 3>& beta) {
  // Columns are scaled to their largest magnitude so the normal equations stay well conditioned.
  std::array<double, 3> scale{1.0, 1.0, 1.0};
  for (const auto& s : samples) {
    scale[1] = std::max(scale[1], std::abs(static_cast<double>(s.n_tokens)));
    scale[2] = std::max(scale[2], std::abs(static_cast<double>(s.sum_context)));
  }
  double a[3][4] = {};
  for (const auto& s : samples) {
    const double x[3] = {1.0, s.n_tokens / scale[1], s.sum_context / scale[2]};
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) a[i][j] += x[i] * x[j];
      a[i][k] += x[i] * s.step_s;
    }
  }
  const double eps = 1e-10 * static_cast<double>(samples.size());
  for (int c = 0; c < k; ++c) {  // Gaussian elimination, partial pivoting
    int piv = c;
    for (int r = c + 1; r < k; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < eps) return false;
    for (int j = 0; j <= k; ++j) std::swap(a[c][j], a[piv][j]);
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int j = c; j <= k; ++j) a[r][j] -= f * a[c][j];
    }
  }
  beta = {0.0, 0.0, 0.0};
  for (int i = 0; i < k; ++i) beta[i] = a[i][k] / a[i][i] / scale[i];
  return true;
}

}  // namespace

void SimDevice::validate() const {
  require(peak_flops > 0, "sim device " + name + ": peak_flops", "> 0", peak_flops);
  require(mem_bw_bytes_s > 0, "sim device " + name + ": mem_bw_bytes_s", "> 0", mem_bw_bytes_s);
  require(step_overhead_s >= 0, "sim device " + name + ": step_overhead_s", ">= 0", step_overhead_s);
  require(kv_dtype_bytes == 1 || kv_dtype_bytes == 2 || kv_dtype_bytes == 4,
          "sim device " + name + ": kv_dtype_bytes", "1, 2 or 4", kv_dtype_bytes);
  require(weight_dtype_bytes == 1 || weight_dtype_bytes == 2 || weight_dtype_bytes == 4,
          "sim device " + name + ": weight_dtype_bytes", "1, 2 or 4", weight_dtype_bytes);
  require(host_link_bytes_s > 0, "sim device " + name + ": host_link_bytes_s", "> 0", host_link_bytes_s);
}

SimDevice SimDevice::preset(const std::string& name) {
  SimDevice d;
  d.name = name;
  if (name == "h100") {  // H100 SXM: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, PCIe 5 ~ 25 GB/s usable
    return d;
  } else if (name == "h200") {  // same compute as H100, 4.8 TB/s HBM3e
    d.mem_bw_bytes_s = 4.8e12;
    return d;
  } else if (name == "cpu-2core") {  // 2 AVX2 cores in fp32 (as the cpu backend computes), DDR4
    d.peak_flops = 100e9;
    d.mem_bw_bytes_s = 15e9;
    d.step_overhead_s = 5e-5;
    d.kv_dtype_bytes = 4;
    d.weight_dtype_bytes = 4;
    d.host_link_bytes_s = 10e9;
    return d;
  }
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown sim device '" + name + "' (known: " + names + ")");
}

std::vector<std::string> SimDevice::preset_names() { return {"h100", "h200", "cpu-2core"}; }

StepShape StepShape::of(const Batch& batch) {
  StepShape s;
  int64_t longest = 0;
  for (const BatchEntry& e : batch.entries) {
    const int64_t begin = e.seq->n_computed, n = e.n_new, end = begin + n;
    s.n_tokens += n;
    s.n_sampled += e.sample ? 1 : 0;
    s.sum_context += end;
    // positions begin..end-1 attend to begin+1 .. end keys
    s.attention_pairs += static_cast<double>(n) * static_cast<double>(begin) + 0.5 * n * (n + 1.0);
    longest = std::max(longest, end);
  }
  s.n_padding_tokens = batch.n_padding_tokens;
  s.attention_pairs += static_cast<double>(batch.n_padding_tokens) * static_cast<double>(longest);
  return s;
}

double LinearStepModel::predict(int64_t n_tokens, int64_t sum_context) const {
  return std::max(0.0, a_s + b_s_per_token * n_tokens + c_s_per_context * sum_context);
}

LinearStepModel LinearStepModel::fit(std::span<const StepSample> samples) {
  if (samples.empty()) throw std::invalid_argument("cannot fit a step-time model to zero samples");
  std::array<double, 3> beta{};
  // Fewer coefficients when the samples do not tell them apart (e.g. one batch shape only).
  for (int k = 3; k >= 1; --k)
    if (solve_least_squares(samples, k, beta)) return {beta[0], beta[1], beta[2]};
  throw std::invalid_argument("step-time samples are degenerate");
}

SimCostModel SimCostModel::roofline(const SimDevice& device) {
  device.validate();
  SimCostModel m;
  m.kind = Kind::roofline;
  m.device = device;
  m.source = "roofline:" + device.name;
  return m;
}

SimCostModel SimCostModel::from_profile_json(const std::string& path, const SimDevice& device) {
  device.validate();
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the profile");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  const nlohmann::json* list = nullptr;
  if (j.is_array()) list = &j;
  else if (j.is_object() && j.contains("samples")) list = &j["samples"];
  else if (j.is_object() && j.contains("steps")) list = &j["steps"];
  if (!list || !list->is_array())
    throw std::runtime_error(path + ": expected an array \"samples\" of {n_tokens, sum_context, step_s}");
  std::vector<StepSample> samples;
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& o = (*list)[i];
    const std::string where = path + ": samples[" + std::to_string(i) + "]";
    if (!o.is_object()) throw std::runtime_error(where + " is not an object");
    auto number = [&](std::initializer_list<const char*> keys) -> double {
      for (const char* k : keys)
        if (o.contains(k) && o[k].is_number()) return o[k].get<double>();
      throw std::runtime_error(where + ": missing number '" + std::string(*keys.begin()) + "'");
    };
    StepSample s;
    s.n_tokens = static_cast<int64_t>(number({"n_tokens"}));
    s.sum_context = static_cast<int64_t>(number({"sum_context"}));
    s.step_s = number({"step_s", "seconds", "duration_s"});
    if (s.n_tokens < 1 || s.sum_context < 0 || !(s.step_s > 0) || !std::isfinite(s.step_s))
      throw std::runtime_error(where + ": needs n_tokens >= 1, sum_context >= 0 and step_s > 0");
    samples.push_back(s);
  }
  SimCostModel m;
  m.kind = Kind::linear;
  m.device = device;
  if (j.is_object() && j.contains("kv_dtype_bytes") && j["kv_dtype_bytes"].is_number_integer())
    m.device.kv_dtype_bytes = j["kv_dtype_bytes"].get<int>();
  m.device.validate();
  try {
    m.linear = LinearStepModel::fit(samples);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  m.source = path;
  return m;
}

double SimCostModel::step_seconds(const ModelConfig& model, const StepShape& s) const {
  const double swap_s = static_cast<double>(s.swap_bytes) / device.host_link_bytes_s;
  if (kind == Kind::linear) return linear.predict(s.n_tokens + s.n_padding_tokens, s.sum_context) + swap_s;
  const double d = model.hidden_size, vocab = model.vocab_size;
  const double rows = static_cast<double>(s.n_tokens + s.n_padding_tokens);
  const double kv_slot_bytes = 2.0 * model.n_layers * model.kv_dim() * device.kv_dtype_bytes;
  const double flops = 2.0 * layer_params(model) * rows + 2.0 * d * vocab * s.n_sampled +
                       4.0 * model.n_layers * model.n_heads * model.head_dim() * s.attention_pairs;
  const double weight_bytes = (layer_params(model) + (s.n_sampled > 0 ? d * vocab : 0.0)) * device.weight_dtype_bytes;
  const double kv_bytes = kv_slot_bytes * static_cast<double>(s.sum_context + s.n_tokens);  // read + write
  const double compute_s = flops / device.peak_flops;
  const double memory_s = (weight_bytes + kv_bytes) / device.mem_bw_bytes_s;
  return std::max(compute_s, memory_s) + device.step_overhead_s + swap_s;
}

SimBackend::SimBackend(const ModelConfig& model, const SimCostModel& cost) : model_(model), cost_(cost) {
  model_.validate();
  cost_.device.validate();
}

int64_t SimBackend::kv_bytes_per_slot() const {
  return 2ll * model_.n_layers * model_.kv_dim() * cost_.device.kv_dtype_bytes;
}

void SimBackend::init_kv(int64_t n_slots) {
  if (n_slots < 1) throw std::invalid_argument("sim backend: arena of " + std::to_string(n_slots) + " slots");
  n_slots_ = n_slots;
}

ForwardResult SimBackend::forward(const Batch& batch, const KvManager& kv) {
  if (n_slots_ == 0) throw std::logic_error("sim backend: forward before init_kv");
  ForwardResult out;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const BatchEntry& e = batch.entries[i];
    const std::string where = "sim backend: batch entry " + std::to_string(i);
    if (!e.seq) throw std::invalid_argument(where + " has no sequence");
    const Sequence& s = *e.seq;
    const int end = s.n_computed + e.n_new;
    if (e.n_new < 1 || s.n_computed < 0 || end > s.n_tokens())
      throw std::invalid_argument(where + " (sequence " + std::to_string(s.id) + "): positions [" +
                                  std::to_string(s.n_computed) + ", " + std::to_string(end) + ") outside its " +
                                  std::to_string(s.n_tokens()) + " tokens");
    if (kv.slots_needed(s, end) != 0)
      throw std::invalid_argument(where + " (sequence " + std::to_string(s.id) + ") holds no KV slots up to position " +
                                  std::to_string(end));
    if (e.sample != (end == s.n_tokens()))
      throw std::invalid_argument(where + " (sequence " + std::to_string(s.id) + "): sample must be set exactly when the chunk ends at the last token");
    if (!e.sample) continue;
    for (int k = 0; k < std::max(1, e.n_samples); ++k) {  // draw k as sample sample_index + k would
      const uint64_t h = splitmix64(splitmix64(s.sampling.seed ^ splitmix64(static_cast<uint64_t>(s.sample_index + k))) +
                               static_cast<uint64_t>(end));
      const int64_t span = std::max(1, model_.vocab_size - 2);
      out.sampled.push_back(static_cast<TokenId>(std::min<int64_t>(model_.vocab_size - 1, 2 + static_cast<int64_t>(h % span))));
    }
  }
  StepShape shape = StepShape::of(batch);
  shape.swap_bytes = pending_swap_bytes_;
  double t = cost_.step_seconds(model_, shape);
  t += 2.0 * static_cast<double>(pending_copy_bytes_) / cost_.device.mem_bw_bytes_s;  // copy-on-write
  pending_swap_bytes_ = 0;
  pending_copy_bytes_ = 0;
  out.predicted_s = t;
  return out;
}

void SimBackend::copy_slots(std::span<const KvCopy> copies) {
  for (const KvCopy& c : copies) pending_copy_bytes_ += c.n_slots * kv_bytes_per_slot();
}

void SimBackend::save_slots(std::span<const int64_t> slots, std::vector<std::byte>& host) {
  host.clear();  // nothing is stored; the transfer only costs time
  pending_swap_bytes_ += static_cast<int64_t>(slots.size()) * kv_bytes_per_slot();
}

void SimBackend::load_slots(std::span<const int64_t> slots, const std::vector<std::byte>& host) {
  pending_swap_bytes_ += static_cast<int64_t>(slots.size()) * kv_bytes_per_slot();
}

}  // namespace servelab
