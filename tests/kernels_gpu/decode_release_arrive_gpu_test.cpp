// Decode attention's split merge with DecodeAttentionArgs::release_arrive (seventh pass): a block
// counts its arrival by one thread's acq_rel atomic after a barrier instead of every thread's
// fence.sc. Same bits as the fenced merge, the reference's result, the counters left at zero,
// on both kernels (tensor cores at GQA 4, CUDA cores at GQA 1), both KV layouts, the auto and the
// fixed (batch-invariant) split, bf16 and fp16, eager and in a CUDA graph replayed with fresh
// queries (a missing ordering would show as a wrong or moving result there).
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
namespace decode_release_arrive_test {  // named: the GPU test folder builds as a unity build

using testing::DeviceBuffer;
using testing::KvBatch;

/// The batch on the device with decode arguments (auto or fixed split, fenced or release arrival)
/// and a zeroed workspace.
struct OnDevice : testing::DeviceBatch {
  DeviceBuffer ws;
  DecodeAttentionArgs a;
  DecodeSplit used;
  OnDevice(const KvBatch& b, ScalarType t, bool release, int fixed_split,
           int max_cluster = DecodeAttentionArgs{}.max_cluster_splits)
      : DeviceBatch(b, t) {
    a = decode_args(b, t);
    a.split.fixed_split_len = fixed_split;
    a.release_arrive = release;
    a.max_cluster_splits = max_cluster;
    used = testing::attach_zeroed_workspace(a, ws);
  }
  bool counters_zero() const { return testing::split_counters_zero(ws, a.shape.head_dim); }
};

class DecodeReleaseArriveGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(DecodeReleaseArriveGpu, GivesTheSameBitsAsTheFencedMergeAndMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  struct Case {
    std::vector<int> ctx;
    int n_kv;  // of 32 query heads: 8 = GQA 4 (tensor cores), 32 = GQA 1 (CUDA cores)
    KvLayoutKind kind;
    int block_size;
    int fixed_split;
  };
  // b8 x 1k x GQA 4 (two blocks per SM, 4 splits through the workspace), one long context (16+
  // splits), ragged contexts with block size 7, the naive layout, the fixed 512-position split.
  const std::vector<Case> cases = {{std::vector<int>(8, 1024), 8, KvLayoutKind::paged, 16, 0},
                                   {{20000}, 8, KvLayoutKind::paged, 16, 0},
                                   {{20000}, 32, KvLayoutKind::paged, 16, 0},
                                   {{2000, 1999, 5, 300}, 8, KvLayoutKind::paged, 7, 0},
                                   {{3000, 1500}, 32, KvLayoutKind::naive, 16, 0},
                                   {{3000, 1, 700}, 8, KvLayoutKind::paged, 16, 512},
                                   {{3000, 1, 700}, 32, KvLayoutKind::paged, 16, 512}};
  int n_reduced = 0;
  for (const Case& c : cases) {
    const KvBatch b = testing::make_batch({c.ctx, std::vector<int>(c.ctx.size(), 1), 32, c.n_kv, 128, c.kind, c.block_size}, rng);
    const std::vector<float> ref = testing::reference_attention(b);
    std::vector<std::vector<float>> outs;
    for (bool release : {false, true}) {
      OnDevice d(b, t, release, c.fixed_split);
      n_reduced += d.used.reduce;
      for (int call = 0; call < 2; ++call) {  // the second call finds the counters the first left
        d.out.poison();
        decode_attention(d.a, nullptr);
        outs.push_back(testing::download16(t, d.out, b.q.size()));
        EXPECT_LT(testing::rel_error(outs.back(), ref), testing::tolerance(t))
            << "ctx " << c.ctx[0] << " n_kv " << c.n_kv << " release " << release << " splits " << d.used.n_splits;
        EXPECT_TRUE(d.counters_zero()) << "ctx " << c.ctx[0] << " release " << release;
      }
    }
    for (size_t k = 1; k < outs.size(); ++k)
      EXPECT_TRUE(std::equal(outs[0].begin(), outs[0].end(), outs[k].begin())) << "ctx " << c.ctx[0] << " n_kv " << c.n_kv << " run " << k;
  }
  EXPECT_GE(n_reduced, 2 * 6) << "most cases must merge through the workspace";
}

// A captured graph of 8 back-to-back launches with release arrival, replayed with fresh queries:
// each replay gives the fenced merge's bits, and the counters end at zero. Clusters off: at this
// batch the auto cut would merge in a cluster (no counters), so the workspace merge is forced.
TEST_P(DecodeReleaseArriveGpu, GraphReplaysGiveTheFencedBits) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  KvBatch b = testing::make_batch({{4096, 700, 1, 2500}, {1, 1, 1, 1}, 32, 8, 128, KvLayoutKind::paged, 16}, rng);
  OnDevice rel(b, t, true, 0, 0), fenced(b, t, false, 0, 0);
  ASSERT_TRUE(rel.used.reduce);
  testing::CapturedGraph graph([&](cudaStream_t st) {
    for (int k = 0; k < 8; ++k) decode_attention(rel.a, st);
  });
  for (int replay = 0; replay < 3; ++replay) {
    b.q = testing::random_bf16(b.q.size(), rng);
    const DeviceBuffer q = testing::upload16(t, b.q);
    CUDA_CHECK(cudaMemcpy(rel.q.get(), q.get(), q.bytes(), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(fenced.q.get(), q.get(), q.bytes(), cudaMemcpyDeviceToDevice));
    rel.out.poison();
    graph.replay();
    decode_attention(fenced.a, nullptr);
    const std::vector<float> got = testing::download16(t, rel.out, b.q.size());
    const std::vector<float> want = testing::download16(t, fenced.out, b.q.size());
    EXPECT_LT(testing::rel_error(got, testing::reference_attention(b)), testing::tolerance(t)) << replay;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << replay;
    EXPECT_TRUE(rel.counters_zero()) << replay;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeReleaseArriveGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace decode_release_arrive_test
}  // namespace servelab::kernels
