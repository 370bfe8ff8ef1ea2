#include "loadgen/step_error.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace servelab {
namespace {

struct Bucket {
  int64_t hi;  ///< inclusive upper bound
  const char* label;
};
constexpr std::array<Bucket, 5> kDecodeBuckets{{{4, "1-4 seqs"}, {16, "5-16 seqs"}, {64, "17-64 seqs"},
                                               {256, "65-256 seqs"}, {INT64_MAX, "257+ seqs"}}};
constexpr std::array<Bucket, 4> kPrefillBuckets{{{256, "1-256 tokens"}, {1024, "257-1024 tokens"},
                                                {4096, "1025-4096 tokens"}, {INT64_MAX, "4097+ tokens"}}};

template <size_t N>
size_t bucket_of(const std::array<Bucket, N>& buckets, int64_t x) {
  size_t i = 0;
  while (i + 1 < N && x > buckets[i].hi) ++i;
  return i;
}

/// Class index: decode buckets first, then prefill buckets, then mixed buckets (prefill rows
/// beside decodes: on an H200 those cost what neither part explains, so they are their own class).
size_t class_index(const StepShape& s) {
  if (is_decode_only(s)) return bucket_of(kDecodeBuckets, s.n_seqs);
  const bool mixed = s.prefill_pairs > 0.0 && s.decode_context > 0.0;
  return kDecodeBuckets.size() + (mixed ? kPrefillBuckets.size() : 0) + bucket_of(kPrefillBuckets, s.n_tokens);
}

std::string class_name(size_t i) {
  if (i < kDecodeBuckets.size()) return std::string("decode, ") + kDecodeBuckets[i].label;
  i -= kDecodeBuckets.size();
  if (i < kPrefillBuckets.size()) return std::string("prefill, ") + kPrefillBuckets[i].label;
  return std::string("mixed, ") + kPrefillBuckets[i - kPrefillBuckets.size()].label;
}

}  // namespace

bool is_decode_only(const StepShape& shape) {
  return shape.n_seqs > 0 && shape.n_tokens == shape.n_seqs && shape.prefill_pairs == 0.0;
}

std::string step_class(const StepShape& shape) { return class_name(class_index(shape)); }

std::vector<StepClassError> step_class_errors(std::span<const StepTiming> steps) {
  constexpr size_t n_classes = kDecodeBuckets.size() + 2 * kPrefillBuckets.size();
  std::array<StepClassError, n_classes> acc;
  std::array<std::vector<double>, n_classes> ratios;
  for (const StepTiming& t : steps) {
    const size_t i = class_index(t.shape);
    acc[i].n_steps += 1;
    acc[i].measured_s += t.measured_s;
    acc[i].predicted_s += t.predicted_s;
    if (t.predicted_s > 0) ratios[i].push_back(t.measured_s / t.predicted_s);
  }
  std::vector<StepClassError> out;
  for (size_t i = 0; i < n_classes; ++i) {
    if (acc[i].n_steps == 0) continue;
    acc[i].name = class_name(i);
    std::vector<double>& r = ratios[i];
    if (!r.empty()) {
      std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
      acc[i].ratio_p50 = r[r.size() / 2];
    }
    out.push_back(acc[i]);
  }
  return out;
}

std::string step_timing_line(const std::string& run, const StepTiming& t) {
  const StepShape& s = t.shape;
  nlohmann::ordered_json j;
  j["run"] = run;
  j["n_tokens"] = s.n_tokens;
  j["n_padding_tokens"] = s.n_padding_tokens;
  j["n_seqs"] = s.n_seqs;
  j["sum_context"] = s.sum_context;
  j["max_context"] = s.max_context;
  j["prefill_pairs"] = s.prefill_pairs;
  j["decode_context"] = s.decode_context;
  j["swap_bytes"] = s.swap_bytes;
  if (!t.lora.empty()) {  // [rows, slot, params] of each entry on an adapter
    nlohmann::ordered_json lora = nlohmann::ordered_json::array();
    for (const LoraRows& r : t.lora) lora.push_back({r.rows, r.slot, r.params});
    j["lora"] = std::move(lora);
  }
  if (t.start_s >= 0.0) j["start_s"] = t.start_s;
  j["measured_s"] = t.measured_s;
  j["predicted_s"] = t.predicted_s;
  return j.dump() + "\n";
}

std::string step_class_table(std::span<const StepTiming> steps) {
  char line[160];
  std::snprintf(line, sizeof line, "%-34s%8s%14s%14s%10s\n", "class", "steps", "measured s", "predicted s", "error");
  std::string out = line;
  double measured = 0.0, predicted = 0.0;
  for (const StepClassError& c : step_class_errors(steps)) {
    measured += c.measured_s;
    predicted += c.predicted_s;
    std::snprintf(line, sizeof line, "%-34s%8lld%14.3f%14.3f%9.1f%%\n", c.name.c_str(), static_cast<long long>(c.n_steps),
                  c.measured_s, c.predicted_s, 100.0 * c.error());
    out += line;
  }
  std::snprintf(line, sizeof line, "%-34s%8zu%14.3f%14.3f%9.1f%%\n", "all", steps.size(), measured, predicted,
                measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0);
  return out + line;
}

}  // namespace servelab
