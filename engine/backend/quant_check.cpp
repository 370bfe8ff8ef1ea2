#include "engine/backend/quant_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/model/quantize_weights.h"
#include "engine/splitmix64.h"

namespace servelab {
namespace {

/// Logits [n_positions, vocab] of the streams on `backend`, position by position (row s·len + p
/// predicts token p + 1 of stream s).
std::vector<float> stream_logits(Backend& backend, const std::vector<std::vector<TokenId>>& streams) {
  const int len = static_cast<int>(streams[0].size());
  const int n = static_cast<int>(streams.size());
  const int vocab = backend.config().vocab_size;
  const int64_t n_slots = int64_t(n) * (len + 16);
  backend.init_kv(n_slots);
  KvConfig kc;
  kc.kind = KvKind::paged;
  kc.max_model_len = len + 16;
  kc.prefix_caching = false;
  std::unique_ptr<KvManager> kv = make_kv_manager(kc, n_slots);
  std::vector<Sequence> seqs(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    seqs[size_t(s)].id = seqs[size_t(s)].request_id = uint64_t(s) + 1;
    seqs[size_t(s)].tokens = streams[size_t(s)];
    seqs[size_t(s)].n_prompt = len;
  }
  std::vector<float> out(size_t(n) * len * vocab);
  for (int p = 0; p < len; ++p) {  // one decode row per stream: every position's logits
    Batch batch;
    for (Sequence& s : seqs) {
      if (!kv->allocate_slots(s, 1)) throw std::logic_error("quant_check: the KV arena is too small");
      batch.entries.push_back({&s, 1, true});
    }
    const std::vector<float> l = backend.step_logits(make_step(backend, batch, *kv));
    if (l.size() != size_t(n) * vocab) throw std::logic_error("quant_check: the backend returned the wrong logit count");
    for (int s = 0; s < n; ++s)
      std::copy(l.begin() + size_t(s) * vocab, l.begin() + size_t(s + 1) * vocab,
                out.begin() + (size_t(s) * len + p) * vocab);
    for (Sequence& s : seqs) ++s.n_computed;
  }
  return out;
}

std::vector<float> stream_logits(const BackendMaker& make, const std::vector<std::vector<TokenId>>& streams) {
  const std::unique_ptr<Backend> backend = make();
  return stream_logits(*backend, streams);
}

/// log-softmax of a row, in double.
void log_softmax(const float* x, int n, std::vector<double>& out) {
  out.resize(size_t(n));
  const double m = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
  const double lse = m + std::log(sum);
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
}

}  // namespace

void QuantCheckOptions::validate() const {
  if (n_positions < 1) throw std::invalid_argument("positions must be >= 1 (got " + std::to_string(n_positions) + ")");
  if (n_sequences < 1 || n_sequences > n_positions)
    throw std::invalid_argument("sequences must be in [1, positions] (got " + std::to_string(n_sequences) + ")");
  if (n_threads < 0) throw std::invalid_argument("threads must be >= 0 (got " + std::to_string(n_threads) + ")");
  if (!(massive_rate >= 0.0 && massive_rate <= 1.0))
    throw std::invalid_argument("massive rate must be in [0, 1] (got " + std::to_string(massive_rate) + ")");
}

std::vector<QuantVariant> default_quant_variants(const ModelConfig& config) {
  const int g = int4_group_size(config);
  QuantScheme fp8_weight_only = QuantScheme::for_method(Quantization::fp8, true);
  fp8_weight_only.activations = ActivationQuant::none;
  QuantScheme fp8_channel_tensor = QuantScheme::for_method(Quantization::fp8, true);
  fp8_channel_tensor.activations = ActivationQuant::fp8_per_tensor;
  const std::string gs = "-g" + std::to_string(g);
  return {
      {"fp8-tensor", QuantScheme::for_method(Quantization::fp8, false), KvCacheDType::auto_dtype},
      {"fp8-channel-tensor", fp8_channel_tensor, KvCacheDType::auto_dtype},
      {"fp8-channel-token", QuantScheme::for_method(Quantization::fp8, true), KvCacheDType::auto_dtype},
      {"fp8-weight-only", fp8_weight_only, KvCacheDType::auto_dtype},
      {"int4_awq" + gs, scheme_for_model(Quantization::int4_awq, config), KvCacheDType::auto_dtype},
      {"int4_gptq" + gs, scheme_for_model(Quantization::int4_gptq, config), KvCacheDType::auto_dtype},
      {"kvfp8", QuantScheme{}, KvCacheDType::fp8},
      {"fp8-channel-token+kvfp8", QuantScheme::for_method(Quantization::fp8, true), KvCacheDType::fp8},
  };
}

std::vector<QuantAccuracy> quant_check_backends(const ModelConfig& config, const BackendMaker& reference,
                                                const std::vector<BackendVariant>& variants,
                                                const QuantCheckOptions& o) {
  o.validate();
  const int vocab = config.vocab_size;
  const int len = (o.n_positions + o.n_sequences - 1) / o.n_sequences;
  if (len + 16 > config.max_position)
    throw std::invalid_argument("positions / sequences = " + std::to_string(len) + " exceeds the model's max_position " +
                                std::to_string(config.max_position) + "; use more sequences");
  std::vector<std::vector<TokenId>> streams(size_t(o.n_sequences), std::vector<TokenId>(size_t(len)));
  uint64_t state = o.seed ^ 0x51ab5eedull;
  std::vector<int32_t> massive = o.massive_tokens;
  std::sort(massive.begin(), massive.end());
  const uint64_t massive_below = uint64_t(o.massive_rate * 0x1p53);  // a position is massive when u < rate
  for (auto& s : streams)
    for (TokenId& t : s) {
      t = static_cast<TokenId>(splitmix64_next(state) % uint64_t(vocab));
      if (!massive.empty() && (splitmix64_next(state) >> 11) < massive_below)
        t = massive[splitmix64_next(state) % massive.size()];
    }
  const std::vector<float> ref = stream_logits(reference, streams);
  std::vector<QuantAccuracy> results;
  std::vector<double> lp, lq;
  const double bf16_bytes = double(linear_weight_bytes(config, QuantScheme{})) / 2.0;
  for (const BackendVariant& bv : variants) {
    const QuantVariant& v = bv.variant;
    const std::vector<float> got = stream_logits(bv.make, streams);
    QuantAccuracy a;
    a.variant = v;
    a.linear_bytes_per_weight = double(linear_weight_bytes(config, v.scheme)) / bf16_bytes;
    double agree = 0, kl_sum = 0, num = 0, den = 0, agree_other = 0, n_other = 0;
    // Every stream's positions up to n_positions in all.
    int64_t counted = 0;
    for (int s = 0; s < o.n_sequences && counted < o.n_positions; ++s)
      for (int p = 0; p < len && counted < o.n_positions; ++p, ++counted) {
        const float* r = ref.data() + (size_t(s) * len + p) * vocab;
        const float* q = got.data() + (size_t(s) * len + p) * vocab;
        const bool same = std::max_element(r, r + vocab) - r == std::max_element(q, q + vocab) - q;
        agree += same;
        if (!std::binary_search(massive.begin(), massive.end(), streams[size_t(s)][size_t(p)])) {
          agree_other += same;
          ++n_other;
        }
        log_softmax(r, vocab, lp);
        log_softmax(q, vocab, lq);
        double kl = 0;
        for (int i = 0; i < vocab; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
        kl_sum += kl;
        a.max_kl = std::max(a.max_kl, kl);
        for (int i = 0; i < vocab; ++i) {
          const double d = double(q[i]) - r[i];
          a.max_logit_error = std::max(a.max_logit_error, std::fabs(d));
          num += d * d;
          den += double(r[i]) * r[i];
        }
      }
    a.n_positions = counted;
    a.top1_agreement = agree / double(counted);
    a.top1_agreement_other = n_other > 0 ? agree_other / n_other : 0.0;
    a.mean_kl = kl_sum / double(counted);
    a.rel_logit_error = den > 0 ? std::sqrt(num / den) : 0.0;
    results.push_back(a);
  }
  return results;
}

std::vector<QuantAccuracy> quant_check(const ModelWeights& weights, const std::vector<QuantVariant>& variants,
                                       const QuantCheckOptions& o) {
  o.validate();
  if (weights.quant.quantized())
    throw std::invalid_argument("quant_check compares formats against unquantized weights (got " + weights.quant.describe() + ")");
  auto base = std::make_shared<const ModelWeights>(weights);
  const auto cpu = [threads = o.n_threads](QuantScheme scheme, KvCacheDType kv, const ModelWeights& w,
                                           std::shared_ptr<const ModelWeights> unquantized) -> BackendMaker {
    // Quantized when its backend is made: one format's weights at a time.
    return [=, &w]() -> std::unique_ptr<Backend> {
      auto q = scheme.quantized() ? std::make_shared<const ModelWeights>(quantize_weights(w, scheme)) : unquantized;
      return std::make_unique<CpuBackend>(q, CpuBackendOptions{.n_threads = threads, .kv_cache_dtype = kv});
    };
  };
  std::vector<BackendVariant> makers;
  for (const QuantVariant& v : variants) makers.push_back({v, cpu(v.scheme, v.kv_cache_dtype, weights, base)});
  return quant_check_backends(weights.config, cpu(QuantScheme{}, KvCacheDType::auto_dtype, weights, base), makers, o);
}

void add_outlier_channels(ModelWeights& w, int n_channels, float magnitude, uint64_t seed) {
  const int d = w.config.hidden_size;
  if (n_channels < 0 || n_channels > d)
    throw std::invalid_argument("outlier channels must be in [0, " + std::to_string(d) + "] (got " + std::to_string(n_channels) + ")");
  if (!(magnitude > 0.0f)) throw std::invalid_argument("outlier magnitude must be > 0");
  std::vector<int> channels(static_cast<size_t>(d));
  std::iota(channels.begin(), channels.end(), 0);
  uint64_t state = seed ^ 0x0a71e4ull;
  for (int i = d - 1; i > 0; --i) std::swap(channels[size_t(i)], channels[splitmix64_next(state) % uint64_t(i + 1)]);
  channels.resize(size_t(n_channels));
  for (LayerWeights& l : w.layers)
    for (int c : channels) {
      l.attn_norm[size_t(c)] *= magnitude;
      l.ffn_norm[size_t(c)] *= magnitude;
    }
}

}  // namespace servelab
