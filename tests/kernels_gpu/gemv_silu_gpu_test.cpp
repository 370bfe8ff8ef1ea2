// The fused gate|up product + SiLU·mul (run_gemv_silu_mul, Gemm::run_gate_up_silu) against its
// plain C++ reference (gate_up_silu_ref) and bit for bit against the unfused sequence (the product
// into a bf16 [m, 2 * ffn] buffer, then silu_mul) on awkward sizes, K splits included; and a chain of
// kernels launched with programmatic dependent launch (norms, gemv, fused gemv) giving the same
// bits with PDL on and off, eagerly and replayed from a CUDA graph.
#include <algorithm>
#include <cmath>
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
namespace gemv_silu_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

std::vector<uint16_t> to_bits(const std::vector<float>& f) {
  std::vector<uint16_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = f32_to_bf16(f[i]);
  return b;
}

constexpr int kGuard = 64;  // poisoned elements after the output: nothing may write there

TEST(GemvSiluGpu, FusedMatchesReferenceAndUnfusedBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  DeviceBuffer partials(size_t(Gemm::kGemvPartialFloats) * 8), counters(Gemm::kGemvCounters * 8);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  // (ffn, k): ffn not a multiple of 16 (a partial last row block), k with a partial last K step.
  const std::vector<std::pair<int, int>> shapes = {{8, 8}, {24, 72}, {1000, 4104}, {11008, 4096}, {17, 11008}};
  for (const auto& [ffn, k] : shapes) {
    const std::vector<float> w = testing::random_bf16(size_t(2) * ffn * k, rng);
    DeviceBuffer dw = testing::upload_bf16(w);
    for (int m : {1, 3, 8, 12, 16}) {
      const std::vector<float> x = testing::random_bf16(size_t(m) * k, rng);
      DeviceBuffer dx = testing::upload_bf16(x);
      std::vector<float> ref(size_t(m) * ffn);
      gate_up_silu_ref(x.data(), w.data(), m, ffn, k, ref.data(), round_bf16);
      const gemv::Plan base = gemv::make_plan(2 * ffn, k, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
      for (int splits : {1, 3, base.splits}) {
        SCOPED_TRACE("M=" + std::to_string(m) + " FFN=" + std::to_string(ffn) + " K=" + std::to_string(k) +
                     " splits " + std::to_string(splits));
        gemv::Plan plan = base;
        plan.splits = splits;
        DeviceBuffer act((size_t(m) * ffn + kGuard) * 2), gate_up(size_t(m) * 2 * ffn * 2), act2(size_t(m) * ffn * 2);
        act.poison();
        act2.poison();
        run_gemv_silu_mul(ScalarType::bf16, dx.get(), dw.get(), act.get(), m, ffn, k, plan, partials.get<float>(),
                          counters.get<int32_t>(), nullptr);
        CUDA_CHECK(cudaGetLastError());
        const bool unfused_runs = ffn % 8 == 0;  // silu_mul takes rows of whole 16-byte vectors
        if (unfused_runs) {
          run_gemv(ScalarType::bf16, dx.get(), dw.get(), gate_up.get(), m, 2 * ffn, k, false, false, plan,
                   partials.get<float>(), counters.get<int32_t>(), nullptr);
          silu_mul(ScalarType::bf16, gate_up.get(), act2.get(), m, ffn, nullptr);
        }
        const std::vector<uint16_t> fused = testing::download<uint16_t>(act, size_t(m) * ffn + kGuard),
                                    unfused = testing::download<uint16_t>(act2, size_t(m) * ffn);
        std::vector<float> got(size_t(m) * ffn);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          got[i] = bf16_to_f32(fused[i]);
          bad += !std::isfinite(got[i]);
        }
        EXPECT_EQ(bad, 0u) << "outputs left unwritten (poison) or not finite";
        for (int i = 0; i < kGuard; ++i) ASSERT_EQ(fused[size_t(m) * ffn + i], 0xFFFF) << "write past the end at " << i;
        if (unfused_runs) {
          EXPECT_TRUE(std::equal(unfused.begin(), unfused.end(), fused.begin())) << "fused bits differ from unfused";
        }
        EXPECT_LT(testing::rel_error(got, ref), testing::kBf16Tolerance);
        const std::vector<int32_t> c = testing::download<int32_t>(counters, plan.row_blocks);
        EXPECT_EQ(c, std::vector<int32_t>(plan.row_blocks, 0)) << "counters must be left zeroed";
      }
    }
  }
}

