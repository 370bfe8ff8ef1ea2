// Decode and prefill attention on the GPU against attention_ref, on awkward sizes: batch 1 and
// 17, contexts 1, 97 and 8k, block sizes 1, 16 and 32, GQA ratios 1, 4 and 8, both layouts,
// chunk boundaries; fresh random inputs and poisoned outputs every time; bf16 and fp16 storage.
// Prefill runs through prefill_attention (wgmma on sm_90a at head_dim 128) and each kernel by name.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/attention.h"
#include "kernels/ref/attention_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace {

using testing::BatchSpec;
using testing::DeviceBuffer;
using testing::DeviceBatch;
using testing::KvBatch;
using testing::PrefillFn;
using testing::run_prefill;

std::vector<float> reference(const KvBatch& b) { return testing::reference_attention(b); }

/// Decode arguments for b on d (workspace not yet set).
/// max_cluster: DecodeAttentionArgs::max_cluster_splits (0: splits merge through the workspace).
DecodeAttentionArgs decode_args(ScalarType t, const KvBatch& b, const DeviceBatch& d, SplitPolicy split,
                                bool tensor_cores, int max_cluster = DecodeAttentionArgs{}.max_cluster_splits, bool pipeline = true) {
  DecodeAttentionArgs a = d.decode_args(b, t);
  a.split = split;
  a.tensor_cores = tensor_cores;
  a.max_cluster_splits = max_cluster;
  a.pipeline = pipeline;
  return a;
}

int n_sms() {
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

/// A zeroed workspace (its split counters must start at zero) of decode_attention_workspace_bytes.
DeviceBuffer zeroed_workspace(size_t bytes) {
  DeviceBuffer w(bytes);
  CUDA_CHECK(cudaMemset(w.get(), 0, w.bytes()));
  return w;
}

std::vector<float> run_decode(ScalarType t, const KvBatch& b, SplitPolicy split, DecodeSplit* used = nullptr,
                              bool tensor_cores = true, int max_cluster = DecodeAttentionArgs{}.max_cluster_splits, bool pipeline = true) {
  DeviceBatch d(b, t);
  DecodeAttentionArgs a = decode_args(t, b, d, split, tensor_cores, max_cluster, pipeline);
  const DecodeSplit s = decode_attention_split(a, n_sms());
  if (used) *used = s;
  d.workspace = zeroed_workspace(decode_attention_workspace_bytes(a.n_seqs, a.n_heads, b.shape.head_dim, s.n_splits));
  a.workspace = d.workspace.get<float>();
  a.workspace_bytes = d.workspace.bytes();
  decode_attention(a, nullptr);
  return testing::download16(t, d.out, b.q.size());
}

/// Every test runs in bf16 and in fp16 storage (names end in /bf16 and /f16).
class AttentionGpu : public ::testing::TestWithParam<ScalarType> {};

/// 17 sequences: contexts 1, 97 and random lengths up to 300.
std::vector<int> contexts17(std::mt19937_64& rng) {
  std::vector<int> c = {1, 97};
  std::uniform_int_distribution<int> len(1, 300);
  while (c.size() < 17) c.push_back(len(rng));
  return c;
}

TEST_P(AttentionGpu, DecodeMatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int bs : {1, 16, 32}) {
        if (kind == KvLayoutKind::naive && bs != 16) continue;  // block size means nothing there
        for (int hd : {64, 128}) {
          const std::vector<int> ctx = contexts17(rng);
          const KvBatch b = testing::make_batch({ctx, std::vector<int>(17, 1), 8, 8 / group, hd, kind, bs}, rng);
          const std::vector<float> ref = reference(b);
          for (SplitPolicy split : {SplitPolicy{0}, SplitPolicy{32}})
            // Tensor cores: cluster merge + load pipeline, workspace merge + pipeline, cluster merge
            // without the pipeline; then CUDA cores.
            for (int kernel = 0; kernel < 4; ++kernel) {
              if (kernel > 0 && group == 1) continue;  // group 1 is on the CUDA-core kernel either way
              DecodeSplit used;
              EXPECT_LT(testing::rel_error(run_decode(t, b, split, &used, kernel < 3, kernel == 1 ? 0 : kMaxClusterSplits,
                                                      kernel != 2),
                                           ref),
                        testing::tolerance(t))
                  << "layout " << int(kind) << " group " << group << " block " << bs << " hd " << hd << " split "
                  << split.fixed_split_len << " kernel " << kernel << " tensor cores " << used.tensor_cores
                  << " cluster " << used.cluster << " splits " << used.n_splits;
            }
        }
      }
}

