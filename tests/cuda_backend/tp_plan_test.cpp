// The tensor-parallel sharding plan (engine/backend/cuda/tp_plan.h) on the CPU: a model's fp32
// weights cut with the plan, a plain forward per rank, a summing "all-reduce" after the O and
// down products and a concatenating "all-gather" of the vocabulary-parallel logits give the
// unsharded reference forward's logits (engine/backend/reference.h) for N = 1, 2, 4, on a
// Llama-shaped (GQA) and a Qwen-shaped (attention bias, tied embeddings) model.
#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/tp_plan.h"
#include "engine/backend/reference.h"
#include "engine/model/tensors.h"
#include "engine/model/weights.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

using cuda::ShardSplit;
using cuda::TensorShard;
using cuda::TpPlan;
using testing::random_tokens;
using testing::rel_error;

ModelConfig llama_shaped() {  // GQA 2: 8 query heads over 4 KV heads, head_dim 16
  ModelConfig c;
  c.name = "tp-llama";
  c.hidden_size = 128;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.intermediate_size = 192;
  c.vocab_size = 200;
  c.max_position = 256;
  c.dtype = DType::f32;
  return c;
}

ModelConfig qwen_shaped() {  // attention bias, tied embeddings, 14 heads over 2 KV heads
  ModelConfig c = llama_shaped();
  c.name = "tp-qwen";
  c.hidden_size = 224;
  c.n_heads = 14;
  c.n_kv_heads = 2;
  c.intermediate_size = 320;
  c.attention_bias = true;
  c.tie_embeddings = true;
  c.rope_theta = 1e6f;
  return c;
}

/// One rank's tensors, cut from the whole model with the plan.
using RankTensors = std::map<std::string, std::vector<float>>;

RankTensors cut(const ModelWeights& w, const TpPlan& plan, int rank) {
  RankTensors out;
  for (const TensorShard& s : plan.shards(rank)) {
    std::vector<float> local(s.local_numel());
    cuda::copy_shard(tensor_storage(w, s.spec.name).data(), s, local.data());
    out[s.spec.name] = std::move(local);
  }
  if (plan.model.tie_embeddings) {  // the rank's vocabulary rows of the replicated embedding
    const int64_t d = plan.model.hidden_size;
    const auto& e = out.at("model.embed_tokens.weight");
    out["lm_head.weight"].assign(e.begin() + rank * plan.vocab * d, e.begin() + (rank + 1) * plan.vocab * d);
  }
  return out;
}

