// quant_gemv's steps kernel with the q|k|v epilogue (QuantGemvArgs::rope: RoPE and the K/V write,
// kernels/gemv_rope_kv.cuh) bit for bit against the product stored in bf16 then rope_kv_write:
// FP8 (per tensor and per channel) and INT4, MHA and GQA, head_dim 64 / 128, 1-8 rows and 9-16
// (the steps kernel's second column tile), with and without split K, bias, a padding row whose
// K/V must not be written; and refused by name off the steps kernel or with fp32 output.
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/qkv_args_util.h"
#include "tests/kernels_gpu/quant_gemv_problem.h"

namespace servelab::kernels {
namespace quant_gemv_rope_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;
using testing::QuantProblem;
using testing::QuantWorkspace;

TEST(QuantGemvRopeGpu, StepsEpilogueGivesTheBitsOfTheProductThenRopeKvWrite) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  struct Case {
    int m, heads, kv_heads, hd, k;
  };
  for (const Case& c : {Case{1, 4, 4, 128, 512}, Case{3, 8, 2, 64, 384}, Case{8, 6, 2, 128, 1024}, Case{12, 4, 1, 64, 256}})
    for (bool int4 : {false, true})
      for (bool per_channel : {false, true}) {
        if (int4 && per_channel) continue;
        const int n = (c.heads + 2 * c.kv_heads) * c.hd;
        const QuantProblem pr(rng, int4, c.m, n, c.k, 128, per_channel);
        const KvShape shape{32, c.kv_heads, c.hd};
        std::vector<int32_t> pos(c.m);
        std::vector<int64_t> slots(c.m);
        std::uniform_int_distribution<int> p(0, 4000);
        for (int r = 0; r < c.m; ++r) pos[r] = p(rng);
        std::iota(slots.begin(), slots.end(), 2);
        if (c.m > 2) slots[2] = -1;  // a padding row: its K/V never written
        const std::vector<float> bias = testing::random16(ScalarType::bf16, n, rng);
        DeviceBuffer d_pos = testing::upload(pos), d_slots = testing::upload(slots);
        DeviceBuffer d_inv = testing::upload(rope_inv_freq(10000.0f, c.hd)), d_bias = testing::upload16(ScalarType::bf16, bias);
        QuantWorkspace ws(n, c.k);
        for (bool with_ws : {false, true})
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE("M=" + std::to_string(c.m) + " heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                         " hd " + std::to_string(c.hd) + (int4 ? " int4" : per_channel ? " fp8/channel" : " fp8/tensor") +
                         (with_ws ? " workspace" : "") + (with_bias ? " bias" : ""));
            std::vector<std::vector<uint16_t>> got;  // fused, unfused: q|k|v's q, k cache, v cache
            for (bool fused : {true, false}) {
              DeviceBuffer qkv(size_t(c.m) * n * 2), kc(size_t(shape.n_slots) * shape.row_elems() * 2), vc(kc.bytes());
              qkv.poison();
              CUDA_CHECK(cudaMemset(kc.get(), 0, kc.bytes()));
              CUDA_CHECK(cudaMemset(vc.get(), 0, vc.bytes()));
              const QkvArgs qa = testing::qkv_args(ScalarType::bf16, qkv.get(), c.m, {c.heads, c.kv_heads, c.hd},
                                                   with_bias ? d_bias.get() : nullptr, d_pos.get<int32_t>(),
                                                   d_inv.get<float>(), d_slots.get<int64_t>(), kc.get(), vc.get());
              QuantGemvArgs a = pr.args(qkv.get(), true, false);
              a.kernel = QuantGemvKernel::steps;
              if (with_ws) ws.attach(a);
              if (fused) {
                a.rope = gemv_rope_kv_params(qa);
                quant_gemv(a, nullptr);
              } else {
                quant_gemv(a, nullptr);
                rope_kv_write(qa, nullptr);
              }
              CUDA_CHECK(cudaDeviceSynchronize());
              std::vector<uint16_t> q;
              const std::vector<uint16_t> all = testing::download<uint16_t>(qkv, size_t(c.m) * n);
              for (int r = 0; r < c.m; ++r)
                q.insert(q.end(), all.begin() + size_t(r) * n, all.begin() + size_t(r) * n + c.heads * c.hd);
              got.push_back(q);
              got.push_back(testing::download<uint16_t>(kc, kc.bytes() / 2));
              got.push_back(testing::download<uint16_t>(vc, vc.bytes() / 2));
            }
            for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], got[3 + i]) << "fused vs unfused, part " << i;
            if (with_ws) EXPECT_TRUE(ws.counters_zero());
          }
      }
  // Refused by name: another kernel, fp32 output.
  const QuantProblem pr(rng, false, 1, 4 * 64, 256, 128, false);
  DeviceBuffer y(size_t(4) * 64 * 4), kc(1 << 16), vc(1 << 16), pos(64), inv(256);
  QuantGemvArgs a = pr.args(y.get(), true, false);
  a.rope.positions = pos.get<int32_t>();
  a.rope.inv_freq = inv.get<float>();
  a.rope.k_cache = kc.get();
  a.rope.v_cache = vc.get();
  a.rope.n_heads = 2;
  a.rope.n_kv_heads = 1;
  a.rope.head_dim = 64;
  a.kernel = QuantGemvKernel::stream;
  EXPECT_THROW(quant_gemv(a, nullptr), std::invalid_argument);
  a.kernel = QuantGemvKernel::steps;
  a.out_bf16 = false;
  EXPECT_THROW(quant_gemv(a, nullptr), std::invalid_argument);
}

}  // namespace quant_gemv_rope_gpu_test
}  // namespace servelab::kernels
