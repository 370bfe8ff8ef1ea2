#include "engine/backend/reference.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/backend/sampler.h"

namespace servelab {
namespace {

using Matrix = std::vector<double>;  // row-major, rows are positions

/// y[out] = W[out, in] · x[in] (+ bias).
void matvec(const std::vector<float>& w, const std::vector<float>& bias, const double* x, int in,
            int out, double* y) {
  for (int o = 0; o < out; ++o) {
    double acc = bias.empty() ? 0.0 : bias[o];
    const float* row = w.data() + static_cast<size_t>(o) * in;
    for (int i = 0; i < in; ++i) acc += static_cast<double>(row[i]) * x[i];
    y[o] = acc;
  }
}

void rms_norm(const double* x, const std::vector<float>& weight, int d, double eps, double* y) {
  double ss = 0.0;
  for (int i = 0; i < d; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / d + eps);
  for (int i = 0; i < d; ++i) y[i] = x[i] * scale * weight[i];
}

/// Rotate-half RoPE (Hugging Face Llama): pairs (i, i + head_dim/2) turned by pos · inv_freq[i]
/// (theta^(-2i/head_dim), with the config's rope_scaling applied: rope_inv_freq).
void rope(double* v, int head_dim, int pos, const std::vector<double>& inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = pos * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

/// The whole forward; logits for positions [first_logits_row, n).
std::vector<float> run_forward(const ModelWeights& weights, std::span<const TokenId> tokens,
                               int first_logits_row) {
  const ModelConfig& c = weights.config;
  if (tokens.empty()) throw std::invalid_argument("reference_logits: empty token sequence");
  const int n = static_cast<int>(tokens.size());
  const int d = c.hidden_size, hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads;
  const int dq = nh * hd, dkv = nkv * hd, ffn = c.intermediate_size, vocab = c.vocab_size;
  const int group = nh / nkv;
  const std::vector<double> inv_freq = rope_inv_freq(c);

  Matrix x(static_cast<size_t>(n) * d);
  for (int p = 0; p < n; ++p) {
    const TokenId t = tokens[p];
    if (t < 0 || t >= vocab)
      throw std::invalid_argument("reference_logits: token " + std::to_string(t) + " at position " +
                                  std::to_string(p) + " is outside [0, " + std::to_string(vocab) + ")");
    for (int i = 0; i < d; ++i) x[size_t(p) * d + i] = weights.embedding[size_t(t) * d + i];
  }

  Matrix xn(d), q(size_t(n) * dq), k(size_t(n) * dkv), v(size_t(n) * dkv), attn(dq), o(d), gate(ffn),
      up(ffn), scores(n);
  for (const LayerWeights& L : weights.layers) {
    for (int p = 0; p < n; ++p) {
      rms_norm(&x[size_t(p) * d], L.attn_norm, d, c.rms_eps, xn.data());
      matvec(L.wq, L.bq, xn.data(), d, dq, &q[size_t(p) * dq]);
      matvec(L.wk, L.bk, xn.data(), d, dkv, &k[size_t(p) * dkv]);
      matvec(L.wv, L.bv, xn.data(), d, dkv, &v[size_t(p) * dkv]);
      for (int h = 0; h < nh; ++h) rope(&q[size_t(p) * dq + h * hd], hd, p, inv_freq);
      for (int h = 0; h < nkv; ++h) rope(&k[size_t(p) * dkv + h * hd], hd, p, inv_freq);
    }
    for (int p = 0; p < n; ++p) {
      for (int h = 0; h < nh; ++h) {
        const int g = h / group;
        const double* qh = &q[size_t(p) * dq + h * hd];
        double max_score = -INFINITY;
        for (int j = 0; j <= p; ++j) {
          double s = 0.0;
          for (int i = 0; i < hd; ++i) s += qh[i] * k[size_t(j) * dkv + g * hd + i];
          scores[j] = s / std::sqrt(static_cast<double>(hd));
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= p; ++j) sum += (scores[j] = std::exp(scores[j] - max_score));
        for (int i = 0; i < hd; ++i) {
          double acc = 0.0;
          for (int j = 0; j <= p; ++j) acc += scores[j] * v[size_t(j) * dkv + g * hd + i];
          attn[h * hd + i] = acc / sum;
        }
      }
      matvec(L.wo, {}, attn.data(), dq, d, o.data());
      for (int i = 0; i < d; ++i) x[size_t(p) * d + i] += o[i];

      rms_norm(&x[size_t(p) * d], L.ffn_norm, d, c.rms_eps, xn.data());
      matvec(L.w_gate, {}, xn.data(), d, ffn, gate.data());
      matvec(L.w_up, {}, xn.data(), d, ffn, up.data());
      for (int i = 0; i < ffn; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      matvec(L.w_down, {}, gate.data(), ffn, d, o.data());
      for (int i = 0; i < d; ++i) x[size_t(p) * d + i] += o[i];
    }
  }

  const int first = std::clamp(first_logits_row, 0, n - 1);
  std::vector<float> logits(size_t(n - first) * vocab);
  Matrix row(vocab);
  for (int p = first; p < n; ++p) {
    rms_norm(&x[size_t(p) * d], weights.final_norm, d, c.rms_eps, xn.data());
    matvec(weights.output_matrix(), {}, xn.data(), d, vocab, row.data());
    for (int i = 0; i < vocab; ++i) logits[size_t(p - first) * vocab + i] = static_cast<float>(row[i]);
  }
  return logits;
}

}  // namespace

std::vector<float> reference_logits_all(const ModelWeights& weights, std::span<const TokenId> tokens) {
  return run_forward(weights, tokens, 0);
}

std::vector<float> reference_logits(const ModelWeights& weights, std::span<const TokenId> tokens) {
  return run_forward(weights, tokens, static_cast<int>(tokens.size()) - 1);
}

std::vector<TokenId> reference_greedy(const ModelWeights& weights, std::span<const TokenId> prompt,
                                      int n_new) {
  std::vector<TokenId> seq(prompt.begin(), prompt.end());
  std::vector<TokenId> out;
  for (int i = 0; i < n_new; ++i) {
    const TokenId t = argmax_token(reference_logits(weights, seq));
    out.push_back(t);
    seq.push_back(t);
  }
  return out;
}

}  // namespace servelab