TEST_P(AttentionGpu, DecodeLongContextSplitsAndMatches) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int group : {1, 4, 8}) {
    const KvBatch b = testing::make_batch({{8192}, {1}, 8, 8 / group, 128, KvLayoutKind::paged, 16}, rng);
    DecodeSplit used;
    const std::vector<float> out = run_decode(t, b, SplitPolicy{}, &used);
    EXPECT_GT(used.n_splits, 1) << "batch 1 at 8k should split the context";
    EXPECT_LT(testing::rel_error(out, reference(b)), testing::tolerance(t)) << group;
  }
  const KvBatch b2 = testing::make_batch({{8192, 97}, {1, 1}, 4, 1, 64, KvLayoutKind::naive, 16}, rng);
  EXPECT_LT(testing::rel_error(run_decode(t, b2, SplitPolicy{512}), reference(b2)), testing::tolerance(t));
}

// Clusters of 16 (non-portable) and of 8, the workspace merge, with and without the load
// pipeline; a cluster whose short sequence leaves most of its blocks empty; head_dim 64 and 128.
TEST_P(AttentionGpu, DecodeClusterSizesAndPipelineMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  bool saw_16 = false, saw_small = false, saw_workspace = false;
  for (int hd : {64, 128})
    for (auto [ctx, n_kv] : std::vector<std::pair<std::vector<int>, int>>{{{4096}, 8}, {{3000, 70}, 4}, {{1000}, 8}}) {
      const KvBatch b = testing::make_batch({ctx, std::vector<int>(ctx.size(), 1), 32, n_kv, hd, KvLayoutKind::paged, 16}, rng);
      const std::vector<float> ref = reference(b);
      for (int mc : {kMaxClusterSplits, 8, 0})
        for (bool pipe : {true, false}) {
          DecodeSplit used;
          EXPECT_LT(testing::rel_error(run_decode(t, b, SplitPolicy{}, &used, true, mc, pipe), ref), testing::tolerance(t))
              << "hd " << hd << " seqs " << ctx.size() << " max cluster " << mc << " pipeline " << pipe;
          EXPECT_TRUE(used.tensor_cores);
          EXPECT_EQ(used.pipeline, pipe && used.split_len > 128);  // splits of one pass: never
          EXPECT_GT(used.n_splits, 1);
          EXPECT_EQ(used.cluster, used.n_splits <= mc) << "hd " << hd << " seqs " << ctx.size() << " max cluster " << mc;
          saw_16 |= used.cluster && used.n_splits == 16;
          saw_small |= used.cluster && used.n_splits <= 8;
          saw_workspace |= used.reduce;
        }
    }
  EXPECT_TRUE(saw_16 && saw_small && saw_workspace);
}