/// y[out] = W[out, in] · x (+ b).
std::vector<double> matvec(const std::vector<float>& w, const std::vector<double>& x, int out,
                           const std::vector<float>* bias = nullptr) {
  const int in = static_cast<int>(x.size());
  std::vector<double> y(out);
  for (int o = 0; o < out; ++o) {
    double acc = bias ? (*bias)[o] : 0.0;
    for (int i = 0; i < in; ++i) acc += double(w[size_t(o) * in + i]) * x[i];
    y[o] = acc;
  }
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

void rope(double* v, int hd, int pos, const std::vector<double>& inv_freq) {
  for (int i = 0; i < hd / 2; ++i) {
    const double c = std::cos(pos * inv_freq[i]), s = std::sin(pos * inv_freq[i]);
    const double a = v[i], b = v[i + hd / 2];
    v[i] = a * c - b * s;
    v[i + hd / 2] = b * c + a * s;
  }
}

/// The forward of every position, each rank computing with its own tensors only; the ranks meet
/// at the two all-reduces per layer (sums of the partial O and down products) and the all-gather
/// of the logits (rank-major vocabulary slices). Returns [n, vocab].
std::vector<float> sharded_logits(const ModelWeights& w, const TpPlan& plan, const std::vector<TokenId>& tokens) {
  const ModelConfig& m = plan.model;
  const int n = int(tokens.size()), d = m.hidden_size, hd = m.head_dim(), N = plan.n_ranks;
  const int group = plan.heads / plan.kv_heads;
  const std::vector<double> inv_freq = rope_inv_freq(m);
  std::vector<RankTensors> ranks;
  for (int r = 0; r < N; ++r) ranks.push_back(cut(w, plan, r));
  auto T = [&](int r, const std::string& name) -> const std::vector<float>& { return ranks[r].at(name); };
  auto Tb = [&](int r, const std::string& name) -> const std::vector<float>* {
    return m.attention_bias ? &ranks[r].at(name) : nullptr;
  };

  std::vector<std::vector<double>> x(n, std::vector<double>(d));
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < d; ++i) x[p][i] = T(0, "model.embed_tokens.weight")[size_t(tokens[p]) * d + i];
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string L = "model.layers." + std::to_string(l) + ".";
    // q/k/v per rank and position.
    std::vector<std::vector<std::vector<double>>> q(N), k(N), v(N);
    for (int r = 0; r < N; ++r)
      for (int p = 0; p < n; ++p) {
        const std::vector<double> xn = rms_norm(x[p], T(r, L + "input_layernorm.weight"), m.rms_eps);
        q[r].push_back(matvec(T(r, L + "self_attn.q_proj.weight"), xn, plan.q_dim(), Tb(r, L + "self_attn.q_proj.bias")));
        k[r].push_back(matvec(T(r, L + "self_attn.k_proj.weight"), xn, plan.kv_dim(), Tb(r, L + "self_attn.k_proj.bias")));
        v[r].push_back(matvec(T(r, L + "self_attn.v_proj.weight"), xn, plan.kv_dim(), Tb(r, L + "self_attn.v_proj.bias")));
        for (int h = 0; h < plan.heads; ++h) rope(&q[r][p][h * hd], hd, p, inv_freq);
        for (int h = 0; h < plan.kv_heads; ++h) rope(&k[r][p][h * hd], hd, p, inv_freq);
      }
    for (int p = 0; p < n; ++p) {
      std::vector<double> reduced(d, 0.0);  // the all-reduce of the O products
      for (int r = 0; r < N; ++r) {
        std::vector<double> attn(plan.q_dim());
        for (int h = 0; h < plan.heads; ++h) {
          const int g = h / group;
          std::vector<double> s(p + 1);
          double mx = -INFINITY, sum = 0.0;
          for (int j = 0; j <= p; ++j) {
            double dot = 0.0;
            for (int i = 0; i < hd; ++i) dot += q[r][p][h * hd + i] * k[r][j][g * hd + i];
            mx = std::max(mx, s[j] = dot / std::sqrt(double(hd)));
          }
          for (int j = 0; j <= p; ++j) sum += (s[j] = std::exp(s[j] - mx));
          for (int i = 0; i < hd; ++i) {
            double acc = 0.0;
            for (int j = 0; j <= p; ++j) acc += s[j] * v[r][j][g * hd + i];
            attn[h * hd + i] = acc / sum;
          }
        }
        const std::vector<double> part = matvec(T(r, L + "self_attn.o_proj.weight"), attn, d);
        for (int i = 0; i < d; ++i) reduced[i] += part[i];
      }
      for (int i = 0; i < d; ++i) x[p][i] += reduced[i];
      std::fill(reduced.begin(), reduced.end(), 0.0);  // the all-reduce of the down products
      for (int r = 0; r < N; ++r) {
        const std::vector<double> xn = rms_norm(x[p], T(r, L + "post_attention_layernorm.weight"), m.rms_eps);
        std::vector<double> gate = matvec(T(r, L + "mlp.gate_proj.weight"), xn, plan.ffn);
        const std::vector<double> up = matvec(T(r, L + "mlp.up_proj.weight"), xn, plan.ffn);
        for (int i = 0; i < plan.ffn; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
        const std::vector<double> part = matvec(T(r, L + "mlp.down_proj.weight"), gate, d);
        for (int i = 0; i < d; ++i) reduced[i] += part[i];
      }
      for (int i = 0; i < d; ++i) x[p][i] += reduced[i];
    }
  }
  std::vector<float> logits(size_t(n) * m.vocab_size);
  for (int p = 0; p < n; ++p)
    for (int r = 0; r < N; ++r) {  // the all-gather: rank r's slice at columns [r·V/N, (r+1)·V/N)
      const std::vector<double> xn = rms_norm(x[p], T(r, "model.norm.weight"), m.rms_eps);
      const std::vector<double> part = matvec(T(r, "lm_head.weight"), xn, plan.vocab);
      for (int i = 0; i < plan.vocab; ++i) logits[size_t(p) * m.vocab_size + r * plan.vocab + i] = float(part[i]);
    }
  return logits;
}