// gemv's loop variants (Plan::variant: rolling pipeline, L2::256B hint) sum in the same order: the
// same bits as variant 0, and the reference, on shapes with partial steps, few steps per warp and splits.
TEST(GemvSiluGpu, LoopVariantsGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  DeviceBuffer partials(size_t(Gemm::kGemvPartialFloats) * 8), counters(Gemm::kGemvCounters * 8);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  const std::vector<std::pair<int, int>> shapes = {{17, 8}, {100, 4104}, {4096, 1000}, {64, 11008}, {33, 512}};
  for (const auto& [n, k] : shapes) {
    const std::vector<float> w = testing::random_bf16(size_t(n) * k, rng);
    DeviceBuffer dw = testing::upload_bf16(w);
    for (int m : {1, 8, 16}) {
      const std::vector<float> x = testing::random_bf16(size_t(m) * k, rng);
      DeviceBuffer dx = testing::upload_bf16(x), dy(size_t(m) * n * 4);
      std::vector<float> ref(size_t(m) * n);
      gemm_ref(x.data(), w.data(), m, n, k, ref.data());
      for (int splits : {1, 3}) {
        std::vector<float> first;
        for (int variant = 0; variant < 4; ++variant) {
          SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " splits " +
                       std::to_string(splits) + " variant " + std::to_string(variant));
          gemv::Plan plan = gemv::make_plan(n, k, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
          plan.splits = splits;
          plan.variant = variant;
          dy.poison();
          run_gemv(ScalarType::bf16, dx.get(), dw.get(), dy.get(), m, n, k, true, false, plan, partials.get<float>(),
                   counters.get<int32_t>(), nullptr);
          const std::vector<float> got = testing::download<float>(dy, ref.size());
          EXPECT_LT(testing::rel_error(got, ref), 1e-4);
          if (variant == 0) {
            first = got;
          } else {
            EXPECT_EQ(got, first) << "a loop variant changed the bits";
          }
        }
      }
    }
  }
}

TEST(GemvSiluGpu, GemmRoutesTheFusedPath) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int ffn = 11008, k = 4096;  // one unsplit plan on an H100
  const std::vector<float> w = testing::random_bf16(size_t(2) * ffn * k, rng), x = testing::random_bf16(size_t(17) * k, rng);
  DeviceBuffer dw = testing::upload_bf16(w), dx = testing::upload_bf16(x);
  Gemm on(false), unsplit(false, 32u << 20, true, false), off(false, 32u << 20, false), invariant(true);
  EXPECT_TRUE(on.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 8, ffn, k));
  EXPECT_FALSE(on.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 9, ffn, k));  // M > gemv_rows() (8)
  EXPECT_TRUE(on.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 16, ffn, k, true));  // LoRA: two column tiles
  EXPECT_FALSE(on.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 17, ffn, k, true));  // M > 16
  EXPECT_FALSE(off.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 1, ffn, k));
  EXPECT_FALSE(invariant.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 1, ffn, k));
  EXPECT_EQ(unsplit.fuses_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), 1, ffn, k),
            unsplit.gemv_plan(2 * ffn, k).splits == 1);
  // waves = 0 (the backend's setting): K split only for fewer row blocks than half the multiprocessors.
  int device = 0, n_sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
  Gemm waves0(false);
  waves0.set_gemv_waves(0);
  for (int n : {896, 4096, 12288, 22016})
    for (int kk : {896, 4096, 11008}) {
      const gemv::Plan p = waves0.gemv_plan(n, kk);
      if (p.row_blocks >= n_sms / 2) {
        EXPECT_EQ(p.splits, 1) << n << " x " << kk;
      }
      EXPECT_LE(int64_t(p.row_blocks) * (p.splits - 1), n_sms / 2) << n << " x " << kk;
    }
  DeviceBuffer act(size_t(ffn) * 2);
  EXPECT_THROW(off.run_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), act.get(), 1, ffn, k, nullptr),
               std::logic_error);
  act.poison();
  on.run_gate_up_silu(ScalarType::bf16, dx.get(), dw.get(), act.get(), 1, ffn, k, nullptr);
  std::vector<float> ref(ffn);
  gate_up_silu_ref(x.data(), w.data(), 1, ffn, k, ref.data(), round_bf16);
  EXPECT_LT(testing::rel_error(testing::download_bf16(act, ffn), ref), testing::kBf16Tolerance);
}