// The cluster merge (remote stores into the merging block's shared memory): clusters of 2 to 16,
// sizes that do not divide the 8 x head_dim outputs (3, 5, 6, 12), blocks past a short sequence's
// context, head_dim 64 and 128, with and without the load pipeline: all match the reference.
TEST_P(AttentionGpu, DecodeClusterMergeSizesMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<int> sizes;
  for (int hd : {64, 128})
    for (std::vector<int> ctx : std::vector<std::vector<int>>{{200}, {300}, {600}, {700, 9}, {1500}, {1500, 5, 130}, {4096}}) {
      const KvBatch b = testing::make_batch({ctx, std::vector<int>(ctx.size(), 1), 32, 8, hd, KvLayoutKind::paged, 16}, rng);
      const std::vector<float> ref = reference(b);
      for (bool pipe : {true, false}) {
        DecodeSplit used;
        const std::vector<float> out = run_decode(t, b, SplitPolicy{}, &used, true, kMaxClusterSplits, pipe);
        ASSERT_TRUE(used.cluster) << "hd " << hd << " ctx " << ctx[0] << " splits " << used.n_splits;
        sizes.push_back(used.n_splits);
        EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t)) << "hd " << hd << " splits " << used.n_splits << " pipeline " << pipe;
      }
    }
  if (n_sms() >= 132)  // the cuts above assume an H100/H200's multiprocessors
    for (int n : {2, 3, 5, 6, 12, 16}) EXPECT_NE(std::find(sizes.begin(), sizes.end(), n), sizes.end()) << n;
}

// The tensor-core kernel with its load pipeline (registers, one pass ahead) and without: the same
// bits, in a cluster or through the workspace, head_dim 64 and 128, splits of 2 to 10 passes.
TEST_P(AttentionGpu, DecodePipelineGivesTheSameBits) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  bool saw_pipe_cluster = false, saw_pipe_workspace = false;
  for (int hd : {64, 128})
    for (std::vector<int> ctx : std::vector<std::vector<int>>{{4096}, {1500, 700, 33}, {20000}, {2000, 1999, 5, 300}}) {
      const KvBatch b = testing::make_batch({ctx, std::vector<int>(ctx.size(), 1), 32, 8, hd, KvLayoutKind::paged, 16}, rng);
      const std::vector<float> ref = reference(b);
      std::vector<std::vector<float>> outs;
      for (bool pipe : {true, false}) {
        DecodeSplit used;
        outs.push_back(run_decode(t, b, SplitPolicy{}, &used, true, DecodeAttentionArgs{}.max_cluster_splits, pipe));
        EXPECT_EQ(used.pipeline, pipe) << "hd " << hd << " ctx " << ctx[0];
        saw_pipe_cluster |= used.pipeline && used.cluster;
        saw_pipe_workspace |= used.pipeline && used.reduce;
        EXPECT_LT(testing::rel_error(outs.back(), ref), testing::tolerance(t)) << "hd " << hd << " pipeline " << pipe;
      }
      EXPECT_TRUE(std::equal(outs[0].begin(), outs[0].end(), outs[1].begin())) << "hd " << hd << " ctx " << ctx[0];
    }
  EXPECT_TRUE(saw_pipe_cluster && saw_pipe_workspace);
}

TEST_P(AttentionGpu, DecodeFixedSplitIsBatchInvariant) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // Splits of 256 positions (two passes): sequence 0 (2000 positions) alone runs the tensor-core
  // kernel's load pipeline, the batch of 17 does not (more blocks than SMs).
  for (auto [n_kv, split] : std::vector<std::pair<int, int>>{{2, 64}, {2, 256}, {8, 64}}) {  // GQA 4 (tensor cores), 1
    std::vector<int> ctx = contexts17(rng);
    ctx[0] = 2000;
    const KvBatch b = testing::make_batch({ctx, std::vector<int>(17, 1), 8, n_kv, 128, KvLayoutKind::paged, 16}, rng);
    const std::vector<float> all = run_decode(t, b, SplitPolicy{split});
    const size_t row = 8 * 128;
    for (int s : {0, 1, 16}) {  // the same sequence alone
      KvBatch one = b;
      one.in.query_start = {0, 1};
      one.in.context_lens = {b.in.context_lens[s]};
      one.in.block_tables.assign(b.in.block_tables.begin() + s * b.in.block_table_stride,
                                 b.in.block_tables.begin() + (s + 1) * b.in.block_table_stride);
      one.q.assign(b.q.begin() + s * row, b.q.begin() + (s + 1) * row);
      DecodeSplit used;
      const std::vector<float> alone = run_decode(t, one, SplitPolicy{split}, &used);
      if (s == 0 && split == 256) EXPECT_TRUE(used.pipeline);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + s * row)) << s << " n_kv " << n_kv << " split " << split;
    }
  }
}

