// The invariance contract of the production prefill kernels, each against itself: fa8 (the frozen
// baseline), fa10 and fa11 (what prefill_attention dispatches by KV layout) and prefill_attention
// give the same bits whatever the KV layout (naive, paged blocks of 1 to 256 slots), the chunking
// of a prompt, or the other sequences of the batch. (The superseded kernels' own checks:
// kernels/scratch/tests/.)
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/attention.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace invariance_test {  // named: the unity build compiles this file with attention_gpu_test.cpp

using testing::KvBatch;
using testing::PrefillFn;
using testing::rows_of;
using testing::run_prefill;

const PrefillFn kKernels[] = {prefill_attention_wgmma_fa8, prefill_attention_wgmma_fa10, prefill_attention_wgmma_fa11,
                              [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention(a, st); }};
const char* const kNames[] = {"fa8", "fa10", "fa11", "prefill_attention"};
static_assert(std::size(kKernels) == std::size(kNames));

class PrefillInvarianceGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(PrefillInvarianceGpu, SameBitsAcrossKvLayoutsChunksAndBatches) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int> ctx = {300, 129, 17, 1, 256, 140};
  const std::vector<int> q = {171, 129, 17, 1, 128, 1};
  for (int group : {1, 4}) {
    const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, 128, KvLayoutKind::naive, 16}, rng);
    std::vector<KvBatch> paged;
    for (int bs : {1, 16, 32, 64, 256}) paged.push_back(testing::relayout(b, KvLayoutKind::paged, bs, rng));
    const size_t row = size_t(b.spec.n_heads) * b.spec.head_dim;
    for (int k = 0; k < int(std::size(kKernels)); ++k) {
      const std::vector<float> all = run_prefill(t, b, kKernels[k]);
      ASSERT_FALSE(std::any_of(all.begin(), all.end(), [](float x) { return std::isnan(x); })) << kNames[k];
      for (const KvBatch& p : paged)  // layout: paged blocks of 1-256 slots against naive
        EXPECT_TRUE(std::equal(all.begin(), all.end(), run_prefill(t, p, kKernels[k]).begin()))
            << kNames[k] << " group " << group << " block " << p.spec.block_size;
      for (int s : {0, 4}) {  // batch: a sequence alone, then its prompt in chunks (a tile edge, odd sizes, single rows)
        const int q_len = q[s];
        const size_t r0 = size_t(b.in.query_start[s]) * row;
        const std::vector<float> alone = run_prefill(t, rows_of(b, s, 0, q_len), kKernels[k]);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r0)) << kNames[k] << " group " << group << " seq " << s;
        for (int chunk : {1, 64, 77}) {
          for (int start = 0; start < q_len; start += chunk) {
            const int end = std::min(q_len, start + chunk);
            const std::vector<float> part = run_prefill(t, rows_of(b, s, start, end), kKernels[k]);
            ASSERT_TRUE(std::equal(part.begin(), part.end(), all.begin() + r0 + size_t(start) * row))
                << kNames[k] << " group " << group << " seq " << s << " chunk " << chunk << " start " << start;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PrefillInvarianceGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace invariance_test
}  // namespace servelab::kernels
