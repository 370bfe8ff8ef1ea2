// The q|k|v product with RoPE and the K/V write in gemv's epilogue (run_gemv_rope_kv,
// Gemm::run_qkv_rope_kv) bit for bit against the unfused sequence (run_gemv into q|k|v, then
// rope_kv_write) and within tolerance of the plain C++ references (gemm_ref, rope_ref,
// kv_write_ref): MHA and GQA, head_dim 32 / 64 / 128, K with a partial last step, K splits, bias,
// a padding row (slot -1) whose K/V must not be written, in bf16 and fp16 storage.
#include <algorithm>
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
#include "tests/kernels_gpu/qkv_args_util.h"

namespace servelab::kernels {
namespace gemv_rope_kv_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

class GemvRopeKvGpu : public ::testing::TestWithParam<ScalarType> {};

/// Columns [first, first + count) of each row of [m, stride].
std::vector<float> columns(const std::vector<float>& y, int m, int stride, int first, int count) {
  std::vector<float> out;
  for (int r = 0; r < m; ++r)
    out.insert(out.end(), y.begin() + size_t(r) * stride + first, y.begin() + size_t(r) * stride + first + count);
  return out;
}

TEST_P(GemvRopeKvGpu, EpilogueGivesTheBitsOfTheProductThenRopeKvWrite) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  DeviceBuffer partials(size_t(Gemm::kGemvPartialFloats) * 8), counters(Gemm::kGemvCounters * 8);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  struct Shape {
    int heads, kv_heads, hd, k;
  };
  // MHA at llama2-7b's head_dim; GQA 4 and 3; head_dim 32 (one block a head); K 72 and 520 with a
  // partial last step.
  for (const Shape& s : {Shape{4, 4, 128, 512}, Shape{8, 2, 64, 520}, Shape{3, 1, 32, 72}, Shape{6, 2, 128, 1024}})
    for (int m : {1, 3, 8, 13, 16})
      for (bool with_bias : {false, true}) {
        const int n = (s.heads + 2 * s.kv_heads) * s.hd;
        const KvShape shape{24, s.kv_heads, s.hd};
        const std::vector<float> w = testing::random16(t, size_t(n) * s.k, rng), x = testing::random16(t, size_t(m) * s.k, rng);
        const std::vector<float> bias = with_bias ? testing::random16(t, n, rng) : std::vector<float>{};
        std::vector<int32_t> pos(m);
        std::vector<int64_t> slots(m);
        std::uniform_int_distribution<int> p(0, 8000);
        for (int r = 0; r < m; ++r) pos[r] = r == 0 ? 0 : p(rng);
        std::iota(slots.begin(), slots.end(), 5);
        if (m > 1) slots[1] = -1;  // a padding row: its K/V never written
        const std::vector<float> inv = rope_inv_freq(10000.0f, s.hd);
        DeviceBuffer dw = testing::upload16(t, w), dx = testing::upload16(t, x), d_bias = testing::upload16(t, bias);
        DeviceBuffer d_pos = testing::upload(pos), d_slots = testing::upload(slots), d_inv = testing::upload(inv);

        // References: the product rounded as stored, bias, RoPE on q and k, K/V into the cache.
        std::vector<float> y(size_t(m) * n);
        gemm_ref(x.data(), w.data(), m, n, s.k, y.data());
        for (size_t i = 0; i < y.size(); ++i)
          y[i] = testing::rounding(t)(testing::rounding(t)(y[i]) + (with_bias ? bias[i % n] : 0.0f));
        std::vector<float> q = columns(y, m, n, 0, s.heads * s.hd), k = columns(y, m, n, s.heads * s.hd, s.kv_heads * s.hd);
        const std::vector<float> v = columns(y, m, n, (s.heads + s.kv_heads) * s.hd, s.kv_heads * s.hd);
        rope_ref(q.data(), m, s.heads, s.hd, pos.data(), inv.data());
        rope_ref(k.data(), m, s.kv_heads, s.hd, pos.data(), inv.data());
        std::vector<float> kc_ref(shape.n_slots * shape.row_elems(), 0.0f), vc_ref = kc_ref;
        kv_write_ref(k.data(), v.data(), m, slots.data(), shape, kc_ref.data(), vc_ref.data());

        const gemv::Plan base = gemv::make_plan(n, s.k, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
        for (int splits : {1, 3, base.splits}) {
          SCOPED_TRACE("heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " hd " +
                       std::to_string(s.hd) + " K " + std::to_string(s.k) + " M " + std::to_string(m) + " splits " +
                       std::to_string(splits) + (with_bias ? " bias" : ""));
          gemv::Plan plan = base;
          plan.splits = std::min(splits, plan.k_steps);
          std::vector<std::vector<float>> got;  // fused, unfused: q, k cache, v cache
          for (bool fused : {true, false}) {
            DeviceBuffer qkv(size_t(m) * n * 2), kc(kc_ref.size() * 2), vc(kc_ref.size() * 2);
            qkv.poison();
            CUDA_CHECK(cudaMemset(kc.get(), 0, kc.bytes()));
            CUDA_CHECK(cudaMemset(vc.get(), 0, vc.bytes()));
            const QkvArgs a = testing::qkv_args(t, qkv.get(), m, {s.heads, s.kv_heads, s.hd},
                                                with_bias ? d_bias.get() : nullptr, d_pos.get<int32_t>(),
                                                d_inv.get<float>(), d_slots.get<int64_t>(), kc.get(), vc.get());
            ASSERT_TRUE(gemv_rope_kv_supported(a, dx.get(), dw.get(), s.k));
            if (fused) {
              run_gemv_rope_kv(a, dx.get(), dw.get(), s.k, plan, partials.get<float>(), counters.get<int32_t>(), nullptr);
            } else {
              run_gemv(t, dx.get(), dw.get(), qkv.get(), m, n, s.k, false, false, plan, partials.get<float>(),
                       counters.get<int32_t>(), nullptr);
              rope_kv_write(a, nullptr);
            }
            CUDA_CHECK(cudaGetLastError());
            got.push_back(columns(testing::download16(t, qkv, size_t(m) * n), m, n, 0, s.heads * s.hd));
            got.push_back(testing::download16(t, kc, kc_ref.size()));
            got.push_back(testing::download16(t, vc, kc_ref.size()));
          }
          for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], got[3 + i]) << "fused vs unfused, part " << i;
          EXPECT_LT(testing::rel_error(got[0], q), testing::tolerance(t));
          EXPECT_LT(testing::rel_error(got[1], kc_ref), testing::tolerance(t));
          EXPECT_LT(testing::rel_error(got[2], vc_ref), testing::tolerance(t));
          const std::vector<int32_t> c = testing::download<int32_t>(counters, plan.row_blocks);
          EXPECT_EQ(c, std::vector<int32_t>(plan.row_blocks, 0)) << "counters must be left zeroed";
        }
      }
}