struct Case {
  const char* name;
  bool qwen;
  int n_ranks;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class TpPlanForward : public ::testing::TestWithParam<Case> {};

TEST_P(TpPlanForward, ShardedLogitsEqualTheUnshardedReference) {
  const ModelConfig m = GetParam().qwen ? qwen_shaped() : llama_shaped();
  const ModelWeights w = ModelWeights::random(m, 7);
  const TpPlan plan = TpPlan::make(m, GetParam().n_ranks);
  const std::vector<TokenId> tokens = random_tokens(9, m.vocab_size, 3);
  const std::vector<float> want = reference_logits_all(w, tokens);
  const std::vector<float> got = sharded_logits(w, plan, tokens);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_error(got, want), 1e-5) << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, TpPlanForward,
                         ::testing::Values(Case{"llama_n1", false, 1}, Case{"llama_n2", false, 2},
                                           Case{"llama_n4", false, 4}, Case{"qwen_n1", true, 1},
                                           Case{"qwen_n2", true, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TpPlan, ShardsTileEveryTensor) {
  // Over the ranks, the split tensors' pieces cover the whole tensor exactly once.
  const TpPlan plan = TpPlan::make(qwen_shaped(), 2);
  for (const TensorSpec& spec : tensor_specs(plan.model)) {
    std::vector<int> hits(spec.numel(), 0);
    for (int r = 0; r < plan.n_ranks; ++r) {
      const TensorShard s = plan.shard(spec, r);
      for (int64_t i = 0; i < s.local_rows(); ++i)
        for (int64_t j = 0; j < s.local_cols(); ++j) ++hits[s.first_element() + i * s.full_cols() + j];
    }
    const int want = plan.shard(spec, 0).split == ShardSplit::replicated ? plan.n_ranks : 1;
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [&](int h) { return h == want; })) << spec.name;
  }
}

TEST(TpPlan, PerRankShapesAndKvBytes) {
  const ModelConfig m = preset("llama2-13b");
  const TpPlan plan = TpPlan::make(m, 2);
  EXPECT_EQ(plan.heads, 20);
  EXPECT_EQ(plan.kv_heads, 20);
  EXPECT_EQ(plan.ffn, 13824 / 2);
  EXPECT_EQ(plan.vocab, 16000);
  EXPECT_EQ(plan.kv_bytes_per_slot(2) * 2, 2ll * m.n_layers * m.kv_dim() * 2);
  const TensorShard o = plan.shard(TensorSpec{"model.layers.3.self_attn.o_proj.weight", {5120, 5120}}, 1);
  EXPECT_EQ(o.split, ShardSplit::cols);
  EXPECT_EQ(o.begin, 2560);
  EXPECT_EQ(o.local_shape(), (std::vector<int64_t>{5120, 2560}));
  const TensorShard k = plan.shard(TensorSpec{"model.layers.0.self_attn.k_proj.weight", {5120, 5120}}, 1);
  EXPECT_EQ(k.split, ShardSplit::rows);
  EXPECT_EQ(k.first_element(), 2560ll * 5120);
}

TEST(TpPlan, RefusesWhatItCannotSplit) {
  const ModelConfig tiny = preset("tiny");  // 8 heads, 2 KV heads
  try {
    TpPlan::make(tiny, 4);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the model's 2 KV heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TpPlan::make(tiny, 3), std::invalid_argument);  // 8 heads
  EXPECT_THROW(TpPlan::make(tiny, 0), std::invalid_argument);
  ModelConfig odd_vocab = llama_shaped();
  odd_vocab.vocab_size = 201;
  EXPECT_THROW(TpPlan::make(odd_vocab, 2), std::invalid_argument);
  const TpPlan plan = TpPlan::make(tiny, 2);
  EXPECT_THROW(plan.shard(tensor_specs(tiny)[0], 2), std::invalid_argument);
  EXPECT_THROW(plan.shard(TensorSpec{"model.rotary.weird", {4}}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
