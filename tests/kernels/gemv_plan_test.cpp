// The skinny GEMM's host-side parts without a GPU: its fragment layout (a warp step emulated lane
// by lane through the PTX mma.m16n8k16 fragment tables must equal the direct product), its work
// decomposition (make_plan), and the reference gemm_ref with accumulate and rounding.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "kernels/gemv_plan.h"
#include "kernels/ref/ops_ref.h"

namespace servelab::kernels {
namespace {

struct Vec {  // a 16-byte vector as the device's uint4
  uint32_t x = 0, y = 0, z = 0, w = 0;
};

/// 8 consecutive bf16 values at `p`, packed as memory holds them (element 2i in the low half of register i).
Vec load8(const uint16_t* p) {
  uint32_t r[4];
  for (int i = 0; i < 4; ++i) r[i] = uint32_t(p[2 * i]) | (uint32_t(p[2 * i + 1]) << 16);
  return {r[0], r[1], r[2], r[3]};
}

float lo(uint32_t r) { return bf16_to_f32(uint16_t(r & 0xFFFF)); }
float hi(uint32_t r) { return bf16_to_f32(uint16_t(r >> 16)); }

/// mma.m16n8k16.row.col as the PTX ISA tabulates its fragments (groupID g = lane / 4,
/// threadID_in_group q = lane % 4): A a0 (row g, k 2q..2q+1), a1 (row g+8, k 2q..), a2 (row g,
/// k 2q+8..), a3 (row g+8, k 2q+8..); B b0 (k 2q..2q+1, col g), b1 (k 2q+8.., col g);
/// D d0, d1 (row g, cols 2q, 2q+1), d2, d3 (row g+8, cols 2q, 2q+1).
void emulate_mma(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], double (&d)[32][4]) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    const int rows[4] = {g, g + 8, g, g + 8}, ks[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
    for (int r = 0; r < 4; ++r) {
      A[rows[r]][ks[r]] = lo(a[lane][r]);
      A[rows[r]][ks[r] + 1] = hi(a[lane][r]);
    }
    for (int r = 0; r < 2; ++r) {
      B[2 * q + 8 * r][g] = lo(b[lane][r]);
      B[2 * q + 8 * r + 1][g] = hi(b[lane][r]);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * q + i % 2;
      EXPECT_EQ(gemv::acc_row(g, i), row);
      EXPECT_EQ(gemv::acc_col(q, i), col);
      for (int kk = 0; kk < 16; ++kk) d[lane][i] += A[row][kk] * B[kk][col];
    }
  }
}

TEST(GemvLayout, EmulatedWarpStepEqualsTheDirectProduct) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> small(-8, 8);  // integers: every sum is exact in double
  const int m = 8;
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<uint16_t> w(16 * gemv::kStepK), x(m * gemv::kStepK);
    for (auto& v : w) v = f32_to_bf16(float(small(rng)));
    for (auto& v : x) v = f32_to_bf16(float(small(rng)));
    double d[32][4] = {};
    for (int v = 0; v < 2; ++v)
      for (int h = 0; h < 2; ++h) {
        uint32_t a[32][4], b[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4, off = gemv::k_offset(q, v);
          const Vec row_lo = load8(&w[g * gemv::kStepK + off]), row_hi = load8(&w[(g + 8) * gemv::kStepK + off]);
          gemv::frag_a(row_lo, row_hi, h, a[lane]);
          gemv::frag_b(load8(&x[g * gemv::kStepK + off]), h, b[lane]);
        }
        emulate_mma(a, b, d);
      }
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int row = gemv::acc_row(lane / 4, i), col = gemv::acc_col(lane % 4, i);
        double ref = 0.0;
        for (int kk = 0; kk < gemv::kStepK; ++kk)
          ref += double(bf16_to_f32(w[row * gemv::kStepK + kk])) * bf16_to_f32(x[col * gemv::kStepK + kk]);
        EXPECT_EQ(d[lane][i], ref) << "row " << row << " col " << col;
      }
  }
}

TEST(GemvLayout, QuadCoversEachKOffsetOnce) {
  std::vector<int> seen(gemv::kStepK, 0);
  for (int q = 0; q < 4; ++q)
    for (int v = 0; v < 2; ++v)
      for (int e = 0; e < 8; ++e) ++seen[gemv::k_offset(q, v) + e];
  for (int c : seen) EXPECT_EQ(c, 1);
  for (int q = 0; q < 4; ++q)  // the kernel adds a lane's offset and a vector's offset separately
    for (int v = 0; v < 2; ++v) EXPECT_EQ(gemv::k_offset(q, v), gemv::k_offset(q, 0) + gemv::k_offset(0, v));
  // One load instruction (fixed v): each quad reads 64 contiguous bytes.
  for (int v = 0; v < 2; ++v)
    for (int q = 1; q < 4; ++q) EXPECT_EQ(gemv::k_offset(q, v), gemv::k_offset(q - 1, v) + 8);
}

