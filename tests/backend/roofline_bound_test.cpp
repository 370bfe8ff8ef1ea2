// roofline_bound: a step's FLOPs and bytes equal the hand count for a model small enough to count
// by hand, and roofline_seconds is that bound plus its extra terms, to the bit (the sim prices
// with roofline_seconds; the runs' efficiency with the bound alone).
#include <gtest/gtest.h>

#include "engine/backend/cost_model.h"
#include "tests/backend/roofline_hand_model.h"

namespace servelab {
namespace roofline_bound_test {  // named: a unity batch shares one translation unit

using roofline_test::hand_model;

/// 1 GFLOP/s, 1 GB/s, fp32 weights and K/V: seconds are FLOPs or bytes in units of 1e-9.
SimDevice hand_device() {
  SimDevice d = SimDevice::preset("cpu-2core");
  d.peak_flops = 1e9;
  d.mem_bw_bytes_s = 1e9;
  return d;
}

// Per layer: q 8·8, k and v 8·4 each, o 8·8, gate/up/down 3·8·16 = 576 Linear parameters, plus
// two norms of 8. The layers and the final norm: 2·592 + 8 = 1,192 parameters every row
// multiplies through (1,152 of them in Linears); the LM head is 8·32 = 256.
constexpr double kLayerParams = 1192, kLmHead = 256;
// K and V of one token: 2 · 2 layers · 4 (one KV head of 4) · 4 bytes = 64 bytes.
constexpr double kKvSlotBytes = 64;
// Attention FLOPs per (query, key) pair: 4 · 2 layers · 2 heads · 4 = 64.
constexpr double kPairFlops = 64;

TEST(RooflineBound, DecodeStepEqualsHandCount) {
  const ModelConfig m = hand_model();
  const SimDevice d = hand_device();
  // Three sequences each decoding one token, contexts 10, 20 and 30 after the step.
  StepShape s;
  s.n_tokens = 3;
  s.n_sampled = 3;
  s.n_seqs = 3;
  s.sum_context = 60;
  s.max_context = 30;
  s.attention_pairs = 60;
  s.decode_context = 60;
  const RooflineBound b = roofline_bound(RooflineTerms::of(m, d, 1), s);
  // 2·1192·3 products + 2·256·3 LM head + 64·60 attention = 7,152 + 1,536 + 3,840.
  EXPECT_DOUBLE_EQ(b.flops, 2 * kLayerParams * 3 + 2 * kLmHead * 3 + kPairFlops * 60);
  EXPECT_DOUBLE_EQ(b.flops, 12528.0);
  // Weights once, LM head included: (1192 + 256) · 4 = 5,792; K/V read for 60 and written for 3.
  EXPECT_DOUBLE_EQ(b.bytes, (kLayerParams + kLmHead) * 4 + kKvSlotBytes * 63);
  EXPECT_DOUBLE_EQ(b.bytes, 9824.0);
  EXPECT_DOUBLE_EQ(b.compute_s, 12528e-9);
  EXPECT_DOUBLE_EQ(b.memory_s, 9824e-9);
  EXPECT_DOUBLE_EQ(b.seconds(), 12528e-9);  // this tiny step is compute bound at 1 FLOP/byte
}

TEST(RooflineBound, PrefillWithoutSamplingSkipsTheLmHead) {
  const ModelConfig m = hand_model();
  const SimDevice d = hand_device();
  // One 16-token prompt chunk from position 0, nothing sampled: 16·17/2 = 136 pairs.
  StepShape s;
  s.n_tokens = 16;
  s.n_seqs = 1;
  s.sum_context = 16;
  s.max_context = 16;
  s.attention_pairs = 136;
  s.prefill_pairs = 136;
  const RooflineBound b = roofline_bound(RooflineTerms::of(m, d, 1), s);
  EXPECT_DOUBLE_EQ(b.flops, 2 * kLayerParams * 16 + kPairFlops * 136);
  EXPECT_DOUBLE_EQ(b.bytes, kLayerParams * 4 + kKvSlotBytes * 32);
}

TEST(RooflineBound, TensorParallelSplitsTheTimesNotTheCounts) {
  ModelConfig m = hand_model();
  m.n_kv_heads = 2;
  const SimDevice d = hand_device();
  StepShape s;
  s.n_tokens = 4;
  s.n_sampled = 4;
  s.n_seqs = 4;
  s.sum_context = 40;
  s.max_context = 10;
  s.attention_pairs = 40;
  s.decode_context = 40;
  const RooflineBound one = roofline_bound(RooflineTerms::of(m, d, 1), s);
  const RooflineBound two = roofline_bound(RooflineTerms::of(m, d, 2), s);
  EXPECT_DOUBLE_EQ(two.flops, one.flops);
  EXPECT_DOUBLE_EQ(two.bytes, one.bytes);
  EXPECT_DOUBLE_EQ(two.compute_s, one.compute_s / 2);
  EXPECT_DOUBLE_EQ(two.memory_s, one.memory_s / 2);
}

TEST(RooflineBound, RooflineSecondsIsTheBoundPlusItsExtraTermsToTheBit) {
  const ModelConfig m = hand_model();
  for (const char* name : {"h100", "cpu-2core"}) {
    const SimDevice d = SimDevice::preset(name);
    const RooflineTerms terms = RooflineTerms::of(m, d, 1);
    StepShape s;
    s.n_tokens = 37;
    s.n_sampled = 5;
    s.n_seqs = 5;
    s.sum_context = 97 + 33 * 4;
    s.max_context = 97;
    s.prefill_pairs = 33.0 * 64 + 0.5 * 33 * 34;
    s.decode_context = 4 * 33;
    s.attention_pairs = s.prefill_pairs + s.decode_context;
    const RooflineBound b = roofline_bound(terms, s);
    EXPECT_EQ(roofline_seconds(terms, s), std::max(b.compute_s, b.memory_s) + d.step_overhead_s) << name;
  }
}

}  // namespace roofline_bound_test
}  // namespace servelab
