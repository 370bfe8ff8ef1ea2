#include "engine/backend/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace servelab {
namespace {

/// A surviving token: its index and temperature-scaled logit, later its unnormalized probability.
struct Candidate {
  float value;
  TokenId index;
};

/// Most likely first; lowest index first among equals, so cuts never depend on sort stability.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

void validate(std::span<const float> logits, const SamplingParams& p) {
  if (logits.empty()) throw std::invalid_argument("sample_token: empty logits");
  if (!(p.temperature >= 0.0f) || std::isinf(p.temperature))
    throw std::invalid_argument("sampling.temperature (" + std::to_string(p.temperature) +
                                ") must be a finite number >= 0");
  if (p.top_k < 0)
    throw std::invalid_argument("sampling.top_k (" + std::to_string(p.top_k) + ") must be >= 0 (0 = off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw std::invalid_argument("sampling.top_p (" + std::to_string(p.top_p) + ") must be in (0, 1]");
}

}  // namespace

double uniform_draw(uint64_t seed, uint64_t seq_key, int position) {
  // Chained so that swapping seq_key and position (or seed) gives unrelated streams.
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ seq_key);
  h = splitmix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(position)));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

TokenId argmax_token(std::span<const float> logits) {
  TokenId best = 0;
  float best_value = -INFINITY;
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v)) continue;
    if (!found || v > best_value) {
      best = static_cast<TokenId>(i);
      best_value = v;
      found = true;
    }
  }
  return best;
}

TokenId sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t seq_key,
                     int position) {
  validate(logits, p);
  if (p.temperature == 0.0f || p.top_k == 1) return argmax_token(logits);

  const float inv_t = 1.0f / p.temperature;
  std::vector<Candidate> cands;
  cands.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isnan(logits[i])) cands.push_back({logits[i] * inv_t, static_cast<TokenId>(i)});
  if (cands.empty()) return 0;

  const bool cut_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < cands.size();
  const bool cut_p = p.top_p < 1.0f;
  if (cut_k) {
    std::nth_element(cands.begin(), cands.begin() + p.top_k, cands.end(), more_likely);
    cands.resize(p.top_k);
  }
  if (cut_p) std::sort(cands.begin(), cands.end(), more_likely);

  float max_value = -INFINITY;
  for (const Candidate& c : cands) max_value = std::max(max_value, c.value);
  if (max_value == -INFINITY) return argmax_token(logits);  // every logit is -inf
  double total = 0.0;
  for (Candidate& c : cands) {
    c.value = std::exp(c.value - max_value);
    total += c.value;
  }

  if (cut_p) {  // smallest prefix of the sorted list reaching top_p of the mass
    const double target = static_cast<double>(p.top_p) * total;
    double cum = 0.0;
    size_t keep = 0;
    while (keep < cands.size()) {
      cum += cands[keep].value;
      ++keep;
      if (cum >= target) break;
    }
    cands.resize(keep);
    total = cum;
  }

  const double u = uniform_draw(p.seed, seq_key, position) * total;
  double cum = 0.0;
  for (const Candidate& c : cands) {
    cum += c.value;
    if (u < cum) return c.index;
  }
  // Rounding left u at or past the last boundary: the last token with nonzero weight.
  for (size_t i = cands.size(); i-- > 0;)
    if (cands[i].value > 0.0f) return cands[i].index;
  return cands.front().index;
}

std::span<const float> apply_token_mask(std::span<const float> logits, const uint32_t* words, std::vector<float>& scratch) {
  scratch.assign(logits.begin(), logits.end());
  bool any = false;
  for (size_t t = 0; t < scratch.size(); ++t) {
    if ((words[t / 32] >> (t % 32)) & 1u) any = true;
    else scratch[t] = -INFINITY;
  }
  if (!any) throw std::invalid_argument("token mask allows no token of the " + std::to_string(logits.size()) + "-token vocabulary");
  return scratch;
}

float token_logprob(std::span<const float> logits, TokenId token) {
  float m = -INFINITY;
  for (float x : logits) m = std::max(m, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - m);
  return static_cast<float>(double(logits[size_t(token)]) - m - std::log(sum));
}

}  // namespace servelab