TEST(GemvPlan, Llama2ShapesOnAnH100) {
  const auto plan = [](int n, int k) { return gemv::make_plan(n, k, 132, 2, 8192, int64_t(1) << 20); };
  // QKV, O, gate|up, down, LM head.
  EXPECT_EQ(plan(12288, 4096).splits, 2);
  EXPECT_EQ(plan(4096, 4096).splits, 4);
  EXPECT_EQ(plan(22016, 4096).splits, 1);
  EXPECT_EQ(plan(4096, 11008).splits, 5);
  EXPECT_EQ(plan(32000, 4096).splits, 1);
  const gemv::Plan p = plan(4096, 11008);
  EXPECT_EQ(p.row_blocks, 128);
  EXPECT_EQ(p.k_steps, 172);
  EXPECT_EQ(p.partial_floats(), 128 * 5 * gemv::kPartialFloats);
}

TEST(GemvPlan, SplitsPartitionTheStepsAndRespectTheLimits) {
  for (int n : {1, 17, 896, 4096, 5000, 32000})
    for (int k : {0, 8, 1000, 4096, 4104, 11008}) {
      const gemv::Plan p = gemv::make_plan(n, k, 132, 2, 8192, int64_t(1) << 20);
      EXPECT_EQ(p.row_blocks, (n + 31) / 32);
      EXPECT_EQ(p.k_steps, (k + 63) / 64);
      ASSERT_GE(p.splits, 1);
      EXPECT_LE(p.splits, gemv::kMaxSplits);
      EXPECT_LE(p.partial_floats(), int64_t(1) << 20);
      EXPECT_EQ(p.split_begin(0), 0);
      EXPECT_EQ(p.split_begin(p.splits), p.k_steps);
      for (int s = 0; s < p.splits; ++s) {
        const int len = p.split_begin(s + 1) - p.split_begin(s);
        if (p.splits > 1) {
          EXPECT_GE(len, gemv::kUnroll * gemv::kWarps) << n << " " << k;  // every warp has work
        }
      }
    }
  // Caps: too many row blocks for the counters, or too little room for the partials.
  EXPECT_EQ(gemv::make_plan(64, 11008, 132, 2, 1, int64_t(1) << 20).splits, 1);
  EXPECT_EQ(gemv::make_plan(64, 11008, 132, 2, 8192, 2 * 3 * gemv::kPartialFloats).splits, 3);
  EXPECT_EQ(gemv::make_plan(64, 11008, 132, 2, 8192, 0).splits, 1);
}

TEST(GemmRef, AccumulateAndRound) {
  const std::vector<float> x = {1, 2}, w = {3, 4, 0.5f, 0.25f};  // m 1, k 2, n 2
  std::vector<float> y = {10, 1.0f / 3.0f};
  gemm_ref(x.data(), w.data(), 1, 2, 2, y.data(), true, round_bf16);
  EXPECT_EQ(y[0], 21.0f);
  EXPECT_EQ(y[1], round_bf16(1.0f + 1.0f / 3.0f));
  gemm_ref(x.data(), w.data(), 1, 2, 2, y.data(), false);
  EXPECT_EQ(y, (std::vector<float>{11.0f, 1.0f}));
}

// quant_gemv's steps kernel (kernels/quant_gemv_steps.cu) cuts its products with make_plan_steps:
// FP8 steps of 128 values, INT4 steps of 256, split only while fewer row blocks than one block a
// multiprocessor (132 on an H100 / H200), each warp keeping a pair of steps.
TEST(GemvPlan, QuantStepsPlanForLlama2Shapes) {
  const auto plan = [](int n, int k, int step_k) {
    return gemv::make_plan_steps(n, (k + step_k - 1) / step_k, 132, 1, 8192, int64_t(1) << 22, 1);
  };
  EXPECT_EQ(plan(12288, 4096, 128).splits, 1);  // 384 row blocks: no split
  EXPECT_EQ(plan(4096, 4096, 128).splits, 2);   // 128 row blocks, 32 steps: two slices of 16
  EXPECT_EQ(plan(4096, 11008, 128).splits, 2);  // 86 steps
  EXPECT_EQ(plan(4096, 11008, 128).k_steps, 86);
  EXPECT_EQ(plan(4096, 4096, 256).splits, 1);   // INT4: 16 steps, one pair a warp, nothing to split
  EXPECT_EQ(plan(4096, 11008, 256).splits, 2);  // 43 steps
  const gemv::Plan p = plan(4096, 11008, 256);
  EXPECT_EQ(p.split_begin(1) - p.split_begin(0), 21);
  EXPECT_EQ(p.split_begin(2), 43);
  // Without a workspace nothing is split.
  EXPECT_EQ(gemv::make_plan_steps(4096, 86, 132, 1, 0, 0, 1).splits, 1);
}

}  // namespace
}  // namespace servelab::kernels
