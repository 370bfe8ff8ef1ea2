// The residual add and RMSNorm folded into gemv (kernels/gemv_norm.cuh): run_gemv_residual
// stores the residual bits add_rms_norm stores after the product (bit for bit) and leaves the
// row blocks' sums of squares of the new residual; the next product with NormIn (gate|up + SiLU,
// q|k|v + RoPE) gives, from that residual, what the norm kernel's xn followed by the same
// product gives (bf16 tolerance: only the sum of squares' order differs), and its rows do not
// depend on M. Hidden sizes with a partial last row block, K splits, 1-8 rows, bf16 and fp16.
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace gemv_norm_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

class GemvNormGpu : public ::testing::TestWithParam<ScalarType> {};

constexpr float kEps = 1e-5f;

TEST_P(GemvNormGpu, ResidualProductThenNormOnTheLoadMatchesTheNormKernel) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  DeviceBuffer partials(size_t(Gemm::kGemvPartialFloats) * 4), counters(Gemm::kGemvCounters * 4);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  DeviceBuffer ss(size_t(gemv::kMaxRows) * gemv::kNormSsBlocks * 4);
  // (d, k_in): the residual width (the producer's N, the consumer's K) and the producer's K.
  for (const auto& [d, k_in] : {std::pair{256, 512}, std::pair{4096, 1024}, std::pair{1000, 2056}, std::pair{5120, 640}})
    for (int m : {1, 3, 8}) {
      const std::vector<float> w_o = testing::random16(t, size_t(d) * k_in, rng, 0.05f);
      const std::vector<float> x = testing::random16(t, size_t(m) * k_in, rng);
      const std::vector<float> h0 = testing::random16(t, size_t(m) * d, rng);
      const std::vector<float> norm_w = testing::random16(t, d, rng);
      const int ffn = 96;
      const std::vector<float> w_gu = testing::random16(t, size_t(2) * ffn * d, rng, 0.05f);
      DeviceBuffer dwo = testing::upload16(t, w_o), dx = testing::upload16(t, x), dnw = testing::upload16(t, norm_w),
                   dgu = testing::upload16(t, w_gu);
      for (int splits : {1, 3}) {
        SCOPED_TRACE("d " + std::to_string(d) + " K " + std::to_string(k_in) + " M " + std::to_string(m) + " splits " +
                     std::to_string(splits));
        gemv::Plan plan = gemv::make_plan(d, k_in, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
        plan.splits = splits;
        // Folded: the product into h (and ss), then gate|up + SiLU normalizing h on its load.
        DeviceBuffer h = testing::upload16(t, h0), act(size_t(m) * ffn * 2);
        run_gemv_residual(t, dx.get(), dwo.get(), gemv::ResidualOut{h.get(), ss.get<float>()}, m, d, k_in, plan,
                          partials.get<float>(), counters.get<int32_t>(), nullptr);
        gemv::Plan gplan = gemv::make_plan(2 * ffn, d, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
        gplan.splits = splits;
        run_gemv_silu_mul(t, h.get(), dgu.get(), act.get(), m, ffn, d, gplan, partials.get<float>(),
                          counters.get<int32_t>(), nullptr, gemv::NormIn{ss.get<float>(), dnw.get(), kEps});
        // Unfused: the product into a delta, add_rms_norm, gate|up + SiLU on xn.
        DeviceBuffer h2 = testing::upload16(t, h0), delta(size_t(m) * d * 2), xn(size_t(m) * d * 2), act2(act.bytes());
        run_gemv(t, dx.get(), dwo.get(), delta.get(), m, d, k_in, false, false, plan, partials.get<float>(),
                 counters.get<int32_t>(), nullptr);
        add_rms_norm(t, delta.get(), h2.get(), dnw.get(), xn.get(), m, d, kEps, nullptr);
        run_gemv_silu_mul(t, xn.get(), dgu.get(), act2.get(), m, ffn, d, gplan, partials.get<float>(),
                          counters.get<int32_t>(), nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> hb = testing::download<uint16_t>(h, size_t(m) * d);
        EXPECT_EQ(hb, testing::download<uint16_t>(h2, size_t(m) * d)) << "the residual's bits";
        // ss: each row block's sum of squares of the new residual.
        const std::vector<float> hf = testing::download16(t, h, size_t(m) * d);
        const std::vector<float> got_ss = testing::download<float>(ss, size_t(gemv::kMaxRows) * gemv::kNormSsBlocks);
        for (int r = 0; r < m; ++r)
          for (int b = 0; b < (d + 31) / 32; ++b) {
            double want = 0;
            for (int c = b * 32; c < std::min(d, b * 32 + 32); ++c) want += double(hf[size_t(r) * d + c]) * hf[size_t(r) * d + c];
            ASSERT_NEAR(got_ss[size_t(r) * gemv::kNormSsBlocks + b], want, 1e-5 * want + 1e-6) << "row " << r << " block " << b;
          }
        const std::vector<float> a1 = testing::download16(t, act, size_t(m) * ffn), a2 = testing::download16(t, act2, size_t(m) * ffn);
        EXPECT_LT(testing::rel_error(a1, a2), 2 * testing::tolerance(t));
        // The same rows with M = 1: row 0's bits do not depend on M.
        if (m > 1) {
          DeviceBuffer act1(size_t(ffn) * 2);
          run_gemv_silu_mul(t, h.get(), dgu.get(), act1.get(), 1, ffn, d, gplan, partials.get<float>(),
                            counters.get<int32_t>(), nullptr, gemv::NormIn{ss.get<float>(), dnw.get(), kEps});
          const std::vector<uint16_t> one = testing::download<uint16_t>(act1, ffn), all = testing::download<uint16_t>(act, ffn);
          EXPECT_EQ(one, all) << "row 0 with M = 1";
        }
        EXPECT_EQ(testing::download<int32_t>(counters, plan.row_blocks), std::vector<int32_t>(plan.row_blocks, 0));
      }
    }
}

// q|k|v with RoPE and the K/V write normalizing the residual on its load, against the norm
// kernel's xn into the same fused product.
TEST_P(GemvNormGpu, QkvRopeWithTheNormOnTheLoad) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  DeviceBuffer partials(size_t(Gemm::kGemvPartialFloats) * 4), counters(Gemm::kGemvCounters * 4);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  DeviceBuffer ss(size_t(gemv::kMaxRows) * gemv::kNormSsBlocks * 4);
  const int m = 3, d = 512, k_in = 256, heads = 4, kv_heads = 2, hd = 64, n = (heads + 2 * kv_heads) * hd;
  const KvShape shape{16, kv_heads, hd};
  const std::vector<float> w_o = testing::random16(t, size_t(d) * k_in, rng, 0.05f), x = testing::random16(t, size_t(m) * k_in, rng);
  const std::vector<float> h0 = testing::random16(t, size_t(m) * d, rng), norm_w = testing::random16(t, d, rng);
  const std::vector<float> w_qkv = testing::random16(t, size_t(n) * d, rng, 0.05f);
  const std::vector<int32_t> pos = {3, 100, 7};
  const std::vector<int64_t> slots = {1, 5, 9};
  DeviceBuffer dwo = testing::upload16(t, w_o), dx = testing::upload16(t, x), dnw = testing::upload16(t, norm_w),
               dq = testing::upload16(t, w_qkv), dpos = testing::upload(pos), dslots = testing::upload(slots),
               dinv = testing::upload(rope_inv_freq(10000.0f, hd));
  const gemv::Plan plan = gemv::make_plan(d, k_in, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
  const gemv::Plan qplan = gemv::make_plan(n, d, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
  std::vector<std::vector<float>> out;
  for (bool folded : {true, false}) {
    DeviceBuffer h = testing::upload16(t, h0), delta(size_t(m) * d * 2), xn(size_t(m) * d * 2), qkv(size_t(m) * n * 2),
                 kc(size_t(shape.n_slots) * shape.row_elems() * 2), vc(kc.bytes());
    CUDA_CHECK(cudaMemset(kc.get(), 0, kc.bytes()));
    CUDA_CHECK(cudaMemset(vc.get(), 0, vc.bytes()));
    QkvArgs a;
    a.dtype = t;
    a.qkv = qkv.get();
    a.qkv_row_stride = n;
    a.n_tokens = m;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.head_dim = hd;
    a.positions = dpos.get<int32_t>();
    a.inv_freq = dinv.get<float>();
    a.slot_mapping = dslots.get<int64_t>();
    a.k_cache = kc.get();
    a.v_cache = vc.get();
    if (folded) {
      run_gemv_residual(t, dx.get(), dwo.get(), gemv::ResidualOut{h.get(), ss.get<float>()}, m, d, k_in, plan,
                        partials.get<float>(), counters.get<int32_t>(), nullptr);
      run_gemv_rope_kv(a, h.get(), dq.get(), d, qplan, partials.get<float>(), counters.get<int32_t>(), nullptr,
                       gemv::NormIn{ss.get<float>(), dnw.get(), kEps});
    } else {
      run_gemv(t, dx.get(), dwo.get(), delta.get(), m, d, k_in, false, false, plan, partials.get<float>(),
               counters.get<int32_t>(), nullptr);
      add_rms_norm(t, delta.get(), h.get(), dnw.get(), xn.get(), m, d, kEps, nullptr);
      run_gemv_rope_kv(a, xn.get(), dq.get(), d, qplan, partials.get<float>(), counters.get<int32_t>(), nullptr);
    }
    std::vector<float> q = testing::download16(t, qkv, size_t(m) * n);
    q.resize(size_t(heads) * hd);  // row 0's q
    out.push_back(q);
    out.push_back(testing::download16(t, kc, kc.bytes() / 2));
    out.push_back(testing::download16(t, vc, vc.bytes() / 2));
  }
  for (int i = 0; i < 3; ++i) EXPECT_LT(testing::rel_error(out[i], out[3 + i]), 2 * testing::tolerance(t)) << "part " << i;
  // Refused: a folded norm without its weight.
  DeviceBuffer act(64);
  const gemv::Plan p16 = gemv::make_plan(16, d, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
  EXPECT_THROW(run_gemv_silu_mul(t, dnw.get(), dq.get(), act.get(), 1, 8, d, p16, partials.get<float>(),
                                 counters.get<int32_t>(), nullptr, gemv::NormIn{ss.get<float>(), nullptr, kEps}),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemvNormGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace gemv_norm_gpu_test
}  // namespace servelab::kernels
