// Decode attention on tensor cores with the passes of the KV heads of a split held together
// (DecodeAttentionArgs::lock_heads 1 and 2: the blocks of one (sequence, split) run as one cluster
// with a cluster barrier a pass): the same bits as the same cut without the lock (workspace merge), the
// reference's result, both KV layouts, head_dim 64 and 128, clusters of 8, 6 and 4 (two head
// subgroups), auto and fixed splits, bf16 and fp16, through a CUDA graph replayed with fresh
// queries; where the pipeline does not run, the lock does not either. And touch_ahead (an L2
// prefetch of each table block two passes ahead): the same bits as without.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/ref/attention_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace decode_lock_heads_test {  // named: the GPU test folder builds as a unity build

using testing::DeviceBuffer;
using testing::KvBatch;

/// The batch on the device with decode arguments (lock 0, 1 or 2, the workspace merge either way:
/// max_cluster_splits 0) and a zeroed workspace.
struct OnDevice {
  DeviceBuffer k, v, q, out, query_start, context_lens, block_tables, base_slots, ws;
  DecodeAttentionArgs a;
  DecodeSplit used;
  OnDevice(const KvBatch& b, ScalarType t, int lock, int fixed_split = 0, bool touch = false)
      : k(testing::upload16(t, b.k_cache)),
        v(testing::upload16(t, b.v_cache)),
        q(testing::upload16(t, b.q)),
        out(b.q.size() * 2),
        query_start(testing::upload(b.in.query_start)),
        context_lens(testing::upload(b.in.context_lens)),
        block_tables(testing::upload(b.in.block_tables)),
        base_slots(testing::upload(b.in.base_slots)) {
    a.dtype = t;
    a.q = q.get();
    a.q_row_stride = int64_t(b.spec.n_heads) * b.shape.head_dim;
    a.query_start = query_start.get<int32_t>();
    a.k_cache = k.get();
    a.v_cache = v.get();
    a.shape = b.shape;
    a.n_heads = b.spec.n_heads;
    a.n_seqs = b.in.n_seqs();
    a.context_lens = context_lens.get<int32_t>();
    a.kv = b.in.addressing();
    a.kv.block_tables = block_tables.get<int32_t>();
    a.kv.base_slots = base_slots.get<int64_t>();
    a.max_context = b.in.max_context();
    a.scale = 1.0f / std::sqrt(float(b.shape.head_dim));
    a.out = out.get();
    a.out_row_stride = a.q_row_stride;
    a.split.fixed_split_len = fixed_split;
    a.max_cluster_splits = 0;
    a.lock_heads = lock;
    a.touch_ahead = touch;
    int n_sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0));
    used = decode_attention_split(a, n_sms);
    ws = DeviceBuffer(decode_attention_workspace_bytes(a.n_seqs, a.n_heads, b.shape.head_dim, used.n_splits));
    CUDA_CHECK(cudaMemset(ws.get(), 0, ws.bytes()));
    a.workspace = ws.get<float>();
    a.workspace_bytes = ws.bytes();
    out.poison();
  }
  bool counters_zero() const {
    const size_t n = ws.bytes() / (4 * size_t(a.shape.head_dim + 3));
    const std::vector<int32_t> c = testing::download<int32_t>(ws, ws.bytes() / 4);
    return std::all_of(c.end() - n, c.end(), [](int32_t x) { return x == 0; });
  }
};

class DecodeLockHeadsGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(DecodeLockHeadsGpu, SameBitsAsUnlockedAndMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  struct Case {
    std::vector<int> ctx;
    int n_heads, n_kv;  // GQA 4 with 8 KV heads (cluster 8), 6 (cluster 6); GQA 16 (2 subgroups: cluster 4)
    KvLayoutKind kind;
    int block_size;
    int fixed_split;
  };
  const std::vector<Case> cases = {{{16384}, 32, 8, KvLayoutKind::paged, 16, 0},  // b1 x 16k x GQA 4: 16 splits (b1 x 32k's cut)
                                   {std::vector<int>(8, 1024), 32, 8, KvLayoutKind::paged, 16, 0},  // b8 x 1k
                                   {{5000, 4093, 7, 2500}, 24, 6, KvLayoutKind::paged, 7, 0},
                                   {{3000, 1500}, 32, 2, KvLayoutKind::naive, 16, 0},
                                   {{4000, 333}, 32, 8, KvLayoutKind::paged, 16, 512}};  // batch-invariant cut
  for (int hd : {64, 128})
    for (const Case& c : cases) {
      const KvBatch b =
          testing::make_batch({c.ctx, std::vector<int>(c.ctx.size(), 1), c.n_heads, c.n_kv, hd, c.kind, c.block_size}, rng);
      const std::vector<float> ref = testing::reference_attention(b);
      std::vector<std::vector<float>> outs;
      for (int lock : {1, 2, 0}) {
        OnDevice d(b, t, lock, c.fixed_split);
        EXPECT_TRUE(d.used.tensor_cores);
        EXPECT_TRUE(d.used.pipeline) << "hd " << hd << " ctx " << c.ctx[0];
        EXPECT_EQ(d.used.lock_heads, lock > 0) << "hd " << hd << " ctx " << c.ctx[0];
        EXPECT_FALSE(d.used.cluster);
        decode_attention(d.a, nullptr);
        outs.push_back(testing::download16(t, d.out, b.q.size()));
        EXPECT_LT(testing::rel_error(outs.back(), ref), testing::tolerance(t))
            << "hd " << hd << " ctx " << c.ctx[0] << " lock " << lock << " splits " << d.used.n_splits;
        EXPECT_TRUE(d.counters_zero());
      }
      for (int i : {0, 1})
        EXPECT_TRUE(std::equal(outs[i].begin(), outs[i].end(), outs[2].begin())) << "lock " << i + 1 << " hd " << hd << " ctx " << c.ctx[0];
    }
}