TEST_P(GemvRopeKvGpu, RefusesWhatTheEpilogueCannotDo) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer x(4096), w(1 << 20), pos(64), inv(512), kc(4096), vc(4096), delta(4096);
  QkvArgs a;
  a.dtype = GetParam();
  a.n_tokens = 1;
  a.n_heads = 2;
  a.n_kv_heads = 1;
  a.head_dim = 64;
  a.qkv_row_stride = 4 * 64;
  a.qkv = x.get();
  a.positions = pos.get<int32_t>();
  a.inv_freq = inv.get<float>();
  a.k_cache = kc.get();
  a.v_cache = vc.get();
  EXPECT_TRUE(gemv_rope_kv_supported(a, x.get(), w.get(), 64));
  QkvArgs b = a;
  b.head_dim = 48;  // RoPE's pairs would straddle a block's 16-row tiles
  b.qkv_row_stride = 4 * 48;
  EXPECT_FALSE(gemv_rope_kv_supported(b, x.get(), w.get(), 64));
  b = a;
  b.qkv_row_stride += 8;  // rows wider than q|k|v
  EXPECT_FALSE(gemv_rope_kv_supported(b, x.get(), w.get(), 64));
  b = a;
  b.delta = delta.get();  // a LoRA delta is rope_kv_write's to add
  EXPECT_FALSE(gemv_rope_kv_supported(b, x.get(), w.get(), 64));
  b = a;
  b.n_tokens = 17;  // more rows than gemv takes
  EXPECT_FALSE(gemv_rope_kv_supported(b, x.get(), w.get(), 64));
  const gemv::Plan plan = gemv::make_plan(4 * 48, 64, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
  b = a;
  b.head_dim = 48;
  b.qkv_row_stride = 4 * 48;
  EXPECT_THROW(run_gemv_rope_kv(b, x.get(), w.get(), 64, plan, nullptr, nullptr, nullptr), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemvRopeKvGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace gemv_rope_kv_gpu_test
}  // namespace servelab::kernels
