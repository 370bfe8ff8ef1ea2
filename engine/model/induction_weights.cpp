// copy-tiny: the induction model's weights, set by hand (layout in induction_weights.h).
//
// Layer 1 attention: two heads whose query and key come from the constant bias dimension only, on
// the fast RoPE pairs, so their score depends on the offset i − j alone and peaks at 1 (head 0)
// or 2 (head 1); their values copy the token's code into P and P2.
// Layer 1 FFN: SwiGLU computes products of two ±1 coordinates exactly enough: with a large
// constant c0 in the gate, (silu(c0 + a) − silu(c0)) · b = a · b to within 1e-6 for |a| ≤ 1, so
// QB[k] = P[k]·E[π(k)] and KB[k] = P2[k]·P[π(k)] take two units each. A product code does not
// correlate when only one of the two tokens agrees, which an additive one would.
// Layer 2 attention: head 0 scores λ·<QB_i, KB_j> on the slow RoPE pairs (their angle stays under
// 0.2 rad over max_position), so position j scores 124·λ when (t[j−2], t[j−1]) = (t[i−1], t[i])
// and noise around 0 otherwise, minus a small recency term on one middle pair that makes the
// latest of several matches win; its value is the token's code, written to OUT.
// Layer 2's FFN sharpens OUT so that attention spread thin copies nothing. The LM head reads OUT
// and a seeded random map of QB.
#include "engine/model/induction_weights.h"

#include <cmath>
#include <filesystem>
#include <numbers>
#include <stdexcept>

#include "engine/model/half.h"
#include "engine/model/hf_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"

namespace servelab {
namespace induction {

constexpr int kWidth = 768;
constexpr int kCode = 128;      // dims of a token's code
constexpr int kFeatures = 124;  // bigram-code dims (62 slow RoPE pairs)
constexpr int kHeadDim = 256;
constexpr int kHalf = kHeadDim / 2;
constexpr int kE = 0, kP = 128, kP2 = 256, kQB = 380, kKB = 504, kOut = 628, kBias = 767;
constexpr int kFastPairs = 16;         // RoPE pairs the offset heads use
constexpr double kFastDecay = 0.2;     // their weights exp(−0.2 m): a sharp, alias-free peak
constexpr double kOffsetGap = 24.0;    // logit gap of the offset heads' peak over every other offset
constexpr double kGateConstant = 16.0; // c0: silu is linear to 1e-6 around it
constexpr double kMatchScale = 0.2;    // λ: a full bigram match scores 124·λ ≈ 25 logits, noise σ ≈ 2.2
constexpr double kRecency = 12.0;      // logits a match loses from the latest to max_position back
// Layer 2's FFN sharpens OUT coordinate-wise: x + kSharpGain·(silu(kSharpSlope·x − kSharpBias) −
// silu(−kSharpSlope·x − kSharpBias)): 15 at x = ±1 (one attended position), below 0.7 at
// |x| ≤ 0.33 (attention spread over unrelated positions), so only a real match copies.
constexpr double kSharpSlope = 10.0, kSharpBias = 3.0, kSharpGain = 2.0;
constexpr double kFallback = 1.0;      // weight of the fallback map against the copy signal
constexpr double kSlowAngle = 0.2;     // a content pair turns at most this over max_position

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// ±1 from (seed, stream, a, b): the token codes (stream 1) and the fallback map (stream 2).
float sign(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  return (mix(mix(mix(seed ^ (stream << 56)) + a) + b) >> 63) ? 1.0f : -1.0f;
}

/// Which code dim the later token of a bigram feature reads: a shift, so (x, y) and (y, x) differ.
int later_dim(int k) { return (k + 41) % kCode; }

float round_weight(DType dtype, double v) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case DType::bf16: return bf16_to_f32(f32_to_bf16(f));
    case DType::f16: return f16_to_f32(f32_to_f16(f));
    case DType::f32: return f;
  }
  return f;
}

void check_shapes(const ModelConfig& c) {
  const ModelConfig want = copy_tiny_config();
  if (c.hidden_size != want.hidden_size || c.n_layers != want.n_layers || c.n_heads != want.n_heads ||
      c.n_kv_heads != want.n_kv_heads || c.intermediate_size != want.intermediate_size ||
      c.vocab_size < 2 || c.tie_embeddings || c.attention_bias || c.rope_scaling.type != RopeScaling::Type::none)
    throw std::invalid_argument("induction weights need copy-tiny's shapes (hidden 768, 2 layers, 3 heads, FFN 496, "
                                "untied, no bias, no rope_scaling); got " + c.name);
}

