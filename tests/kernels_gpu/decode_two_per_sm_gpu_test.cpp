// Decode attention on tensor cores at two blocks per SM with the load pipeline
// (DecodeAttentionArgs::pipeline_blocks_per_sm = 2, SplitPolicy::blocks_per_sm = 2): the same bits
// as the same cut without the pipeline, the reference's result, both KV layouts, head_dim 64 and
// 128, bf16 and fp16, through a CUDA graph replayed with fresh queries; the default policy at
// b8 x 1k x GQA 4 runs it; and the SM holds two blocks of the pipelined kernel.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/attention.h"
#include "kernels/ref/attention_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace decode_two_per_sm_test {  // named: the GPU test folder builds as a unity build

using testing::DeviceBuffer;
using testing::KvBatch;

std::vector<float> ref_of(const KvBatch& b) { return testing::reference_attention(b); }

/// The batch on the device with decode arguments for two blocks per SM (pipeline on or off; with
/// auto_policy the default policy instead) and a zeroed workspace.
struct OnDevice : testing::DeviceBatch {
  DeviceBuffer ws;
  DecodeAttentionArgs a;
  DecodeSplit used;
  OnDevice(const KvBatch& b, ScalarType t, bool pipeline, bool auto_policy = false) : DeviceBatch(b, t) {
    a = decode_args(b, t);
    if (!auto_policy) {
      a.split.blocks_per_sm = 2;
      a.pipeline = pipeline;
      a.pipeline_blocks_per_sm = 2;
    }
    used = testing::attach_zeroed_workspace(a, ws);
  }
  bool counters_zero() const { return testing::split_counters_zero(ws, a.shape.head_dim); }
};

class DecodeTwoPerSmGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(DecodeTwoPerSmGpu, PipelineGivesTheSameBitsAsNoneAndMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  int n_sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0));
  struct Case {
    std::vector<int> ctx;
    KvLayoutKind kind;
    int block_size;
  };
  // b8 x 1k (GQA 4: the fourth pass's shape), one long context, ragged contexts, block sizes 16
  // and 7, the naive layout.
  const std::vector<Case> cases = {{std::vector<int>(8, 1024), KvLayoutKind::paged, 16},
                                   {{20000}, KvLayoutKind::paged, 16},
                                   {{2000, 1999, 5, 300}, KvLayoutKind::paged, 7},
                                   {{3000, 1500}, KvLayoutKind::naive, 16}};
  for (int hd : {64, 128})
    for (const Case& c : cases) {
      const KvBatch b = testing::make_batch({c.ctx, std::vector<int>(c.ctx.size(), 1), 32, 8, hd, c.kind, c.block_size}, rng);
      const std::vector<float> ref = ref_of(b);
      std::vector<std::vector<float>> outs;
      for (bool pipe : {true, false}) {
        OnDevice d(b, t, pipe);
        EXPECT_TRUE(d.used.tensor_cores);
        EXPECT_EQ(d.used.blocks_per_sm, 2);
        EXPECT_GT(int64_t(d.used.n_splits) * b.in.n_seqs() * 8, n_sms) << "more blocks than SMs";
        EXPECT_TRUE(d.used.reduce);
        EXPECT_FALSE(d.used.cluster);
        EXPECT_EQ(d.used.pipeline, pipe && d.used.split_len > 128) << "hd " << hd << " ctx " << c.ctx[0];
        decode_attention(d.a, nullptr);
        outs.push_back(testing::download16(t, d.out, b.q.size()));
        EXPECT_LT(testing::rel_error(outs.back(), ref), testing::tolerance(t))
            << "hd " << hd << " ctx " << c.ctx[0] << " pipeline " << pipe << " splits " << d.used.n_splits;
        EXPECT_TRUE(d.counters_zero());
      }
      EXPECT_TRUE(std::equal(outs[0].begin(), outs[0].end(), outs[1].begin())) << "hd " << hd << " ctx " << c.ctx[0];
      if (c.ctx.size() == 8 && n_sms == 132) {  // b8 x 1k x GQA 4: the default policy runs this cut
        OnDevice d(b, t, true, true);
        EXPECT_EQ(d.used.blocks_per_sm, 2);
        EXPECT_TRUE(d.used.pipeline);
        decode_attention(d.a, nullptr);
        const std::vector<float> out = testing::download16(t, d.out, b.q.size());
        EXPECT_TRUE(std::equal(out.begin(), out.end(), outs[0].begin())) << "hd " << hd << " default policy";
      }
    }
}

// A captured graph of the pipelined two-per-SM cut, replayed with fresh queries: each replay
// matches the reference and leaves the split counters at zero.
TEST_P(DecodeTwoPerSmGpu, GraphReplaysMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  KvBatch b = testing::make_batch({{4096, 700, 1}, {1, 1, 1}, 32, 8, 128, KvLayoutKind::paged, 16}, rng);
  OnDevice d(b, t, true);
  ASSERT_TRUE(d.used.pipeline);
  testing::CapturedGraph graph([&](cudaStream_t st) { decode_attention(d.a, st); });
  for (int replay = 0; replay < 3; ++replay) {
    b.q = testing::random_bf16(b.q.size(), rng);
    const DeviceBuffer q = testing::upload16(t, b.q);
    CUDA_CHECK(cudaMemcpy(d.q.get(), q.get(), q.bytes(), cudaMemcpyDeviceToDevice));
    d.out.poison();
    graph.replay();
    EXPECT_LT(testing::rel_error(testing::download16(t, d.out, b.q.size()), ref_of(b)), testing::tolerance(t)) << replay;
    EXPECT_TRUE(d.counters_zero()) << replay;
  }
}

// The occupancy calculator's count: two blocks of the pipelined kernel fit an SM (252 registers
// round to 256 a thread: 32K a block of 128 threads, half the register file).
TEST_P(DecodeTwoPerSmGpu, AnSmHoldsTwoPipelinedBlocks) {
  SKIP_WITHOUT_GPU();
  for (int hd : {64, 128})
    for (bool pipe : {true, false}) EXPECT_GE(decode_mma_resident_blocks(GetParam(), hd, pipe), 2) << hd << " " << pipe;
  EXPECT_THROW(decode_mma_resident_blocks(GetParam(), 32, true), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeTwoPerSmGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace decode_two_per_sm_test
}  // namespace servelab::kernels
