// quant_check_backends on the cuda backend (what `servelab run` measures for each strategy's formats
// on a GPU): bf16 against itself is exact, every format differs from bf16, 8 bits beat 4, and an FP8
// KV cache alone costs less than FP8 weights. Skipped without a device.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/quant_check.h"
#include "engine/model/quantize_weights.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"

namespace servelab {
namespace quant_check_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

ModelConfig model() { return testing::gpu_test_model("gpu-quant-check", 512); }

BackendMaker cuda_maker(Quantization q, KvCacheDType kv) {
  return [q, kv] {
    CudaBackendOptions o;
    o.quantization = q;
    o.kv_cache_dtype = kv;
    return CudaBackend::random(model(), 31, o);
  };
}

TEST(QuantCheckGpu, CudaFormatsAgainstCudaBf16) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  QuantCheckOptions o;
  o.n_positions = 128;
  o.n_sequences = 8;
  o.seed = 3;
  const ModelConfig c = model();
  const std::vector<BackendVariant> variants = {
      {{"same", QuantScheme{}, KvCacheDType::auto_dtype}, cuda_maker(Quantization::none, KvCacheDType::auto_dtype)},
      {{"fp8", scheme_for_model(Quantization::fp8, c), KvCacheDType::auto_dtype},
       cuda_maker(Quantization::fp8, KvCacheDType::auto_dtype)},
      {{"int4", scheme_for_model(Quantization::int4_awq, c), KvCacheDType::auto_dtype},
       cuda_maker(Quantization::int4_awq, KvCacheDType::auto_dtype)},
      {{"kvfp8", QuantScheme{}, KvCacheDType::fp8}, cuda_maker(Quantization::none, KvCacheDType::fp8)},
  };
  const auto r = quant_check_backends(c, cuda_maker(Quantization::none, KvCacheDType::auto_dtype), variants, o);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].top1_agreement, 1.0);
  EXPECT_EQ(r[0].max_logit_error, 0.0);
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_GT(r[i].mean_kl, 0.0) << r[i].variant.label;
    EXPECT_LT(r[i].rel_logit_error, 0.5) << r[i].variant.label;
    std::printf("%-6s top-1 %.4f  mean KL %.3g  max |d| %.3g  rel %.4f\n", r[i].variant.label.c_str(),
                r[i].top1_agreement, r[i].mean_kl, r[i].max_logit_error, r[i].rel_logit_error);
  }
  EXPECT_LT(r[1].rel_logit_error, r[2].rel_logit_error);  // 8 bits beat 4
  EXPECT_LT(r[3].mean_kl, r[1].mean_kl);                  // K/V alone in FP8 beats every Linear in FP8
}

}  // namespace quant_check_gpu_test
}  // namespace servelab