/// Layer 1's offset heads: q = a_m on pair m, k = a_m·e^{i·offset·θ_m}, so the score at offset
/// i − j is σ Σ w_m cos((i − j − offset)θ_m). Returns σ·w_m·sqrt(head_dim) (the a_m² of each pair)
/// for a peak kOffsetGap above every other offset in [−2, max_position).
std::vector<double> offset_head_amplitudes(const std::vector<double>& inv_freq, int max_position) {
  double peak = 0.0, worst = -1e30;
  for (int m = 0; m < kFastPairs; ++m) peak += std::exp(-kFastDecay * m);
  for (int delta = 1; delta < max_position + 2; ++delta) {
    double s = 0.0;
    for (int m = 0; m < kFastPairs; ++m) s += std::exp(-kFastDecay * m) * std::cos(delta * inv_freq[size_t(m)]);
    worst = std::max(worst, s);
  }
  if (!(peak - worst > 1e-3 * peak))
    throw std::invalid_argument("induction weights: rope_theta gives no sharp offset peak");
  const double sigma = kOffsetGap / (peak - worst);
  std::vector<double> a2(kFastPairs);
  for (int m = 0; m < kFastPairs; ++m) a2[size_t(m)] = sigma * std::exp(-kFastDecay * m) * std::sqrt(double(kHeadDim));
  return a2;
}

}  // namespace induction

bool is_constructed_preset(const std::string& name) { return name == kCopyTinyPreset; }

ModelConfig copy_tiny_config() { return preset(kCopyTinyPreset); }

