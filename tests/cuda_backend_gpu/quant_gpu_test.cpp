// The cuda backend's quantized Linears (issue 26; engine/backend/cuda/quant_linear.h) against the
// cpu backend's dequantized reference on the same weights (quantized on load from the same bf16
// draws): prefill steps (more than 16 rows: FP8 W8A8 through cuBLASLt, INT4 dequantized into the
// bf16 GEMM) against the CPU running the same scheme; decode steps (at most 16 rows: quant_gemv on
// bf16 activations, W8A16; these tests ask for 16, each format's default) against the CPU with the same weights and unquantized activations, in CUDA graphs and
// eagerly; greedy tokens equal except at near ties; the weights' bytes. Skipped without a device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/model/quantize_weights.h"
#include "engine/model/weights.h"
#include "tests/backend/backend_test_util.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"

namespace servelab {
namespace quant_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::make_sequence;
using testing::random_tokens;
using testing::rel_error;

constexpr int64_t kSlots = 2048;
constexpr uint64_t kSeed = 23;

struct Format {
  const char* name;
  Quantization method;
  bool per_channel;
};
const Format kFormats[] = {{"fp8_per_tensor", Quantization::fp8, false},
                           {"fp8_per_channel", Quantization::fp8, true},
                           {"int4_awq", Quantization::int4_awq, false},
                           {"int4_gptq", Quantization::int4_gptq, false}};
std::string format_name(const ::testing::TestParamInfo<Format>& info) { return info.param.name; }

ModelConfig model() { return testing::gpu_test_model("gpu-quant", 512); }

/// The cpu backend on ModelWeights::random quantized under the format's scheme; weight_only
/// leaves the activations unquantized (what quant_gemv computes for decode rows).
std::unique_ptr<CpuBackend> cpu_reference(const Format& f, bool weight_only) {
  QuantScheme s = scheme_for_model(f.method, model(), f.per_channel);
  if (weight_only) s.activations = ActivationQuant::none;
  auto cpu = std::make_unique<CpuBackend>(quantize_weights(ModelWeights::random(model(), kSeed), s),
                                          CpuBackendOptions{.n_threads = 4});
  cpu->init_kv(kSlots);
  return cpu;
}

/// gemv_rows: products of up to this many rows take quant_gemv (W8A16 for fp8); 0 the default.
std::unique_ptr<CudaBackend> gpu_backend(const Format& f, bool graphs = true, int gemv_rows = 0) {
  CudaBackendOptions o;
  o.quantization = f.method;
  o.fp8_per_channel = f.per_channel;
  o.cuda_graphs = graphs;
  o.quant_gemv_max_rows = gemv_rows;
  auto gpu = CudaBackend::random(model(), kSeed, o);
  gpu->init_kv(kSlots);
  return gpu;
}

std::vector<float> cpu_logits(CpuBackend& cpu, const Batch& b, const KvManager& kv) {
  const auto l = cpu.logits(make_step(cpu, b, kv));
  return std::vector<float>(l.begin(), l.end());
}

class QuantGpu : public ::testing::TestWithParam<Format> {};

/// Prefill rows: the quantized GEMM paths against the CPU running the same scheme (W8A8 for fp8).
TEST_P(QuantGpu, PrefillMatchesTheCpuReference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Format f = GetParam();
  auto cpu = cpu_reference(f, false);
  auto gpu = gpu_backend(f);
  auto kv = testing::paged_test_kv(kSlots);
  Sequence a = make_sequence(1, random_tokens(97, 1000, 1));
  Sequence b = make_sequence(2, random_tokens(41, 1000, 2));
  for (Sequence* s : {&a, &b}) s->sampling.max_tokens = 8;
  testing::hold_kv(*kv, a, 50);
  testing::hold_kv(*kv, b, 41);
  Batch first;
  first.entries = {{&a, 50, false}, {&b, 41, true}};
  const std::vector<float> ref1 = cpu_logits(*cpu, first, *kv), got1 = gpu->logits(make_step(*gpu, first, *kv));
  // FP8 activations round to 3 mantissa bits: a value the two backends see a bf16 rounding apart
  // (the GPU's activations are bf16, the CPU's fp32) lands on a neighbouring code now and then, and
  // this untrained 2-layer model amplifies those flips: measured 0.090-0.099 for both FP8 layouts
  // on an H200 (results/gpu/quant/), against 0.010-0.013 for INT4 (weight-only, no flips).
  // The bound catches wrong scales or buffers (errors of order 1), not the subtler difference
  // between W8A8 and W8A16; the activation codes are checked bit for bit in fp8_gemm_gpu_test.cpp.
  const double tol = f.method == Quantization::fp8 ? 0.15 : 3e-2;
  const double err1 = rel_error(got1, ref1);
  EXPECT_LT(err1, tol) << "prefill of 91 rows";
  a.n_computed = 50;
  b.n_computed = 41;
  b.tokens.push_back(5);
  testing::hold_kv(*kv, a, 97);
  testing::hold_kv(*kv, b, 42);
  Batch second;
  second.entries = {{&a, 47, true}, {&b, 1, true}};  // a chunk over a's cached 50, with b's decode
  const std::vector<float> ref2 = cpu_logits(*cpu, second, *kv), got2 = gpu->logits(make_step(*gpu, second, *kv));
  const double err2 = rel_error(got2, ref2);
  EXPECT_LT(err2, tol) << "chunked prefill + decode, 48 rows";
  std::printf("  %s prefill logits, relative error against the cpu reference: %.4f, %.4f\n", f.name, err1, err2);
}

/// Decode rows (at most 16: quant_gemv, bf16 activations) in CUDA graphs and eagerly, against
/// the CPU with the same weights and unquantized activations.
TEST_P(QuantGpu, DecodeMatchesTheWeightOnlyReferenceInGraphsAndEagerly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Format f = GetParam();
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    auto cpu = cpu_reference(f, true);
    auto gpu = gpu_backend(f, graphs, 16);  // every step below has at most 16 rows: all quant_gemv
    auto kv = testing::paged_test_kv(kSlots);
    std::vector<Sequence> seqs;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(make_sequence(10 + i, random_tokens(3 + 4 * i, 1000, 30 + i)));  // 3 + 7 + 11 = 21 rows
      seqs.back().sampling.max_tokens = 16;
    }
    double worst = 0;
    for (int step = 0; step < 8; ++step) {
      Batch b;  // step 0: the first two prompts (10 rows); then decodes of all that have started
      for (size_t i = 0; i < seqs.size(); ++i) {
        Sequence& s = seqs[i];
        if (step == 0 && i == 2) continue;
        if (step == 1 && i == 2) {  // the third prompt joins: 11 + 2 = 13 rows
          testing::hold_kv(*kv, s, s.n_tokens());
          b.entries.push_back({&s, s.n_tokens(), true});
          continue;
        }
        testing::hold_kv(*kv, s, s.n_tokens());
        b.entries.push_back({&s, s.n_tokens() - s.n_computed, true});
      }
      const std::vector<float> ref = cpu_logits(*cpu, b, *kv), got = gpu->logits(make_step(*gpu, b, *kv));
      ASSERT_EQ(got.size(), ref.size());
      const double err = rel_error(got, ref);
      worst = std::max(worst, err);
      EXPECT_LT(err, 3e-2) << "step " << step;
      testing::append_argmax(b, ref, 1000);
    }
    std::printf("  %s decode logits (%s), worst relative error against the weight-only cpu reference: %.4f\n", f.name,
                graphs ? "graphs" : "eager", worst);
  }
}

