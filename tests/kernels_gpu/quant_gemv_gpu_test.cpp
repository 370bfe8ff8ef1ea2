// quant_gemv (FP8 and INT4 weights dequantized in registers) against quant_gemv_ref, each of its
// kernels (warp, mma, stream, steps, packed: INT4 over int4_pack.h's layout, packed on the host by
// pack_int4_fragments_ref) asked for by name: awkward M (1, 3, 16 ...), odd N, K not a multiple
// of 128 (FP8) or longer than one slice, per-tensor and per-channel FP8 scales, INT4 groups of 16
// (the warp-per-row kernel), 128 and 256 (the tensor-core kernels), 384 (not a power of two: steps
// falls back to stream), accumulate, fp32 and bf16
// outputs; without a workspace and with one (split K: deterministic, counters left zeroed, the
// same bits as a second launch); a row's bits independent of M for each kernel; outputs poisoned
// with a guard past their end.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "kernels/quant_gemv.h"
#include "kernels/int4_pack.h"
#include "kernels/int4_quant.h"
#include "kernels/ref/int4_pack_ref.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/quant_gemv_ref.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/quant_gemv_problem.h"

namespace servelab::kernels {
namespace quant_gemv_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;
using testing::QuantProblem;
using testing::QuantWorkspace;
constexpr int kGuard = 64;  // poisoned elements after y: nothing may write there

double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * double(got[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

struct Shape {
  int m, n, k, group;
};

constexpr QuantGemvKernel kKernels[] = {QuantGemvKernel::warp, QuantGemvKernel::mma, QuantGemvKernel::stream,
                                        QuantGemvKernel::steps, QuantGemvKernel::packed};

/// Every awkward shape through `kernel` (where it takes the product; else its fall-back); the steps
/// kernel's knob: steps in flight a warp (0: the format's default); the packed kernel's: its ring's
/// stages (0: the default).
void check_awkward_shapes(QuantGemvKernel kernel, int in_flight = 0, int stages = 0, int vectors = 0) {
  SCOPED_TRACE(std::string("kernel ") + to_string(kernel) + " in flight " + std::to_string(in_flight) + " stages " +
               std::to_string(stages) + " vectors " + std::to_string(vectors));
  std::mt19937_64 rng(42);
  int ran_asked = 0;  // products the asked-for kernel ran (not a fall-back)
  // K = 6016 and 4096 need a split (a slice of x in shared memory holds 2048): without a
  // workspace they take the warp-per-row kernel. Groups of 16 do too.
  const Shape shapes[] = {{1, 17, 48, 16},   {3, 300, 384, 128}, {16, 129, 1024, 128}, {9, 8, 16, 16},
                          {5, 300, 640, 128}, {13, 513, 4096, 256}, {16, 40, 6016, 128}, {8, 1000, 256, 128},
                          // FP8 only (K not a multiple of 128): a partial 64-chunk, slices past 2048
                          {1, 1001, 1040, 128}, {3, 257, 2064, 128}, {16, 33, 4112, 128},
                          // both: llama2-7b's long K (split in several slices), one whole slice
                          {1, 383, 8192, 128}, {3, 129, 11008, 128}, {16, 255, 2048, 128},
                          // INT4 groups not a power of two (steps falls back to stream)
                          {5, 70, 768, 384}};
  double worst_fp8 = 0, worst_int4 = 0;
  for (const Shape& sh : shapes)
    for (bool int4 : {false, true})
      for (bool per_channel : {false, true}) {
        if (int4 && per_channel) continue;  // int4 scales are per group
        if (int4 && sh.k % sh.group) continue;  // groups divide K
        const QuantProblem pr(rng, int4, sh.m, sh.n, sh.k, sh.group, per_channel);
        QuantWorkspace ws(sh.n, sh.k);
        for (bool with_ws : {false, true})
          for (bool accumulate : {false, true}) {
            SCOPED_TRACE("M=" + std::to_string(sh.m) + " N=" + std::to_string(sh.n) + " K=" + std::to_string(sh.k) +
                         (int4 ? " int4/g" + std::to_string(sh.group) : per_channel ? " fp8/channel" : " fp8/tensor") +
                         (with_ws ? " workspace" : "") + (accumulate ? " accumulate" : ""));
            std::uniform_real_distribution<float> pos(0.01f, 0.1f);
            std::vector<float> y0(size_t(sh.m) * sh.n, 0.0f);
            if (accumulate)
              for (float& v : y0) v = pos(rng);
            DeviceBuffer dy((y0.size() + kGuard) * 4);
            dy.poison();
            if (accumulate) CUDA_CHECK(cudaMemcpy(dy.get(), y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
            QuantGemvArgs a = pr.args(dy.get(), false, accumulate);
            a.kernel = kernel;
            a.steps_in_flight = in_flight;
            a.steps_vectors = vectors;
            a.packed_stages = stages;
            if (with_ws) ws.attach(a);
            ran_asked += quant_gemv_kernel_for(a) == kernel;
            quant_gemv(a, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> got = testing::download<float>(dy, y0.size() + kGuard);
            for (size_t i = 0; i < y0.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " unwritten";
            for (int i = 0; i < kGuard; ++i) ASSERT_TRUE(std::isnan(got[y0.size() + i])) << "write past the end";
            const std::vector<float> ref = pr.reference(y0, accumulate);
            const double err = rel_error(got, ref);
            // Every product is exact (bf16 x and dequantized weights, fp32 products); what is left
            // is fp32 summation, whose order and rounding in the tensor cores differ from the
            // reference's double sums. A wrong group, scale or fragment costs percents.
            EXPECT_LT(err, 1e-4);
            if (with_ws) EXPECT_TRUE(ws.counters_zero()) << "split-K counters left set";
            if (!accumulate) {  // a second launch gives the same bits
              quant_gemv(a, nullptr);
              CUDA_CHECK(cudaDeviceSynchronize());
              const std::vector<float> again = testing::download<float>(dy, y0.size());
              EXPECT_EQ(0, std::memcmp(again.data(), got.data(), y0.size() * 4)) << "not deterministic";
            }
            (int4 ? worst_int4 : worst_fp8) = std::max(int4 ? worst_int4 : worst_fp8, err);
          }
      }
  std::printf("  quant_gemv %s%s%s%s against quant_gemv_ref, worst relative error: fp8 %.2e, int4 %.2e (%d products ran it)\n",
              to_string(kernel), in_flight == 0 ? "" : in_flight == 1 ? " (1 in flight)" : " (2 in flight)",
              stages == 0 ? "" : (" (" + std::to_string(stages) + " stages)").c_str(),
              vectors == 0 ? "" : (" (" + std::to_string(vectors) + " vectors)").c_str(), worst_fp8, worst_int4, ran_asked);
  // Most products take the kernel asked for; packed takes INT4 at M <= 8 with K a multiple of 128.
  EXPECT_GT(ran_asked, kernel == QuantGemvKernel::packed ? 18 : 40);
}

TEST(QuantGemvGpu, Fp8AndInt4MatchTheReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  for (QuantGemvKernel kernel : kKernels) check_awkward_shapes(kernel);
  check_awkward_shapes(QuantGemvKernel::steps, 1);
  check_awkward_shapes(QuantGemvKernel::steps, 2);
  for (int vectors : {1, 2})  // INT4's steps of one or two vectors a lane (FP8 ignores it)
    for (int in_flight : {1, 2}) check_awkward_shapes(QuantGemvKernel::steps, in_flight, 0, vectors);
  for (int stages : {2, 3, 4}) check_awkward_shapes(QuantGemvKernel::packed, 0, stages);  // the cp.async ring
}

// bf16 outputs (the cuda backend's) round the fp32 result; and a row's bits do not depend on M (the steps
// kernel at its default and with INT4's vectors a step fixed, 1 and 2).
TEST(QuantGemvGpu, Bf16OutputAndRowsIndependentOfM) {
  SKIP_WITHOUT_GPU();
  for (QuantGemvKernel kernel : kKernels)
    for (int int4_vectors : {-1, 0, 1, 2}) {  // -1: FP8; INT4 with the default (0), 1 or 2 vectors a lane a step
      const bool int4 = int4_vectors >= 0;
      if (kernel == QuantGemvKernel::packed && !int4) continue;  // INT4's layout
      if (kernel != QuantGemvKernel::steps && int4_vectors > 0) continue;
      SCOPED_TRACE(std::string("kernel ") + to_string(kernel) + " vectors " + std::to_string(int4_vectors));
      std::mt19937_64 rng(7);
      const int n = 700, k = 4096;
      const QuantProblem pr(rng, int4, 16, n, k, 128, true);
      QuantWorkspace ws(n, k);
      const int m_all = kernel == QuantGemvKernel::packed ? 8 : 16;  // packed takes up to 8 rows
      DeviceBuffer y16(size_t(16) * n * 2), y_all(size_t(16) * n * 4);
      QuantGemvArgs a = pr.args(y16.get(), true, false);
      a.kernel = kernel;
      a.steps_vectors = std::max(int4_vectors, 0);
      a.m = m_all;
      ws.attach(a);
      EXPECT_EQ(quant_gemv_kernel_for(a), kernel);
      quant_gemv(a, nullptr);
      QuantGemvArgs b = pr.args(y_all.get(), false, false);
      b.kernel = kernel;
      b.steps_vectors = std::max(int4_vectors, 0);
      b.m = m_all;
      ws.attach(b);
      quant_gemv(b, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> all = testing::download<float>(y_all, size_t(m_all) * n);
      const std::vector<uint16_t> got16 = testing::download<uint16_t>(y16, size_t(m_all) * n);
      for (size_t i = 0; i < all.size(); ++i)
        ASSERT_EQ(got16[i], f32_to_bf16(all[i])) << (int4 ? "int4 " : "fp8 ") << i;
      for (int m : {1, 3, 5, 8, 9, 15}) {  // the last row of an M-row product equals that row of the m_all-row one
        if (m >= m_all) continue;
        DeviceBuffer ym(size_t(m) * n * 4);
        QuantGemvArgs c = pr.args(ym.get(), false, false);
        c.kernel = kernel;
        c.steps_vectors = std::max(int4_vectors, 0);
        ws.attach(c);
        c.m = m;
        quant_gemv(c, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> rows = testing::download<float>(ym, size_t(m) * n);
        EXPECT_EQ(0, std::memcmp(rows.data() + size_t(m - 1) * n, all.data() + size_t(m - 1) * n, size_t(n) * 4))
            << (int4 ? "int4" : "fp8") << " M=" << m;
      }
    }
}

// The steps and packed kernels' fused SiLU·mul (the cuda backend's quantized gate|up at up to 16
// rows, packed 8) gives the bits of the same kernel's bf16 product followed by kernels::silu_mul,
// with and without split K, and with either steps-in-flight count, at 1-8 rows and at 9-16 (two
// column tiles); ffn not a multiple of 16 (the last block's clamped rows; the packed kernel takes
// multiples of 16 only).
TEST(QuantGemvGpu, StepsFusedSiluMatchesProductThenSiluMul) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  struct Case {
    int m, ffn, k;
  };
  for (const Case& c : {Case{1, 1000, 4096}, Case{3, 40, 384}, Case{8, 2048, 11008}, Case{5, 1000, 1024}, Case{2, 48, 384},
                        Case{16, 1000, 4096}, Case{11, 40, 384}})  // 9-16 rows: the steps kernel's two column tiles
    for (bool int4 : {false, true})
      for (bool per_channel : {false, true}) {
        if (int4 && per_channel) continue;
        const QuantProblem pr(rng, int4, c.m, 2 * c.ffn, c.k, 128, per_channel);
        QuantWorkspace ws(2 * c.ffn, c.k);
        for (bool with_ws : {false, true})
          for (int in_flight : {1, 2, 0, -1}) {  // 0: the packed kernel (INT4 with ffn a multiple of 16); -1: steps
                                                  // with one vector a lane a step (INT4)
            const QuantGemvKernel kernel = in_flight != 0 ? QuantGemvKernel::steps : QuantGemvKernel::packed;
            if (in_flight == 0 && (!int4 || c.ffn % 16 || c.m > 8)) continue;
            if (in_flight == -1 && !int4) continue;
            SCOPED_TRACE("M=" + std::to_string(c.m) + " FFN=" + std::to_string(c.ffn) + " K=" + std::to_string(c.k) +
                         (int4 ? " int4" : per_channel ? " fp8/channel" : " fp8/tensor") + (with_ws ? " workspace" : "") +
                         " in flight " + std::to_string(in_flight));
            DeviceBuffer gate_up(size_t(c.m) * 2 * c.ffn * 2), want(size_t(c.m) * c.ffn * 2), got(size_t(c.m) * c.ffn * 2);
            QuantGemvArgs a = pr.args(gate_up.get(), true, false);
            a.kernel = kernel;
            a.steps_in_flight = std::max(in_flight, 0);
            a.steps_vectors = in_flight == -1 ? 1 : 0;
            if (with_ws) ws.attach(a);
            quant_gemv(a, nullptr);
            silu_mul(ScalarType::bf16, gate_up.get(), want.get(), c.m, c.ffn, nullptr);
            QuantGemvArgs f = a;
            f.y = got.get();
            f.silu_ffn = c.ffn;
            ASSERT_EQ(quant_gemv_kernel_for(f), kernel);
            quant_gemv(f, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto w16 = testing::download<uint16_t>(want, size_t(c.m) * c.ffn);
            const auto g16 = testing::download<uint16_t>(got, size_t(c.m) * c.ffn);
            for (size_t i = 0; i < w16.size(); ++i) ASSERT_EQ(g16[i], w16[i]) << "output " << i;
            if (with_ws) EXPECT_TRUE(ws.counters_zero());
          }
      }
  // Refused by name where it cannot run: a kernel other than steps and packed, or fp32 output.
  std::mt19937_64 rng2(3);
  const QuantProblem pr(rng2, false, 9, 64, 256, 128, false);
  DeviceBuffer y(size_t(9) * 64 * 4);
  QuantGemvArgs a = pr.args(y.get(), true, false);
  a.silu_ffn = 32;
  a.kernel = QuantGemvKernel::warp;
  EXPECT_THROW(quant_gemv(a, nullptr), std::invalid_argument);
  a.kernel = QuantGemvKernel::auto_select;
  a.m = 8;
  a.out_bf16 = false;
  EXPECT_THROW(quant_gemv(a, nullptr), std::invalid_argument);
}

// The GPU packer gives pack_int4_fragments_ref's bytes (rows past N, groups of 128 and 256), and
// dequantizing the packed layout gives dequantize_int4's bits from the row layout.
TEST(QuantGemvGpu, Int4PackerMatchesTheReferenceAndDequantizesAlike) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(19);
  struct Shape {
    int n, k, group;
  };
  for (const Shape& sh : {Shape{17, 128, 128}, Shape{300, 768, 256}, Shape{64, 1024, 128}}) {
    SCOPED_TRACE("N=" + std::to_string(sh.n) + " K=" + std::to_string(sh.k) + " group " + std::to_string(sh.group));
    const QuantProblem pr(rng, true, 1, sh.n, sh.k, sh.group, false);
    const int4_pack::Layout lay{sh.n, sh.k, sh.group};
    DeviceBuffer codes(size_t(lay.code_bytes())), groups(size_t(lay.group_bytes()));
    codes.poison();
    groups.poison();
    pack_int4_fragments(pr.dw.get<uint8_t>(), pr.ds.get<float>(), pr.dz.get<float>(), sh.n, sh.k, sh.group,
                        codes.get<uint8_t>(), groups.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(testing::download<uint8_t>(codes, pr.packed.codes.size()), pr.packed.codes);
    EXPECT_EQ(testing::download<uint32_t>(groups, pr.packed.groups.size()), pr.packed.groups);
    DeviceBuffer rows(size_t(sh.n) * sh.k * 2), from_packed(size_t(sh.n) * sh.k * 2);
    from_packed.poison();
    dequantize_int4(pr.dw.get<uint8_t>(), pr.ds.get<float>(), pr.dz.get<float>(), sh.n, sh.k, sh.group, rows.get(), nullptr);
    dequantize_int4_packed(codes.get<uint8_t>(), groups.get(), sh.n, sh.k, sh.group, from_packed.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(testing::download<uint16_t>(from_packed, size_t(sh.n) * sh.k),
              testing::download<uint16_t>(rows, size_t(sh.n) * sh.k));
  }
  // Only the packed layout given: a product the packed kernel does not take is refused by name.
  const QuantProblem pr(rng, true, 9, 64, 256, 128, false);
  DeviceBuffer y(size_t(9) * 64 * 4);
  QuantGemvArgs a = pr.args(y.get(), false, false);
  a.w = nullptr;
  a.scales = nullptr;
  a.zeros = nullptr;
  a.kernel = QuantGemvKernel::packed;
  EXPECT_THROW(quant_gemv(a, nullptr), std::invalid_argument);  // m = 9: the steps kernel's
  a.m = 8;
  EXPECT_EQ(quant_gemv_kernel_for(a), QuantGemvKernel::packed);
  quant_gemv(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = testing::download<float>(y, size_t(8) * 64);
  std::vector<float> ref(size_t(8) * 64, 0.0f);
  quant_gemv_ref(true, pr.xf.data(), pr.x_stride, pr.w.data(), pr.scales.data(), pr.zeros.data(), pr.n_scales, 128,
                 ref.data(), 8, 64, 256, false);
  EXPECT_LT(rel_error(got, ref), 1e-4);
}

}  // namespace quant_gemv_gpu_test
}  // namespace servelab::kernels
