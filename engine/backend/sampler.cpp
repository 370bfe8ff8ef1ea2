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

double uniform_draw(uint64_t seed, uint64_t seq_key, int position, uint64_t stream) {
  // Chained so that swapping seq_key and position (or seed) gives unrelated streams.
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ seq_key);
  h = splitmix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(position)));
  if (stream != 0) h = splitmix64(h ^ splitmix64(stream));
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

namespace {

/// The tokens sample_token may draw, each with its unnormalized probability (in the order the
/// draw walks them), and their total; empty when the draw is greedy.
struct Kept {
  std::vector<Candidate> cands;
  double total = 0.0;
};

/// softmax(logits / temperature) cut to top_k, then to top_p (see sample_token). Empty when
/// every logit is NaN or -inf (callers fall back to argmax).
void keep_candidates(std::span<const float> logits, const SamplingParams& p, Kept& kept) {
  std::vector<Candidate>& cands = kept.cands;
  cands.clear();
  kept.total = 0.0;
  const float inv_t = 1.0f / p.temperature;
  cands.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isnan(logits[i])) cands.push_back({logits[i] * inv_t, static_cast<TokenId>(i)});
  if (cands.empty()) return;

  const bool cut_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < cands.size();
  const bool cut_p = p.top_p < 1.0f;
  if (cut_k) {
    std::nth_element(cands.begin(), cands.begin() + p.top_k, cands.end(), more_likely);
    cands.resize(p.top_k);
  }
  if (cut_p) std::sort(cands.begin(), cands.end(), more_likely);

  float max_value = -INFINITY;
  for (const Candidate& c : cands) max_value = std::max(max_value, c.value);
  if (max_value == -INFINITY) {  // every logit is -inf
    cands.clear();
    return;
  }
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
  kept.total = total;
}

/// Inverse CDF of the kept candidates at u in [0, 1).
TokenId draw_kept(const Kept& kept, double u01) {
  const double u = u01 * kept.total;
  double cum = 0.0;
  for (const Candidate& c : kept.cands) {
    cum += c.value;
    if (u < cum) return c.index;
  }
  // Rounding left u at or past the last boundary: the last token with nonzero weight.
  for (size_t i = kept.cands.size(); i-- > 0;)
    if (kept.cands[i].value > 0.0f) return kept.cands[i].index;
  return kept.cands.front().index;
}

bool greedy(const SamplingParams& p) { return p.temperature == 0.0f || p.top_k == 1; }

}  // namespace

TokenId sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t seq_key,
                     int position) {
  validate(logits, p);
  if (greedy(p)) return argmax_token(logits);
  thread_local Kept kept;
  keep_candidates(logits, p, kept);
  if (kept.cands.empty()) return argmax_token(logits);
  return draw_kept(kept, uniform_draw(p.seed, seq_key, position));
}

void sampling_distribution(std::span<const float> logits, const SamplingParams& p, std::vector<float>& probs) {
  validate(logits, p);
  probs.assign(logits.size(), 0.0f);
  thread_local Kept kept;
  if (!greedy(p)) keep_candidates(logits, p, kept);
  if (greedy(p) || kept.cands.empty()) {
    probs[size_t(argmax_token(logits))] = 1.0f;
    return;
  }
  for (const Candidate& c : kept.cands) probs[size_t(c.index)] = static_cast<float>(c.value / kept.total);
}

TokenId draw_from(std::span<const float> probs, double u) {
  if (probs.empty()) throw std::invalid_argument("draw_from: empty distribution");
  double total = 0.0;
  for (float x : probs) total += std::max(0.0f, x);
  if (!(total > 0.0)) throw std::invalid_argument("draw_from: a distribution without mass");
  const double target = u * total;
  double cum = 0.0;
  TokenId last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!(probs[i] > 0.0f)) continue;
    cum += probs[i];
    last = static_cast<TokenId>(i);
    if (target < cum) return last;
  }
  return last;
}

TokenId verify_draft(std::span<const float> logits, const SamplingParams& p, uint64_t seq_key, int position,
                     TokenId draft, std::span<const float> q) {
  validate(logits, p);
  if (q.size() != logits.size())
    throw std::invalid_argument("verify_draft: q has " + std::to_string(q.size()) + " entries for a vocabulary of " +
                                std::to_string(logits.size()));
  if (draft < 0 || size_t(draft) >= logits.size())
    throw std::invalid_argument("verify_draft: draft token " + std::to_string(draft) + " is outside the vocabulary");
  if (greedy(p)) return argmax_token(logits);  // exact: the draft stands only if it is the argmax
  thread_local std::vector<float> target;
  sampling_distribution(logits, p, target);
  const double px = target[size_t(draft)], qx = q[size_t(draft)];
  // Accept with probability min(1, p(x) / q(x)); u * q(x) < p(x) avoids dividing by a tiny q.
  if (uniform_draw(p.seed, seq_key, position) * qx < px) return draft;
  // Rejected (so p(x) < q(x)): the residual max(0, p - q), renormalized by draw_from.
  double mass = 0.0;
  for (size_t t = 0; t < target.size(); ++t) {
    target[t] = std::max(0.0f, target[t] - q[t]);
    mass += target[t];
  }
  target[size_t(draft)] = 0.0f;  // exactly zero in exact arithmetic; rounding must not revive it
  const double u = uniform_draw(p.seed, seq_key, position, kStreamResidual);
  if (!(mass > 1e-12)) return sample_token(logits, p, seq_key, position);  // p == q up to rounding
  return draw_from(target, u);
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