/// Greedy tokens (the backend's own draws, decode steps replayed from graphs) equal the CPU
/// reference's argmax except at near ties (the bf16 test's definition), teacher-forced with the
/// CPU's token: this random model has many near ties (on an H200 three of the four formats met
/// one within nine tokens, every logit within 1.1% of the reference).
TEST_P(QuantGpu, GreedyTokensAgreeWithTheCpuExceptAtNearTies) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Format f = GetParam();
  auto cpu = cpu_reference(f, true);
  auto gpu = gpu_backend(f, true, 16);
  auto kv = testing::paged_test_kv(kSlots);
  Sequence a = make_sequence(1, random_tokens(12, 1000, 9));
  a.sampling.max_tokens = 24;
  int agreed = 0;
  for (int step = 0; step < 16; ++step) {
    const int n_new = a.n_tokens() - a.n_computed;
    testing::hold_kv(*kv, a, a.n_tokens());
    Batch b;
    b.entries = {{&a, n_new, true}};
    const std::vector<float> ref = cpu_logits(*cpu, b, *kv);
    const StepOutput r = run_batch(*gpu, b, *kv);
    ASSERT_EQ(r.tokens.size(), 1u);
    std::vector<float> sorted = ref;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const TokenId cpu_token = static_cast<TokenId>(std::max_element(ref.begin(), ref.end()) - ref.begin());
    if (r.tokens[0] != cpu_token)  // allowed only where the reference's top-2 gap is within bf16 noise
      EXPECT_LT(sorted[0] - sorted[1], 0.05f * std::max(1.0f, std::fabs(sorted[0]))) << "step " << step;
    else
      ++agreed;
    a.n_computed += n_new;
    a.tokens.push_back(cpu_token);
  }
  EXPECT_GE(agreed, 8) << "of 16";
  std::printf("  %s: %d of 16 greedy tokens agreed\n", f.name, agreed);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantGpu, ::testing::ValuesIn(kFormats), format_name);

TEST(QuantGpuWeights, QuantizedLinearsTakeTheirBytesAndBadCombinationsAreRefused) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t bf16 = CudaBackend::random(model(), kSeed)->weight_bytes();
  const int64_t fp8 = gpu_backend(kFormats[0])->weight_bytes(), int4 = gpu_backend(kFormats[2])->weight_bytes();
  const ModelConfig c = model();
  const int64_t linears = int64_t(c.n_layers) *
                          (int64_t(c.hidden_size) * (c.n_heads + 2 * c.n_kv_heads) * c.head_dim() +
                           int64_t(c.hidden_size) * c.n_heads * c.head_dim() + 3ll * c.hidden_size * c.intermediate_size);
  EXPECT_LT(fp8, bf16 - linears * 9 / 10) << "fp8 saves about a byte a Linear weight";
  EXPECT_LT(int4, fp8 - linears * 4 / 10) << "int4 saves about half a byte more";
  CudaBackendOptions o;
  o.quantization = Quantization::fp8;
  o.batch_invariant = true;
  EXPECT_THROW(CudaBackend::random(model(), kSeed, o), std::invalid_argument);
  o.batch_invariant = false;
  o.dtype = DType::f16;
  EXPECT_THROW(CudaBackend::random(model(), kSeed, o), std::invalid_argument);
}

}  // namespace quant_gpu_test
}  // namespace servelab