// The split merge counts finished blocks in the workspace: every launch must leave the counters at
// zero, so one workspace serves calls of other sizes and CUDA graph replays (fresh Q each replay).
TEST_P(AttentionGpu, DecodeSplitCountersResetAcrossCallsAndGraphReplays) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int hd = 128;
  const size_t ws_bytes = decode_attention_workspace_bytes(17, 32, hd, kMaxAutoSplits);
  DeviceBuffer ws = zeroed_workspace(ws_bytes);
  auto counters_zero = [&] { return testing::split_counters_zero(ws, hd); };
  // Calls of different shapes on one workspace: batch 1 at 8k, batch 17, GQA 8, 4 and 1.
  for (int round = 0; round < 2; ++round)
    for (auto [ctx, n_kv] : std::vector<std::pair<std::vector<int>, int>>{
             {{8192}, 4}, {contexts17(rng), 8}, {{3000, 1, 97}, 32}, {{4100, 2000}, 8}}) {
      const KvBatch b = testing::make_batch({ctx, std::vector<int>(ctx.size(), 1), 32, n_kv, hd, KvLayoutKind::paged, 16}, rng);
      DeviceBatch d(b, t);
      DecodeAttentionArgs a = decode_args(t, b, d, SplitPolicy{}, true);
      a.workspace = ws.get<float>();
      a.workspace_bytes = ws.bytes();
      decode_attention(a, nullptr);
      EXPECT_LT(testing::rel_error(testing::download16(t, d.out, b.q.size()), reference(b)), testing::tolerance(t))
          << "round " << round << " seqs " << ctx.size() << " n_kv " << n_kv;
      EXPECT_TRUE(counters_zero()) << "round " << round << " seqs " << ctx.size() << " n_kv " << n_kv;
    }

  // A captured graph replayed with new queries each time: splits merged through the workspace
  // (counters) and in a cluster.
  for (bool cluster : {false, true}) {
    KvBatch b = testing::make_batch({{5000, 700, 1}, {1, 1, 1}, 32, 8, hd, KvLayoutKind::paged, 16}, rng);
    DeviceBatch d(b, t);
    DecodeAttentionArgs a = decode_args(t, b, d, SplitPolicy{}, true, cluster ? kMaxClusterSplits : 0);
    a.workspace = ws.get<float>();
    a.workspace_bytes = ws.bytes();
    const DecodeSplit used = decode_attention_split(a, n_sms());
    ASSERT_EQ(used.reduce, !cluster);
    ASSERT_EQ(used.cluster, cluster);
    testing::CapturedGraph graph([&](cudaStream_t st) { decode_attention(a, st); });
    for (int replay = 0; replay < 3; ++replay) {
      b.q = testing::random_bf16(b.q.size(), rng);
      const DeviceBuffer q = testing::upload16(t, b.q);
      CUDA_CHECK(cudaMemcpy(d.q.get(), q.get(), q.bytes(), cudaMemcpyDeviceToDevice));
      d.out.poison();
      graph.replay();
      EXPECT_LT(testing::rel_error(testing::download16(t, d.out, b.q.size()), reference(b)), testing::tolerance(t))
          << "replay " << replay << " cluster " << cluster;
      EXPECT_TRUE(counters_zero()) << "replay " << replay << " cluster " << cluster;
    }
  }
}

