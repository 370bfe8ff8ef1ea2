// The CPU backend over quantized weights (dequantized, FP8 activations quantized per token or per
// tensor) and over an FP8 KV cache (quantized on write, dequantized on read).
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cost_model.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/backend/quant_check.h"
#include "engine/backend/reference.h"
#include "engine/backend/step_input.h"
#include "engine/model/quantize_weights.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

using testing::make_sequence;
using testing::random_tokens;
using testing::rel_error;
using testing::ScrambledKv;
using testing::small_config;

std::vector<float> prefill_logits(const std::shared_ptr<const ModelWeights>& w, const std::vector<TokenId>& tokens,
                                  KvCacheDType kv_dtype = KvCacheDType::auto_dtype) {
  CpuBackend backend(w, CpuBackendOptions{.n_threads = 2, .kv_cache_dtype = kv_dtype});
  backend.init_kv(128);
  ScrambledKv kv(128, 5);
  Sequence s = make_sequence(1, tokens);
  kv.assign(1, int(tokens.size()));
  const std::span<const float> l = backend.logits(make_step(backend, Batch{{{&s, int(tokens.size()), true}}, 0}, kv));
  return {l.begin(), l.end()};
}

TEST(CpuBackendQuant, WeightOnlyFormatsRunTheirDequantizedWeights) {
  // Weight-only formats (activations unquantized): the backend equals the plain reference over
  // the dequantized weights, and differs from the unquantized model by the quantization error.
  const ModelWeights base = ModelWeights::random(small_config(2), 4);
  const std::vector<TokenId> tokens = random_tokens(20, 97, 3);
  const std::vector<float> exact = reference_logits(base, tokens);
  QuantScheme int4 = QuantScheme::for_method(Quantization::int4_awq);
  int4.group_size = 32;
  QuantScheme gptq = int4;
  gptq.method = Quantization::int4_gptq;
  QuantScheme fp8_w = QuantScheme::for_method(Quantization::fp8, true);
  fp8_w.activations = ActivationQuant::none;
  for (const QuantScheme& scheme : {int4, gptq, fp8_w}) {
    SCOPED_TRACE(scheme.describe());
    auto q = std::make_shared<const ModelWeights>(quantize_weights(base, scheme));
    const std::vector<float> got = prefill_logits(q, tokens);
    EXPECT_LT(rel_error(got, reference_logits(*q, tokens)), 1e-4);
    const double err = rel_error(got, exact);
    EXPECT_GT(err, 1e-4);
    EXPECT_LT(err, scheme.method == Quantization::fp8 ? 0.08 : 0.3);
  }
}

TEST(CpuBackendQuant, Fp8ActivationsAreQuantizedPerTokenOrPerTensor) {
  const ModelWeights base = ModelWeights::random(small_config(2), 6);
  const std::vector<TokenId> tokens = random_tokens(16, 97, 8);
  QuantScheme weight_only = QuantScheme::for_method(Quantization::fp8, true);
  weight_only.activations = ActivationQuant::none;
  const ModelWeights w = quantize_weights(base, weight_only);
  const std::vector<float> w8a16 = prefill_logits(std::make_shared<const ModelWeights>(w), tokens);
  for (ActivationQuant a : {ActivationQuant::fp8_per_token, ActivationQuant::fp8_per_tensor}) {
    ModelWeights w8a8 = w;
    w8a8.quant.activations = a;
    const double err = rel_error(prefill_logits(std::make_shared<const ModelWeights>(w8a8), tokens), w8a16);
    EXPECT_GT(err, 1e-4) << to_string(a);  // the activations were rounded through FP8
    EXPECT_LT(err, 0.2) << to_string(a);  // E4M3 keeps 3 mantissa bits: ~4% per rounding
  }
  // Static scales: a scale far too small saturates every input at ±448 · scale.
  ModelWeights stat = w;
  stat.quant.activations = ActivationQuant::fp8_static;
  stat.quant.input_scales.assign(2, {1e-6f, 1e-6f, 1e-6f, 1e-6f});
  EXPECT_GT(rel_error(prefill_logits(std::make_shared<const ModelWeights>(stat), tokens), w8a16), 0.3);
}

