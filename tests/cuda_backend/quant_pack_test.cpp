// A quantized checkpoint's Linears packed into the cuda backend's layouts (engine/backend/cuda/
// quant_pack.h), without a GPU: every packed weight, dequantized by the kernels' layout rules,
// equals the checkpoint matrices' own dequantization (servelab::dequantize) at its fused row; FP8
// per-tensor scales repeat over their matrix's rows; what the GPU does not run is refused by name.
#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/quant_pack.h"
#include "engine/model/config.h"
#include "engine/model/fp8.h"
#include "engine/model/quant.h"

namespace servelab::cuda {
namespace quant_pack_test {  // named, not anonymous: a unity batch shares one translation unit

std::vector<float> random_matrix(int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(size_t(out * in));
  for (float& v : w) v = n(rng);
  return w;
}

/// The value the device layout stands for at fused row o, input k.
float packed_value(const PackedQuantLinear& p, int64_t o, int64_t k) {
  if (p.kind == QuantLinear::Kind::fp8_e4m3) return fp8_e4m3_to_f32(p.codes[size_t(o * p.in + k)]) * p.scales[size_t(o)];
  const uint8_t byte = p.codes[size_t(o * (p.in / 2) + k / 2)];
  const int q = k % 2 == 0 ? byte & 0xF : byte >> 4;
  const int64_t g = k / p.group_size;
  return (float(q) - p.zeros[size_t(g * p.out + o)]) * p.scales[size_t(g * p.out + o)];
}

void expect_same_values(const PackedQuantLinear& p, const std::vector<const QuantLinear*>& parts) {
  int64_t row0 = 0;
  for (const QuantLinear* q : parts) {
    const std::vector<float> want = dequantize(*q);
    for (int64_t o = 0; o < q->out; ++o)
      for (int64_t i = 0; i < q->in; ++i) {  // position i: input channel perm[i] with an act order
        const int64_t k = p.perm.empty() ? i : p.perm[size_t(i)];
        ASSERT_EQ(packed_value(p, row0 + o, i), want[size_t(o * q->in + k)]) << "row " << row0 + o << " position " << i;
      }
    row0 += q->out;
  }
  EXPECT_EQ(row0, p.out);
}

TEST(QuantPack, Fp8PerTensorScalesRepeatOverTheirRows) {
  const auto wq = random_matrix(32, 64, 1), wk = random_matrix(16, 64, 2), wv = random_matrix(16, 64, 3);
  const QuantLinear q = quantize_fp8(wq.data(), 32, 64, Fp8WeightScales::per_tensor);
  const QuantLinear k = quantize_fp8(wk.data(), 16, 64, Fp8WeightScales::per_tensor);
  const QuantLinear v = quantize_fp8(wv.data(), 16, 64, Fp8WeightScales::per_tensor);
  const PackedQuantLinear p = pack_quant_linear({&q, &k, &v});
  EXPECT_EQ(p.out, 64);
  EXPECT_EQ(p.in, 64);
  EXPECT_FALSE(p.uniform_scales);  // three matrices, three scales
  EXPECT_EQ(p.scales[0], q.scales[0]);
  EXPECT_EQ(p.scales[32], k.scales[0]);
  EXPECT_EQ(p.scales[63], v.scales[0]);
  expect_same_values(p, {&q, &k, &v});
  EXPECT_TRUE(pack_quant_linear({&q}).uniform_scales);
}

TEST(QuantPack, Fp8PerChannelScalesConcatenate) {
  const auto wg = random_matrix(24, 48, 4), wu = random_matrix(24, 48, 5);
  const QuantLinear g = quantize_fp8(wg.data(), 24, 48, Fp8WeightScales::per_channel);
  const QuantLinear u = quantize_fp8(wu.data(), 24, 48, Fp8WeightScales::per_channel);
  const PackedQuantLinear p = pack_quant_linear({&g, &u});
  EXPECT_FALSE(p.uniform_scales);
  expect_same_values(p, {&g, &u});
}

TEST(QuantPack, Int4NibblesAndGroupRowsInterleaveTheMatrices) {
  for (bool symmetric : {false, true}) {
    SCOPED_TRACE(symmetric ? "gptq (symmetric)" : "awq (asymmetric)");
    const auto wa = random_matrix(16, 256, 6), wb = random_matrix(8, 256, 7);
    const QuantLinear a = quantize_int4(wa.data(), 16, 256, 128, symmetric);
    const QuantLinear b = quantize_int4(wb.data(), 8, 256, 128, symmetric);
    const PackedQuantLinear p = pack_quant_linear({&a, &b});
    EXPECT_EQ(p.codes.size(), size_t(24 * 128));
    EXPECT_EQ(p.scales.size(), size_t(2 * 24));
    expect_same_values(p, {&a, &b});
  }
}

// Static FP8 activation scales: a fused Linear takes the largest of its matrices' input scales
// (one input, one scale), as the cpu backend's QuantScheme::input_scales does.
TEST(QuantPack, Fp8StaticInputScalesTakeTheFusedLinearsLargest) {
  const auto wq = random_matrix(16, 64, 11), wk = random_matrix(8, 64, 12);
  QuantLinear q = quantize_fp8(wq.data(), 16, 64, Fp8WeightScales::per_tensor);
  QuantLinear k = quantize_fp8(wk.data(), 8, 64, Fp8WeightScales::per_tensor);
  q.input_scale = 0.25f;
  k.input_scale = 0.75f;
  EXPECT_EQ(pack_quant_linear({&q, &k}).input_scale, 0.75f);
  EXPECT_EQ(pack_quant_linear({&q}).input_scale, 0.25f);
  q.input_scale = k.input_scale = 0.0f;
  EXPECT_EQ(pack_quant_linear({&q, &k}).input_scale, 0.0f);  // dynamic
}

// GPTQ's act order: the packed positions are the input channels sorted by group (a group's
// channels contiguous, in channel order), the codes moved with them; a fused q|k|v takes one
// order for all three (as GPTQ's shared Hessian gives them).
TEST(QuantPack, ActOrderInt4PacksEachGroupsChannelsTogether) {
  const int in = 384, group = 128;
  std::vector<int32_t> g_idx(in);
  std::mt19937_64 rng(21);
  for (int k = 0; k < in; ++k) g_idx[size_t(k)] = k % 3;  // groups interleaved: 0, 1, 2, 0, 1, 2, ...
  std::shuffle(g_idx.begin(), g_idx.end(), rng);
  const auto wq = random_matrix(24, in, 4), wk = random_matrix(8, in, 5);
  const QuantLinear q = quantize_int4(wq.data(), 24, in, group, true, g_idx);
  const QuantLinear k = quantize_int4(wk.data(), 8, in, group, true, g_idx);
  const PackedQuantLinear p = pack_quant_linear({&q, &k});
  ASSERT_EQ(p.perm.size(), size_t(in));
  for (int i = 0; i < in; ++i) {
    EXPECT_EQ(g_idx[size_t(p.perm[size_t(i)])], i / group) << "position " << i;
    if (i % group) EXPECT_LT(p.perm[size_t(i - 1)], p.perm[size_t(i)]) << "a group's channels in order";
  }
  expect_same_values(p, {&q, &k});
  // The trivial order (k / group) packs as no order at all.
  std::vector<int32_t> plain(in);
  for (int c = 0; c < in; ++c) plain[size_t(c)] = c / group;
  const QuantLinear ordered = quantize_int4(wq.data(), 24, in, group, true, plain);
  EXPECT_TRUE(pack_quant_linear({&ordered}).perm.empty());
}

TEST(QuantPack, AnActOrderDownPutsGateUpsRowsInItsOrder) {
  // Down's act order is taken by the product before SiLU·mul: gate's and up's rows in down's order,
  // so SiLU·mul writes down's input as its codes hold it and down gathers nothing.
  const int hidden = 256, ffn = 384, group = 128;
  std::vector<int32_t> g_idx(ffn);
  std::mt19937_64 rng(23);
  for (int k = 0; k < ffn; ++k) g_idx[size_t(k)] = k % 3;
  std::shuffle(g_idx.begin(), g_idx.end(), rng);
  std::vector<QuantLinear> linears;
  const int64_t shapes[7][2] = {{hidden, hidden}, {64, hidden}, {64, hidden}, {hidden, hidden},
                                {ffn, hidden},    {ffn, hidden}, {hidden, ffn}};
  for (int j = 0; j < 7; ++j) {
    const auto w = random_matrix(shapes[j][0], shapes[j][1], 30 + uint64_t(j));
    linears.push_back(quantize_int4(w.data(), shapes[j][0], shapes[j][1], group, true,
                                    j == 6 ? g_idx : std::vector<int32_t>{}));
  }
  ModelConfig c;
  c.n_layers = 1;
  const std::vector<PackedQuantLayer> layers = pack_quant_layers(c, linears);
  const PackedQuantLinear &gate_up = layers[0][2], &down = layers[0][3];
  const std::vector<int32_t> order = pack_quant_linear({&linears[6]}).perm;  // down's act order
  ASSERT_EQ(order.size(), size_t(ffn));
  EXPECT_TRUE(down.perm.empty()) << "down gathers nothing";
  EXPECT_EQ(gate_up.row_order, order);
  for (int half = 0; half < 2; ++half) {
    const std::vector<float> want = dequantize(linears[4 + size_t(half)]);
    for (int i = 0; i < ffn; ++i)
      for (int k = 0; k < hidden; ++k)
        ASSERT_EQ(packed_value(gate_up, int64_t(half) * ffn + i, k), want[size_t(int64_t(order[size_t(i)]) * hidden + k)])
            << (half ? "up" : "gate") << " row " << i;
  }
  const std::vector<float> want_down = dequantize(linears[6]);
  for (int o = 0; o < hidden; ++o)  // position i holds FFN channel order[i], as SiLU·mul now writes it
    for (int i = 0; i < ffn; ++i)
      ASSERT_EQ(packed_value(down, o, i), want_down[size_t(int64_t(o) * ffn + order[size_t(i)])]) << "down row " << o;
  // Without an act order on down nothing moves.
  linears[6] = quantize_int4(random_matrix(hidden, ffn, 36).data(), hidden, ffn, group, true);
  EXPECT_TRUE(pack_quant_layers(c, linears)[0][2].row_order.empty());
}

TEST(QuantPack, RefusesWhatTheGpuDoesNotRun) {
  const auto w = random_matrix(16, 256, 8);
  QuantLinear ordered = quantize_int4(w.data(), 16, 256, 128, true);
  ordered.g_idx.assign(256, 0);
  for (int k = 0; k < 256; ++k) ordered.g_idx[size_t(k)] = k / 128;
  auto refused_for = [](const std::vector<const QuantLinear*>& parts, const std::string& why) {
    try {
      pack_quant_linear(parts);
      ADD_FAILURE() << "taken; expected a refusal naming '" << why << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  QuantLinear uneven = ordered;  // group 0 holds 127 inputs, group 1 129
  uneven.g_idx[0] = 1;
  refused_for({&uneven}, "groups of exactly 128");
  QuantLinear outside = ordered;
  outside.g_idx[5] = 2;
  EXPECT_THROW(pack_quant_linear({&outside}), std::invalid_argument);  // QuantLinear::validate's
  QuantLinear swapped = ordered;  // a valid act order, but not q's
  std::swap(swapped.g_idx[0], swapped.g_idx[200]);
  EXPECT_NO_THROW(pack_quant_linear({&swapped}));
  refused_for({&ordered, &swapped}, "order their input differently");
  QuantLinear fp8 = quantize_fp8(w.data(), 16, 256, Fp8WeightScales::per_channel);
  const QuantLinear dynamic = fp8;
  fp8.input_scale = 0.5f;
  refused_for({&fp8, &dynamic}, "mix static and dynamic");
  const auto narrow = random_matrix(16, 128, 9);
  const QuantLinear other = quantize_int4(narrow.data(), 16, 128, 128, true);
  const QuantLinear int4 = quantize_int4(w.data(), 16, 256, 128, true);
  EXPECT_THROW(pack_quant_linear({&int4, &other}), std::invalid_argument);  // inputs differ
  ModelConfig c;
  c.n_layers = 2;
  EXPECT_THROW(pack_quant_layers(c, std::vector<QuantLinear>(7)), std::invalid_argument);  // 7 for 2 layers
}

}  // namespace quant_pack_test
}  // namespace servelab::cuda