ModelWeights induction_weights(const ModelConfig& config, uint64_t seed) {
  using namespace induction;
  config.validate();
  check_shapes(config);
  const std::vector<double> inv_freq = rope_inv_freq(config);
  const int max_pos = config.max_position;
  // The slow pairs: their angle stays under kSlowAngle over the whole context.
  int first_slow = kHalf;
  while (first_slow > 0 && inv_freq[size_t(first_slow - 1)] * max_pos <= kSlowAngle) --first_slow;
  if (kHalf - first_slow < kFeatures / 2)
    throw std::invalid_argument("induction weights: rope_theta " + std::to_string(config.rope_theta) +
                                " and max_position " + std::to_string(max_pos) + " leave " +
                                std::to_string(kHalf - first_slow) + " slow RoPE pairs (need " +
                                std::to_string(kFeatures / 2) + ")");
  first_slow = kHalf - kFeatures / 2;
  // The recency pair: the fastest one that turns at most π/2 over the context (sin is monotone there).
  int recency = kFastPairs;
  while (recency < first_slow && inv_freq[size_t(recency)] * max_pos > std::numbers::pi / 2) ++recency;
  if (recency >= first_slow) throw std::invalid_argument("induction weights: no RoPE pair for the recency term");

  ModelWeights w;
  w.config = config;
  w.layers.resize(size_t(config.n_layers));
  for (const TensorSpec& s : tensor_specs(config)) tensor_storage(w, s.name).assign(size_t(s.numel()), 0.0f);
  const int d = kWidth, V = config.vocab_size, I = config.intermediate_size;
  auto put = [&](std::vector<float>& m, int cols, int row, int col, double v) {
    m[size_t(row) * size_t(cols) + size_t(col)] = round_weight(config.dtype, v);
  };
  std::vector<float> codes(size_t(V) * kCode);  // [vocab, 128]: each token's ±1 code
  for (int t = 0; t < V; ++t)
    for (int c = 0; c < kCode; ++c) codes[size_t(t) * kCode + size_t(c)] = sign(seed, 1, uint64_t(t), uint64_t(c));
  auto code = [&](int token, int c) { return codes[size_t(token) * kCode + size_t(c)]; };

  for (int t = 0; t < V; ++t) {
    for (int c = 0; c < kCode; ++c) put(w.embedding, d, t, kE + c, code(t, c));
    put(w.embedding, d, t, kBias, 1.0);
  }
  // Each RMSNorm's weight is the RMS its input has (every coordinate ±1 or 0), so normalized = raw.
  auto norm_to = [&](std::vector<float>& g, int n_unit_dims) {
    for (float& x : g) x = round_weight(config.dtype, std::sqrt(double(n_unit_dims) / d));
  };
  LayerWeights& l1 = w.layers[0];
  LayerWeights& l2 = w.layers[1];
  norm_to(l1.attn_norm, kCode + 1);
  norm_to(l1.ffn_norm, kCode + 1 + kCode + kFeatures);
  norm_to(l2.attn_norm, kCode + 1 + kCode + 3 * kFeatures);
  norm_to(l2.ffn_norm, kCode + 1 + kCode + 3 * kFeatures + kCode);  // OUT = ±1 at a match
  for (float& x : w.final_norm) x = 1.0f;

  // Layer 1: head h attends at offset h + 1 and copies the code into P (h = 0) or P2 (h = 1).
  const std::vector<double> a2 = offset_head_amplitudes(inv_freq, max_pos);
  for (int h = 0; h < 2; ++h) {
    const int offset = h + 1, row0 = h * kHeadDim;
    for (int m = 0; m < kFastPairs; ++m) {
      const double a = std::sqrt(a2[size_t(m)]), angle = offset * inv_freq[size_t(m)];
      put(l1.wq, d, row0 + m, kBias, a);
      put(l1.wk, d, row0 + m, kBias, a * std::cos(angle));
      put(l1.wk, d, row0 + m + kHalf, kBias, a * std::sin(angle));
    }
    const int n_copy = h == 0 ? kCode : kFeatures, dest = h == 0 ? kP : kP2;
    for (int c = 0; c < n_copy; ++c) {
      put(l1.wv, d, row0 + c, kE + c, 1.0);
      put(l1.wo, config.n_heads * kHeadDim, dest + c, row0 + c, 1.0);
    }
  }
  // Layer 1 FFN: QB[k] = P[k]·E[π(k)] and KB[k] = P2[k]·P[π(k)], two units per product.
  for (int k = 0; k < kFeatures; ++k) {
    const int pairs[2][3] = {{kP + k, kE + later_dim(k), kQB + k}, {kP2 + k, kP + later_dim(k), kKB + k}};
    for (int which = 0; which < 2; ++which) {
      const auto [earlier, later, dest] = pairs[which];
      const int u = 4 * k + 2 * which;
      put(l1.w_gate, d, u, kBias, kGateConstant);
      put(l1.w_gate, d, u, earlier, 1.0);
      put(l1.w_up, d, u, later, 1.0);
      put(l1.w_down, I, dest, u, 1.0);
      put(l1.w_gate, d, u + 1, kBias, kGateConstant);
      put(l1.w_up, d, u + 1, later, 1.0);
      put(l1.w_down, I, dest, u + 1, -1.0);
    }
  }
  // Layer 2, head 0: query QB, key KB on the slow pairs (λ folded into the query, with the
  // attention's 1/sqrt(head_dim) undone), recency on one middle pair, value E into OUT.
  const double q_scale = kMatchScale * std::sqrt(double(kHeadDim));
  for (int f = 0; f < kFeatures; ++f) {
    const int dim = first_slow + f / 2 + (f % 2) * kHalf;  // features 2p, 2p+1 share pair p
    put(l2.wq, d, dim, kQB + f, q_scale);
    put(l2.wk, d, dim, kKB + f, 1.0);
  }
  // z_q = ρ, z_k = −iρ: the score is −ρ²/sqrt(head_dim) · sin((i − j)θ), 0 at j = i, falling.
  const double rho = std::sqrt(kRecency * std::sqrt(double(kHeadDim)));
  put(l2.wq, d, recency, kBias, rho);
  put(l2.wk, d, recency + kHalf, kBias, -rho);
  for (int c = 0; c < kCode; ++c) {
    put(l2.wv, d, c, kE + c, 1.0);
    put(l2.wo, config.n_heads * kHeadDim, kOut + c, c, 1.0);
  }
  // Layer 2 FFN: two units per OUT coordinate, gates ±slope·x − bias, up the constant 1.
  for (int c = 0; c < kCode; ++c)
    for (int sgn : {1, -1}) {
      const int u = 2 * c + (sgn < 0);
      put(l2.w_gate, d, u, kOut + c, sgn * kSharpSlope);
      put(l2.w_gate, d, u, kBias, -kSharpBias);
      put(l2.w_up, d, u, kBias, 1.0);
      put(l2.w_down, I, kOut + c, u, sgn * kSharpGain);
    }
  auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
  const double full_copy = 1.0 + kSharpGain * (silu(kSharpSlope - kSharpBias) - silu(-kSharpSlope - kSharpBias));
  // LM head: <code_t, OUT> / full_copy + kFallback·<code_t, R·QB>, R a seeded ±1/sqrt(124) matrix.
  const double r_scale = kFallback / std::sqrt(double(kFeatures));
  std::vector<float> r(size_t(kCode) * kFeatures);
  for (int c = 0; c < kCode; ++c)
    for (int f = 0; f < kFeatures; ++f) r[size_t(c) * kFeatures + size_t(f)] = sign(seed, 2, uint64_t(c), uint64_t(f));
  for (int t = 0; t < V; ++t) {
    for (int c = 0; c < kCode; ++c) put(w.lm_head, d, t, kOut + c, code(t, c) / full_copy);
    for (int f = 0; f < kFeatures; ++f) {
      double s = 0.0;
      for (int c = 0; c < kCode; ++c) s += code(t, c) * r[size_t(c) * kFeatures + size_t(f)];
      put(w.lm_head, d, t, kQB + f, r_scale * s);
    }
  }
  return w;
}

ModelWeights preset_weights(const std::string& preset_name, const ModelConfig& config, uint64_t seed) {
  return is_constructed_preset(preset_name) ? induction_weights(config, seed) : ModelWeights::random(config, seed);
}

void write_weights_checkpoint(const ModelWeights& weights, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw std::runtime_error(dir + ": cannot create directory: " + ec.message());
  fs::remove(fs::path(dir) / "model.safetensors.index.json", ec);  // one file now: an old index would win
  write_hf_config(weights.config, (fs::path(dir) / "config.json").string());
  std::vector<SafetensorsEntry> entries;
  std::vector<const float*> values;
  for (const TensorSpec& s : tensor_specs(weights.config)) {
    entries.push_back({s.name, weights.config.dtype, s.shape});
    values.push_back(tensor_storage(weights, s.name).data());
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), entries, values);
}

}  // namespace servelab