/// A decode layer's chain at M = 3 on `stream`: add_rms_norm, gemv (split K), add_rms_norm, fused
/// gate|up + SiLU, gemv (down), repeated `layers` times, each kernel reading its predecessor's output.
struct Chain {
  static constexpr int m = 3, d = 1024, ffn = 2816, layers = 4;
  DeviceBuffer wo, wgu, wdown, norm_w, h, delta, xn, act;
  Gemm gemm{false};
  explicit Chain(std::mt19937_64& rng)
      : wo(testing::upload_bf16(testing::random_bf16(size_t(d) * d, rng, 0.05f))),
        wgu(testing::upload_bf16(testing::random_bf16(size_t(2) * ffn * d, rng, 0.05f))),
        wdown(testing::upload_bf16(testing::random_bf16(size_t(d) * ffn, rng, 0.05f))),
        norm_w(testing::upload_bf16(testing::random_bf16(d, rng))),
        h(size_t(m) * d * 2),
        delta(size_t(m) * d * 2),
        xn(size_t(m) * d * 2),
        act(size_t(m) * ffn * 2) {}
  void enqueue(cudaStream_t s) {
    for (int l = 0; l < layers; ++l) {
      add_rms_norm(ScalarType::bf16, delta.get(), h.get(), norm_w.get(), xn.get(), m, d, 1e-5f, s);
      gemm.run(ScalarType::bf16, xn.get(), wo.get(), delta.get(), m, d, d, false, s);
      add_rms_norm(ScalarType::bf16, delta.get(), h.get(), norm_w.get(), xn.get(), m, d, 1e-5f, s);
      gemm.run_gate_up_silu(ScalarType::bf16, xn.get(), wgu.get(), act.get(), m, ffn, d, s);
      gemm.run(ScalarType::bf16, act.get(), wdown.get(), delta.get(), m, d, ffn, false, s);
    }
  }
  /// Resets h and delta to the given inputs, runs the chain (eagerly, or by replaying `exec`), returns h.
  std::vector<uint16_t> run(const std::vector<uint16_t>& h0, const std::vector<uint16_t>& d0, cudaStream_t s,
                            cudaGraphExec_t exec) {
    CUDA_CHECK(cudaMemcpyAsync(h.get(), h0.data(), h0.size() * 2, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(delta.get(), d0.data(), d0.size() * 2, cudaMemcpyHostToDevice, s));
    if (exec) CUDA_CHECK(cudaGraphLaunch(exec, s));
    else enqueue(s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    return testing::download<uint16_t>(h, h0.size());
  }
};

TEST(PdlGpu, ChainGivesTheSameBitsWithAndWithoutPdlEagerAndInAGraph) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const bool was = pdl_enabled();
  Chain c(rng);
  const std::vector<uint16_t> h0 = to_bits(testing::random_bf16(size_t(Chain::m) * Chain::d, rng)),
                              d0 = to_bits(testing::random_bf16(size_t(Chain::m) * Chain::d, rng));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  set_pdl_enabled(false);
  const std::vector<uint16_t> want = c.run(h0, d0, s, nullptr);
  set_pdl_enabled(true);
  for (int rep = 0; rep < 3; ++rep) EXPECT_EQ(c.run(h0, d0, s, nullptr), want) << "eager with PDL, run " << rep;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  c.enqueue(s);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) EXPECT_EQ(c.run(h0, d0, s, exec), want) << "graph with PDL, replay " << rep;
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(s));
  set_pdl_enabled(was);
  size_t non_finite = 0;
  for (uint16_t b : want) non_finite += !std::isfinite(bf16_to_f32(b));
  EXPECT_EQ(non_finite, 0u);
}

}  // namespace gemv_silu_gpu_test
}  // namespace servelab::kernels
