// quant_check_backends: the accuracy check on any backend that computes logits. On the cpu
// backend it gives quant_check's figures exactly; a backend without logits (the sim) is refused
// with a message; the reference against itself agrees everywhere.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/quant_check.h"
#include "engine/backend/sim_backend.h"
#include "engine/model/quantize_weights.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace quant_check_backends_test {

QuantCheckOptions check_options() {
  QuantCheckOptions o;
  o.n_positions = 40;
  o.n_sequences = 4;
  o.n_threads = 2;
  o.seed = 9;
  return o;
}

BackendMaker cpu_backend_maker(std::shared_ptr<const ModelWeights> w, KvCacheDType kv) {
  return [w, kv] { return std::make_unique<CpuBackend>(w, CpuBackendOptions{.n_threads = 2, .kv_cache_dtype = kv}); };
}

TEST(QuantCheckBackends, CpuMakersGiveQuantChecksFigures) {
  const ModelWeights w = ModelWeights::random(testing::small_config(2), 21);
  auto base = std::make_shared<const ModelWeights>(w);
  const QuantScheme fp8 = QuantScheme::for_method(Quantization::fp8, false);
  const std::vector<QuantVariant> variants = {{"fp8", fp8, KvCacheDType::auto_dtype},
                                              {"kvfp8", QuantScheme{}, KvCacheDType::fp8}};
  const std::vector<QuantAccuracy> want = quant_check(w, variants, check_options());
  auto fp8_weights = std::make_shared<const ModelWeights>(quantize_weights(w, fp8));
  const std::vector<QuantAccuracy> got = quant_check_backends(
      w.config, cpu_backend_maker(base, KvCacheDType::auto_dtype),
      {{variants[0], cpu_backend_maker(fp8_weights, KvCacheDType::auto_dtype)}, {variants[1], cpu_backend_maker(base, KvCacheDType::fp8)}},
      check_options());
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].variant.label, want[i].variant.label);
    EXPECT_EQ(got[i].n_positions, 40);
    EXPECT_EQ(got[i].top1_agreement, want[i].top1_agreement) << got[i].variant.label;
    EXPECT_EQ(got[i].mean_kl, want[i].mean_kl) << got[i].variant.label;
    EXPECT_EQ(got[i].max_logit_error, want[i].max_logit_error) << got[i].variant.label;
    EXPECT_EQ(got[i].linear_bytes_per_weight, want[i].linear_bytes_per_weight) << got[i].variant.label;
    EXPECT_GT(got[i].mean_kl, 0.0) << got[i].variant.label;
  }
}

TEST(QuantCheckBackends, TheReferenceAgainstItselfAgreesEverywhere) {
  auto w = std::make_shared<const ModelWeights>(ModelWeights::random(testing::small_config(2), 22));
  const auto r = quant_check_backends(w->config, cpu_backend_maker(w, KvCacheDType::auto_dtype),
                                      {{{"same", QuantScheme{}, KvCacheDType::auto_dtype}, cpu_backend_maker(w, KvCacheDType::auto_dtype)}},
                                      check_options());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].top1_agreement, 1.0);
  EXPECT_EQ(r[0].max_logit_error, 0.0);
  EXPECT_EQ(r[0].linear_bytes_per_weight, 2.0);
}

TEST(QuantCheckBackends, ABackendWithoutLogitsIsRefused) {
  const ModelConfig config = testing::small_config(2);
  const BackendMaker sim = [config] {
    return std::make_unique<SimBackend>(config, SimCostModel::roofline(SimDevice::preset("h100")));
  };
  try {
    quant_check_backends(config, sim, {}, check_options());
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sim computes no logits"), std::string::npos) << e.what();
  }
}

}  // namespace quant_check_backends_test
}  // namespace servelab