TEST(CpuBackendQuant, Fp8KvCacheStoresOneBytePlusScalesAndDecodesClose) {
  auto w = std::make_shared<const ModelWeights>(ModelWeights::random(small_config(2), 7));
  CpuBackend fp8(w, CpuBackendOptions{.n_threads = 2, .kv_cache_dtype = KvCacheDType::fp8});
  // 2 layers × K|V × 2 kv heads × (16 codes + a 4-byte scale).
  EXPECT_EQ(fp8.kv_bytes_per_slot(), 2 * 2 * 2 * (16 + 4));
  EXPECT_EQ(CpuBackend(w).kv_bytes_per_slot(), 2 * 2 * 2 * 16 * 4);
  const std::vector<TokenId> tokens = random_tokens(24, 97, 9);
  const std::vector<float> exact = prefill_logits(w, tokens);
  const double prefill_err = rel_error(prefill_logits(w, tokens, KvCacheDType::fp8), exact);
  EXPECT_GT(prefill_err, 1e-5);  // K/V went through E4M3
  EXPECT_LT(prefill_err, 0.05);
  // Decode steps read the whole context back from FP8; a copy and a swap round trip keep it.
  fp8.init_kv(128);
  ScrambledKv kv(128, 2);
  Sequence s = make_sequence(1, std::vector<TokenId>(tokens.begin(), tokens.begin() + 16));
  kv.assign(1, 40);
  run_batch(fp8, Batch{{{&s, 16, false}}, 0}, kv);
  s.n_computed = 16;
  const std::vector<int64_t> slots = kv.slots_of(1);
  const std::vector<std::byte> before = testing::read_slots(fp8, std::span(slots).first(16));
  auto pool = fp8.make_host_pool(16);
  std::vector<KvSwap> out;
  for (int i = 0; i < 16; ++i) out.push_back({slots[size_t(i)], i, 1});
  fp8.swap_out(out, *pool);
  fp8.swap_in(out, *pool);
  EXPECT_EQ(testing::read_slots(fp8, std::span(slots).first(16)), before);
  for (int i = 16; i < 24; ++i) {
    s.tokens.push_back(tokens[size_t(i)]);
    const std::span<const float> l = fp8.logits(make_step(fp8, Batch{{{&s, 1, true}}, 0}, kv));
    const double err = rel_error(l, reference_logits(*w, s.tokens));
    EXPECT_LT(err, 0.15) << "decode " << i;
    EXPECT_GT(err, 1e-6) << "decode " << i;
    ++s.n_computed;
  }
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

TEST(QuantCheck, IdentityIsExactAndFormatsAreRankedByTheirError) {
  const ModelWeights w = ModelWeights::random(testing::small_config(2), 12);
  QuantCheckOptions o;
  o.n_positions = 48;
  o.n_sequences = 4;
  o.n_threads = 2;
  QuantScheme int4 = scheme_for_model(Quantization::int4_awq, w.config);
  const std::vector<QuantVariant> variants = {
      {"same", QuantScheme{}, KvCacheDType::auto_dtype},
      {"fp8", QuantScheme::for_method(Quantization::fp8, true), KvCacheDType::auto_dtype},
      {"int4", int4, KvCacheDType::auto_dtype},
      {"kvfp8", QuantScheme{}, KvCacheDType::fp8},
  };
  const std::vector<QuantAccuracy> r = quant_check(w, variants, o);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].n_positions, 48);
  EXPECT_EQ(r[0].top1_agreement, 1.0);
  EXPECT_EQ(r[0].max_logit_error, 0.0);
  EXPECT_EQ(r[0].mean_kl, 0.0);
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_GT(r[i].mean_kl, 0.0) << r[i].variant.label;
    EXPECT_GT(r[i].max_logit_error, 0.0) << r[i].variant.label;
  }
  EXPECT_LT(r[1].rel_logit_error, r[2].rel_logit_error);  // 8 bits beat 4
  EXPECT_NEAR(r[1].linear_bytes_per_weight, 1.0, 0.1);
  EXPECT_NEAR(r[2].linear_bytes_per_weight, 0.5 + 2.5 / int4.group_size, 1e-3);
  EXPECT_THROW(quant_check(quantize_weights(w, int4), variants, o), std::invalid_argument);
}

