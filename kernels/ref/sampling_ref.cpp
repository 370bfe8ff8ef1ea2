#include "kernels/ref/sampling_ref.h"

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

int32_t sample_ref(std::span<const float> logits, const SampleParams& p) {
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax_ref(logits);
  const int n = static_cast<int>(logits.size());
  const float inv_t = 1.0f / p.temperature;
  float max_x = -INFINITY;
  for (float l : logits)
    if (!std::isnan(l)) max_x = std::max(max_x, l * inv_t);
  if (max_x == -INFINITY) return argmax_ref(logits);

  std::vector<uint32_t> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = order_key(logits[i] * inv_t);
  uint32_t floor = 1;  // key 0 is NaN
  if (p.top_k > 0 && p.top_k < n) floor = std::max(floor, select_threshold(keys, nullptr, uint64_t(p.top_k), 1));
  if (p.top_p < 1.0f) {
    std::vector<uint64_t> mass(n);
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) {
      mass[i] = keys[i] >= floor ? fixed_weight(std::exp(logits[i] * inv_t - max_x)) : 0u;
      total += mass[i];
    }
    uint64_t target = static_cast<uint64_t>(static_cast<double>(p.top_p) * static_cast<double>(total));
    if (target < 1) target = 1;
    floor = std::max(floor, select_threshold(keys, &mass, target, floor));
  }
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
