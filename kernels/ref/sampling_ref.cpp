#include "kernels/ref/sampling_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/philox.h"

namespace servelab::kernels {
namespace {

/// Largest key t with weight(keys >= t) >= target, where weight is count (mass == nullptr) or mass.
/// Only keys >= floor take part. Mirrors the GPU's 4-pass 8-bit radix select.
uint32_t select_threshold(const std::vector<uint32_t>& keys, const std::vector<uint64_t>* mass, uint64_t target,
                          uint32_t floor) {
  uint32_t prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    uint64_t hist[256] = {};
    const uint32_t hi_mask = shift == 24 ? 0u : ~((1u << (shift + 8)) - 1u);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] < floor || (keys[i] & hi_mask) != prefix) continue;
      hist[(keys[i] >> shift) & 0xffu] += mass ? (*mass)[i] : 1u;
    }
    uint64_t cum = 0;
    int b = 255;
    for (; b > 0; --b) {
      if (cum + hist[b] >= target) break;
      cum += hist[b];
    }
    target -= cum;
    prefix |= uint32_t(b) << shift;
  }
  return prefix;
}

}  // namespace

int32_t argmax_ref(std::span<const float> logits) {
  int32_t best = 0;
  float best_v = 0.0f;
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (!found || logits[i] > best_v) {
      best = static_cast<int32_t>(i);
      best_v = logits[i];
      found = true;
    }
  }
  return best;
}

namespace {

/// The kept set of the GPU sampler: keys of x / T (keys[i] < floor: not kept) and max x / T;
/// false when every logit is NaN or -inf.
bool kept_floor(std::span<const float> logits, const SampleParams& p, std::vector<uint32_t>& keys, uint32_t& floor,
                float& max_x) {
  const int n = static_cast<int>(logits.size());
  const float inv_t = 1.0f / p.temperature;
  max_x = -INFINITY;
  for (float l : logits)
    if (!std::isnan(l)) max_x = std::max(max_x, l * inv_t);
  if (max_x == -INFINITY) return false;
  keys.resize(size_t(n));
  for (int i = 0; i < n; ++i) keys[size_t(i)] = order_key(logits[size_t(i)] * inv_t);
  floor = 1;  // key 0 is NaN
  if (p.top_k > 0 && p.top_k < n) floor = std::max(floor, select_threshold(keys, nullptr, uint64_t(p.top_k), 1));
  if (p.top_p < 1.0f) {
    std::vector<uint64_t> mass(static_cast<size_t>(n));
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) {
      mass[size_t(i)] = keys[size_t(i)] >= floor ? fixed_weight(std::exp(logits[size_t(i)] * inv_t - max_x)) : 0u;
      total += mass[size_t(i)];
    }
    uint64_t target = static_cast<uint64_t>(static_cast<double>(p.top_p) * static_cast<double>(total));
    if (target < 1) target = 1;
    floor = std::max(floor, select_threshold(keys, &mass, target, floor));
  }
  return true;
}

bool greedy_params(const SampleParams& p) { return p.temperature <= 0.0f || p.top_k == 1; }

}  // namespace

int32_t sample_ref(std::span<const float> logits, const SampleParams& p) {
  if (greedy_params(p)) return argmax_ref(logits);
  const int n = static_cast<int>(logits.size());
  const float inv_t = 1.0f / p.temperature;
  std::vector<uint32_t> keys;
  uint32_t floor = 1;
  float max_x = 0.0f;
  if (!kept_floor(logits, p, keys, floor, max_x)) return argmax_ref(logits);
  int32_t best = -1;
  float best_score = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (keys[i] < floor) continue;
    const float u = philox_uniform(sample_bits(p.seed, p.seq_key, p.position, i));
    const float score = logits[i] * inv_t - std::log(-std::log(u));
    if (best < 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best < 0 ? argmax_ref(logits) : best;
}

void sampling_distribution_ref(std::span<const float> logits, const SampleParams& p, std::vector<float>& probs) {
  probs.assign(logits.size(), 0.0f);
  std::vector<uint32_t> keys;
  uint32_t floor = 1;
  float max_x = 0.0f;
  if (greedy_params(p) || !kept_floor(logits, p, keys, floor, max_x)) {
    probs[size_t(argmax_ref(logits))] = 1.0f;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (keys[i] >= floor) total += probs[i] = std::exp(logits[i] * inv_t - max_x);
  for (size_t i = 0; i < logits.size(); ++i) probs[i] = keys[i] >= floor ? static_cast<float>(double(probs[i]) / total) : 0.0f;
}

int32_t verify_draft_ref(std::span<const float> logits, const SampleParams& p, int32_t draft, std::span<const float> q) {
  float max_x = -INFINITY;
  for (float l : logits)
    if (!std::isnan(l)) max_x = std::max(max_x, l);
  if (greedy_params(p) || max_x == -INFINITY) return sample_ref(logits, p);  // the argmax either way
  std::vector<float> r;
  sampling_distribution_ref(logits, p, r);
  const double px = r[size_t(draft)], qx = q[size_t(draft)];
  if (sampling_uniform(p.seed, p.seq_key, p.position, 0) * qx < px) return draft;
  double mass = 0.0;
  for (size_t t = 0; t < r.size(); ++t) mass += r[t] = std::max(0.0f, r[t] - q[t]);
  r[size_t(draft)] = 0.0f;
  if (!(mass > 1e-12)) return sample_ref(logits, p);  // p == q up to rounding: the ordinary draw
  // Inverse CDF of r (its own total, after the draft's entry was zeroed), as draw_from.
  double total = 0.0;
  for (float x : r) total += std::max(0.0f, x);
  const double u = sampling_uniform(p.seed, p.seq_key, p.position, 2) * total;
  double cum = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (!(r[i] > 0.0f)) continue;
    cum += r[i];
    last = static_cast<int32_t>(i);
    if (u < cum) return last;
  }
  return last;
}

void apply_token_masks_ref(std::span<float> logits, int n_rows, int vocab, std::span<const int32_t> mask_index,
                           std::span<const uint32_t> words, int words_per_row) {
  for (int r = 0; r < n_rows; ++r) {
    const int m = mask_index[size_t(r)];
    if (m < 0) continue;
    for (int t = 0; t < vocab; ++t)
      if (!((words[size_t(m) * words_per_row + t / 32] >> (t % 32)) & 1u)) logits[size_t(r) * vocab + t] = -INFINITY;
  }
}

}  // namespace servelab::kernels