TEST(QuantCheck, OutlierChannelsScaleTheNormWeights) {
  ModelWeights w = ModelWeights::random(testing::small_config(2), 12);
  const ModelWeights before = w;
  add_outlier_channels(w, 3, 100.0f, 1);
  int changed = 0;
  for (size_t c = 0; c < w.layers[0].attn_norm.size(); ++c)
    if (w.layers[0].attn_norm[c] != before.layers[0].attn_norm[c]) {
      ++changed;
      EXPECT_FLOAT_EQ(w.layers[0].attn_norm[c], 100.0f * before.layers[0].attn_norm[c]);
      EXPECT_FLOAT_EQ(w.layers[1].ffn_norm[c], 100.0f * before.layers[1].ffn_norm[c]);
    }
  EXPECT_EQ(changed, 3);
  EXPECT_THROW(add_outlier_channels(w, 65, 10.0f, 1), std::invalid_argument);
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

TEST(SimQuant, RooflinePricesEachFormatFromItsBytesAndFlops) {
  const ModelConfig m = preset("llama2-7b");
  const SimDevice h100 = SimDevice::preset("h100");
  StepShape decode;  // one sequence, one token, no context yet: the weights dominate
  decode.n_tokens = decode.n_sampled = decode.n_seqs = 1;
  StepShape prefill;  // 4,096 rows: the matmuls dominate
  prefill.n_tokens = 4096;
  prefill.n_sampled = prefill.n_seqs = 1;
  StorageFormats fp8, int4, fp8_weight_only;
  fp8.quant = scheme_for_model(Quantization::fp8, m);
  int4.quant = scheme_for_model(Quantization::int4_awq, m);
  fp8_weight_only.quant = fp8.quant;
  fp8_weight_only.quant.activations = ActivationQuant::none;
  const double bf16_decode = roofline_seconds(m, h100, 1, decode);
  EXPECT_NEAR(roofline_seconds(m, h100, 1, decode, fp8) / bf16_decode, 0.55, 0.05);
  EXPECT_NEAR(roofline_seconds(m, h100, 1, decode, int4) / bf16_decode, 0.31, 0.05);
  // Prefill: W8A8 runs the products at the FP8 peak; weight-only FP8 does not.
  const double bf16_prefill = roofline_seconds(m, h100, 1, prefill);
  EXPECT_LT(roofline_seconds(m, h100, 1, prefill, fp8), 0.6 * bf16_prefill);
  EXPECT_NEAR(roofline_seconds(m, h100, 1, prefill, fp8_weight_only) / bf16_prefill, 1.0, 0.01);
  EXPECT_NEAR(roofline_seconds(m, SimDevice::preset("a100-80gb"), 1, prefill, fp8) /
                  roofline_seconds(m, SimDevice::preset("a100-80gb"), 1, prefill), 1.0, 0.01);  // no FP8 tensor cores
  // An FP8 KV cache: 1 byte an element plus a 4-byte scale per row, in the sim's arena too.
  SimCostModel cost = SimCostModel::roofline(h100);
  cost.formats.kv_cache_dtype = KvCacheDType::fp8;
  EXPECT_EQ(SimBackend(m, cost).kv_bytes_per_slot(), 2 * 32 * 32 * (128 + 4));
  EXPECT_EQ(SimBackend(m, SimCostModel::roofline(h100)).kv_bytes_per_slot(), 2 * 32 * 32 * 128 * 2);
}

}  // namespace
}  // namespace servelab