// Splits of one pass (no pipeline) or one KV head a grid column: the lock does not run; a mode
// outside 0..2 is refused.
TEST_P(DecodeLockHeadsGpu, OffWhereThePipelineOrClusterCannotRun) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const KvBatch short_ctx = testing::make_batch({{100, 90}, {1, 1}, 32, 8, 128, KvLayoutKind::paged, 16}, rng);
  OnDevice a(short_ctx, GetParam(), 1);
  EXPECT_FALSE(a.used.pipeline);
  EXPECT_FALSE(a.used.lock_heads);
  const KvBatch one_kv = testing::make_batch({{20000}, {1}, 4, 1, 128, KvLayoutKind::paged, 16}, rng);
  OnDevice b(one_kv, GetParam(), 2);
  EXPECT_TRUE(b.used.pipeline);
  EXPECT_FALSE(b.used.lock_heads);
  decode_attention(b.a, nullptr);
  EXPECT_LT(testing::rel_error(testing::download16(GetParam(), b.out, one_kv.q.size()), testing::reference_attention(one_kv)),
            testing::tolerance(GetParam()));
  b.a.lock_heads = 3;
  EXPECT_THROW(decode_attention(b.a, nullptr), std::invalid_argument);
}

// A captured graph of the locked cut, replayed with fresh queries: each replay matches the
// reference and leaves the split counters at zero.
TEST_P(DecodeLockHeadsGpu, GraphReplaysMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  KvBatch b = testing::make_batch({{8192, 700, 3000}, {1, 1, 1}, 32, 8, 128, KvLayoutKind::paged, 16}, rng);
  OnDevice d(b, t, 1);
  ASSERT_TRUE(d.used.lock_heads);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  decode_attention(d.a, st);
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    b.q = testing::random_bf16(b.q.size(), rng);
    const DeviceBuffer q = testing::upload16(t, b.q);
    CUDA_CHECK(cudaMemcpy(d.q.get(), q.get(), q.bytes(), cudaMemcpyDeviceToDevice));
    d.out.poison();
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    EXPECT_LT(testing::rel_error(testing::download16(t, d.out, b.q.size()), testing::reference_attention(b)),
              testing::tolerance(t))
        << replay;
    EXPECT_TRUE(d.counters_zero()) << replay;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(st));
}

// DecodeAttentionArgs::touch_ahead (an L2 prefetch of each table block two passes ahead) loads
// nothing into registers: the same bits as without, on the pipelined cut of both layouts, block
// sizes 16 and 7, a long context and ragged ones (prefetches only inside the context: memcheck).
class DecodeTouchAheadGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(DecodeTouchAheadGpu, SameBitsAsWithoutAndMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  struct Case {
    std::vector<int> ctx;
    KvLayoutKind kind;
    int block_size;
  };
  const std::vector<Case> cases = {{{16384}, KvLayoutKind::paged, 16},
                                   {{5000, 4093, 7, 2500}, KvLayoutKind::paged, 7},
                                   {{3000, 1500}, KvLayoutKind::naive, 16}};
  for (int hd : {64, 128})
    for (const Case& c : cases) {
      const KvBatch b = testing::make_batch({c.ctx, std::vector<int>(c.ctx.size(), 1), 32, 8, hd, c.kind, c.block_size}, rng);
      std::vector<std::vector<float>> outs;
      for (bool touch : {true, false}) {
        OnDevice d(b, t, 0, 0, touch);
        EXPECT_TRUE(d.used.pipeline) << "hd " << hd << " ctx " << c.ctx[0];
        decode_attention(d.a, nullptr);
        outs.push_back(testing::download16(t, d.out, b.q.size()));
        EXPECT_TRUE(d.counters_zero());
      }
      EXPECT_LT(testing::rel_error(outs[0], testing::reference_attention(b)), testing::tolerance(t)) << "hd " << hd;
      EXPECT_TRUE(std::equal(outs[0].begin(), outs[0].end(), outs[1].begin())) << "hd " << hd << " ctx " << c.ctx[0];
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeTouchAheadGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeLockHeadsGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace decode_lock_heads_test
}  // namespace servelab::kernels