// The same inputs give the same bits on every run (the split merge order is fixed), on both kernels.
TEST_P(AttentionGpu, DecodeIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // Tensor cores (GQA 8 at 8k: 16 splits) merging in a cluster of 16 and through the workspace;
  // CUDA cores (no GQA, workspace); a cluster of 8 at 1k (GQA 4, batch 2).
  struct Case {
    int ctx, n_kv, max_cluster;
  };
  for (Case c : std::vector<Case>{{8192, 4, kMaxClusterSplits}, {8192, 4, 0}, {8192, 32, 0}, {1000, 8, 8}}) {
    const KvBatch b = testing::make_batch({{c.ctx, 33}, {1, 1}, 32, c.n_kv, 128, KvLayoutKind::paged, 16}, rng);
    const int n_kv = c.n_kv;
    DecodeSplit used;
    const std::vector<float> first = run_decode(t, b, SplitPolicy{}, &used, true, c.max_cluster);
    EXPECT_GT(used.n_splits, 1);
    EXPECT_EQ(used.cluster, c.max_cluster > 0 && n_kv < 32) << n_kv;
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> again = run_decode(t, b, SplitPolicy{}, nullptr, true, c.max_cluster);
      EXPECT_TRUE(std::equal(first.begin(), first.end(), again.begin())) << n_kv << " run " << i;
    }
  }
}

TEST_P(AttentionGpu, PrefillMatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int bs : {1, 16, 32}) {
        if (kind == KvLayoutKind::naive && bs != 16) continue;
        for (int hd : {32, 64, 128}) {
          // Full prompts, chunks after a cached prefix, a decode row, tile edges (63, 64, 65).
          const std::vector<int> ctx = {97, 1, 200, 64, 65, 130, 8};
          const std::vector<int> q = {97, 1, 33, 64, 65, 63, 1};
          const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, hd, kind, bs}, rng);
          const std::vector<float> ref = reference(b);
          EXPECT_LT(testing::rel_error(run_prefill(t, b), ref), testing::tolerance(t))
              << "layout " << int(kind) << " group " << group << " block " << bs << " hd " << hd;
          EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_mma), ref), testing::tolerance(t))
              << "mma: layout " << int(kind) << " group " << group << " block " << bs << " hd " << hd;
        }
      }
}

TEST_P(AttentionGpu, PrefillLongPromptMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int n_kv : {1, 4}) {  // 1500 rows x GQA 4 and GQA 1: many 64-row tiles, 24 key tiles
    const KvBatch b = testing::make_batch({{1500}, {1500}, 4, n_kv, 128, KvLayoutKind::paged, 16}, rng);
    EXPECT_LT(testing::rel_error(run_prefill(t, b), reference(b)), testing::tolerance(t)) << n_kv;
  }
}

TEST_P(AttentionGpu, ChunkedPrefillGivesTheSameBitsAsFullPrefill) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int n = 200;
  const KvBatch full = testing::make_batch({{n}, {n}, 8, 2, 128, KvLayoutKind::paged, 16}, rng);
  const std::vector<float> ref = run_prefill(t, full);
  const size_t row = 8 * 128;
  for (int chunk : {1, 64, 77}) {
    for (int start = 0; start < n; start += chunk) {
      const int end = std::min(n, start + chunk);
      KvBatch c = full;
      c.in.query_start = {0, end - start};
      c.in.context_lens = {end};
      c.q.assign(full.q.begin() + start * row, full.q.begin() + end * row);
      const std::vector<float> out = run_prefill(t, c);
      ASSERT_TRUE(std::equal(out.begin(), out.end(), ref.begin() + start * row)) << chunk << " " << start;
    }
  }
}

#define SKIP_WITHOUT_WGMMA()                                                    \
  SKIP_WITHOUT_GPU();                                                           \
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device"

// The wgmma kernels (128-row tiles, 128-position key tiles) on shapes around their tile edges:
// query lengths 1, 17, 129; chunks after cached prefixes (one ending on a tile edge, one not);
// GQA 1, 4, 8; block sizes 1, 16, 32, 64, 256 and the naive layout. fa8 (the frozen baseline)
// against the reference; fa10 and fa11 (what prefill_attention dispatches) against fa8's bits:
// their producers fill the same shared memory. The mma kernel beside them.
TEST_P(AttentionGpu, PrefillWgmmaMatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_WGMMA();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  testing::for_each_awkward_prefill(rng, [&](const KvBatch& b, const std::string& where) {
    const std::vector<float> ref = reference(b);
    const std::vector<float> fa8 = run_prefill(t, b, prefill_attention_wgmma_fa8);
    EXPECT_LT(testing::rel_error(fa8, ref), testing::tolerance(t)) << "fa8 " << where;
    // fa10: fa8's consumers on the TMA producer (boxes of 16-128 rows, cp.async for block size 1).
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa10).begin())) << "fa10 differs from fa8, " << where;
    // fa11: per tile, two 128-row boxes where the slots are consecutive (naive, block 256), else fa8's gather.
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa11).begin())) << "fa11 differs from fa8, " << where;
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention).begin())) << "prefill_attention differs from fa8, " << where;
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_mma), ref), testing::tolerance(t))
        << "mma: " << where;
  });
}

