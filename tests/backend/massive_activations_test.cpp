// Massive activations synthesized into random weights (engine/backend/massive_activations.h), and
// what they do to FP8's activation scales in quant_check.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/massive_activations.h"
#include "engine/backend/quant_check.h"
#include "engine/model/quantize_weights.h"
#include "engine/model/residual_scale.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace massive_activations_test {

TEST(MassiveActivations, OneHiddenChannelIsTheirTokensAloneAndNoLayerWritesIt) {
  ModelWeights w = ModelWeights::random(testing::small_config(2), 12);
  const ModelWeights before = w;
  const std::vector<int32_t> tokens = add_massive_activations(w, {3, 2, 1e4f}, 7);
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end()));
  const int d = w.config.hidden_size, ffn = w.config.intermediate_size, vocab = w.config.vocab_size;
  // Exactly one embedding column changed: zero but at the massive tokens, which are large there.
  std::vector<int> changed_cols;
  for (int c = 0; c < d; ++c)
    for (int t = 0; t < vocab; ++t)
      if (w.embedding[size_t(t) * d + c] != before.embedding[size_t(t) * d + c]) {
        changed_cols.push_back(c);
        break;
      }
  ASSERT_EQ(changed_cols.size(), 1u);
  const int cstar = changed_cols[0];
  for (int t = 0; t < vocab; ++t) {
    const float v = w.embedding[size_t(t) * d + cstar];
    if (std::binary_search(tokens.begin(), tokens.end(), t)) EXPECT_GT(v, 10.0f) << t;
    else EXPECT_EQ(v, 0.0f) << t;
  }
  int gate_entries = 0;
  for (const LayerWeights& l : w.layers) {
    for (int i = 0; i < w.config.n_heads * w.config.head_dim(); ++i) EXPECT_EQ(l.wo[size_t(cstar) * w.config.n_heads * w.config.head_dim() + i], 0.0f);
    for (int j = 0; j < ffn; ++j) EXPECT_EQ(l.w_down[size_t(cstar) * ffn + j], 0.0f);
    for (int j = 0; j < ffn; ++j) gate_entries += l.w_gate[size_t(j) * d + cstar] > 1.0f;
  }
  EXPECT_EQ(gate_entries, 2 * int(w.layers.size()));  // n_channels large gate weights a layer
  ModelWeights again = ModelWeights::random(testing::small_config(2), 12);
  EXPECT_EQ(add_massive_activations(again, {3, 2, 1e4f}, 7), tokens);  // seeded
  EXPECT_EQ(again.layers[1].w_down, w.layers[1].w_down);
}

TEST(MassiveActivations, SettingsAreCheckedByName) {
  ModelWeights w = ModelWeights::random(testing::small_config(2), 12);
  try {
    add_massive_activations(w, {0, 2, 1e4f}, 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("massive tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add_massive_activations(w, {2, 0, 1e4f}, 1), std::invalid_argument);
  EXPECT_THROW(add_massive_activations(w, {2, 2, 0.5f}, 1), std::invalid_argument);
  QuantCheckOptions o;
  o.massive_rate = 1.5;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

// Per-tensor dynamic FP8 takes one scale for the whole step: a massive token's row sets it, and
// the other rows' down-projection inputs fall into E4M3's subnormals. Per-token scales keep them.
TEST(MassiveActivations, PerTensorScalesLoseTheOtherRowsWherePerTokenScalesDoNot) {
  const std::vector<QuantVariant> variants = {
      {"tensor", QuantScheme::for_method(Quantization::fp8, false), KvCacheDType::auto_dtype},
      {"token", QuantScheme::for_method(Quantization::fp8, true), KvCacheDType::auto_dtype},
  };
  QuantCheckOptions o;
  o.n_positions = 96;
  o.n_sequences = 4;
  o.n_threads = 2;
  ModelWeights plain = ModelWeights::random(testing::small_config(2), 12);
  scale_residual_branches(plain, 0, 0.05f);
  ModelWeights massive = plain;
  o.massive_tokens = add_massive_activations(massive, {4, 2, 1e6f}, 3);
  o.massive_rate = 0.1;
  const std::vector<QuantAccuracy> with = quant_check(massive, variants, o);
  QuantCheckOptions none = o;
  none.massive_tokens.clear();
  none.massive_rate = 0.0;
  const std::vector<QuantAccuracy> without = quant_check(plain, variants, none);
  // Without them the two layouts err alike; with them per-tensor errs several times more.
  EXPECT_LT(without[0].rel_logit_error, 1.5 * without[1].rel_logit_error);
  EXPECT_GT(with[0].rel_logit_error, 3.0 * with[1].rel_logit_error);
  EXPECT_GT(with[0].mean_kl, 5.0 * with[1].mean_kl);
  EXPECT_LT(with[1].rel_logit_error, 1.5 * without[1].rel_logit_error);  // per-token: as before
  EXPECT_LE(with[0].top1_agreement_other, with[1].top1_agreement_other);
}

}  // namespace massive_activations_test
}  // namespace servelab