// A 4096-token prompt (32 row tiles at GQA 1 and 4: rows of a tile span 128 or 32 positions).
TEST_P(AttentionGpu, PrefillWgmma4kPromptMatchesReference) {
  SKIP_WITHOUT_WGMMA();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int n_kv : {1, 4}) {
    const KvBatch b = testing::make_batch({{4096}, {4096}, 4, n_kv, 128, KvLayoutKind::paged, 16}, rng);
    const std::vector<float> ref = reference(b);
    const std::vector<float> fa8 = run_prefill(t, b, prefill_attention_wgmma_fa8);
    EXPECT_LT(testing::rel_error(fa8, ref), testing::tolerance(t)) << "fa8 " << n_kv;
    // fa10 on 16-row boxes here, and on 128-row boxes (the naive layout, paged blocks of 256): fa8's bits.
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa10).begin())) << "fa10 block 16 " << n_kv;
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa11).begin())) << "fa11 block 16 " << n_kv;
    for (auto [kind, bs] : {std::pair{KvLayoutKind::naive, 16}, std::pair{KvLayoutKind::paged, 256}}) {
      const KvBatch other = testing::relayout(b, kind, bs, rng);
      EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, other, prefill_attention_wgmma_fa10).begin()))
          << "fa10 layout " << int(kind) << " block " << bs << " " << n_kv;
      EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, other, prefill_attention).begin()))
          << "prefill_attention layout " << int(kind) << " block " << bs << " " << n_kv;
    }
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_mma), ref), testing::tolerance(t)) << "mma " << n_kv;
  }
}

// A sequence's rows give the same bits alone and inside a mixed batch (other prompts, a chunk
// after a prefix, decode rows), through prefill_attention's own choice of kernel.
TEST_P(AttentionGpu, PrefillRowsDoNotDependOnTheBatch) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive}) {
    const std::vector<int> ctx = {40, 1, 333, 700, 9};
    const std::vector<int> q = {40, 1, 150, 700, 1};
    const KvBatch b = testing::make_batch({ctx, q, 8, 2, 128, kind, 16}, rng);
    const std::vector<float> all = run_prefill(t, b);
    const size_t row = 8 * 128;
    for (int s : {2, 3}) {
      KvBatch one = b;
      one.in.query_start = {0, q[s]};
      one.in.context_lens = {ctx[s]};
      if (kind == KvLayoutKind::paged) {
        const auto first = b.in.block_tables.begin() + size_t(s) * b.in.block_table_stride;
        one.in.block_tables.assign(first, first + b.in.block_table_stride);
      } else {
        one.in.base_slots = {b.in.base_slots[s]};
      }
      const size_t r0 = size_t(b.in.query_start[s]) * row;
      one.q.assign(b.q.begin() + r0, b.q.begin() + r0 + size_t(q[s]) * row);
      const std::vector<float> alone = run_prefill(t, one);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r0)) << "layout " << int(kind) << " seq " << s;
    }
  }
}

TEST_P(AttentionGpu, DecodeAndPrefillAgreeOnDecodeRows) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const KvBatch b = testing::make_batch({contexts17(rng), std::vector<int>(17, 1), 8, 2, 64, KvLayoutKind::paged, 16}, rng);
  EXPECT_LT(testing::rel_error(run_decode(t, b, SplitPolicy{}), run_prefill(t, b)), testing::tolerance(t));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace
}  // namespace servelab::kernels
