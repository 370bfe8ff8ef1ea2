// The decode split policy is host code: checked here without a device (runs in CI's unit tests).
#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/attention.h"

namespace servelab::kernels {
namespace {

DecodeAttentionArgs args(int n_seqs, int max_ctx, int n_heads, int n_kv, int fixed = 0) {
  DecodeAttentionArgs a;
  a.n_seqs = n_seqs;
  a.max_context = max_ctx;
  a.n_heads = n_heads;
  a.shape = KvShape{1, n_kv, 128};
  a.split.fixed_split_len = fixed;
  return a;
}

TEST(DecodeSplitPolicy, FixedSplitDependsOnlyOnTheContext) {
  for (int n_seqs : {1, 17, 256}) {
    const DecodeSplit s = decode_attention_split(args(n_seqs, 8192, 32, 8, 512), 132);
    EXPECT_EQ(s.split_len, 512);
    EXPECT_EQ(s.n_splits, 16);
    EXPECT_TRUE(s.reduce);  // always, even for one split, so results never depend on the batch
  }
  EXPECT_EQ(decode_attention_split(args(3, 1, 32, 8, 512), 132).n_splits, 1);
  EXPECT_FALSE(decode_attention_split(args(1, 1024, 32, 8, 512), 132).cluster);  // never with a fixed split
}

TEST(DecodeSplitPolicy, AutoSplitsLongContextsAtSmallBatchOnly) {
  const DecodeSplit small = decode_attention_split(args(1, 32768, 32, 8), 132);
  EXPECT_GT(small.n_splits, 8);
  EXPECT_LE(small.n_splits, kMaxAutoSplits);
  EXPECT_TRUE(small.reduce != small.cluster);  // merged through the workspace or in a cluster
  EXPECT_EQ(small.split_len % 64, 0);
  EXPECT_GE(int64_t(small.split_len) * small.n_splits, 32768);

  const DecodeSplit big = decode_attention_split(args(256, 4096, 32, 32), 132);
  EXPECT_EQ(big.n_splits, 1);  // 8192 blocks already fill the GPU
  EXPECT_FALSE(big.reduce);

  const DecodeSplit short_ctx = decode_attention_split(args(1, 100, 32, 32), 132);
  EXPECT_EQ(short_ctx.n_splits, 2);  // never below 64 positions a split (CUDA cores) ...
  EXPECT_EQ(short_ctx.split_len, 64);
  const DecodeSplit short_tc = decode_attention_split(args(1, 200, 32, 8), 132);
  EXPECT_TRUE(short_tc.tensor_cores);
  EXPECT_EQ(short_tc.n_splits, 2);  // ... nor below 128 (a pass) on tensor cores
  EXPECT_EQ(short_tc.split_len, 128);

  const DecodeSplit no_gqa = decode_attention_split(args(1, 4096, 32, 32), 132);
  EXPECT_EQ(no_gqa.n_splits, 16);  // about 4 blocks per SM without GQA: 32 heads x 16 splits
  DecodeAttentionArgs tuned = args(1, 4096, 32, 32);
  tuned.split.blocks_per_sm = 16;
  EXPECT_EQ(decode_attention_split(tuned, 132).n_splits, 64);

  DecodeAttentionArgs mid_args = args(32, 4096, 32, 8);
  mid_args.tensor_cores = false;  // the CUDA-core kernel: 4 blocks per SM resident
  const DecodeSplit mid = decode_attention_split(mid_args, 132);
  EXPECT_FALSE(mid.tensor_cores);
  EXPECT_GE(int64_t(mid.n_splits) * 32 * 8, 132 * 8);  // enough blocks for several waves
  EXPECT_LE(mid.split_len, 1024);
  // Batch 32 without GQA: 1.1 waves of 7 resident blocks per SM at one split; cut until the last
  // wave is nearly full or there are 6 or more.
  const DecodeSplit b32 = decode_attention_split(args(32, 4096, 32, 32), 132);
  const double waves = 32.0 * 32 * b32.n_splits / (132 * 7);
  EXPECT_TRUE(waves >= 6.0 || waves - std::floor(waves) >= 0.75) << waves;
}

TEST(DecodeSplitPolicy, TensorCoresForGqaAimAtOneWave) {
  // GQA 4 (32 heads, 8 KV heads) at head_dim 128: the tensor-core kernel, one block per SM.
  DecodeAttentionArgs no_cluster = args(1, 1024, 32, 8);
  no_cluster.max_cluster_splits = 0;
  const DecodeSplit b1w = decode_attention_split(no_cluster, 132);
  EXPECT_TRUE(b1w.tensor_cores);
  EXPECT_EQ(b1w.split_len, 128);  // 8 KV heads x 8 splits: as many as 128-position splits allow
  EXPECT_EQ(b1w.n_splits, 8);
  EXPECT_TRUE(b1w.reduce);
  EXPECT_FALSE(b1w.cluster);
  EXPECT_FALSE(b1w.pipeline);  // 64 blocks, one per SM, but one pass a split: nothing to overlap
  // The same cut merged in a cluster of 8 (no workspace).
  const DecodeSplit b1 = decode_attention_split(args(1, 1024, 32, 8), 132);
  EXPECT_EQ(b1.n_splits, 8);
  EXPECT_EQ(b1.split_len, 128);
  EXPECT_TRUE(b1.cluster);
  EXPECT_FALSE(b1.reduce);
  // 16 splits: through the workspace by default, in a cluster of 16 when allowed.
  const DecodeSplit b1_long = decode_attention_split(args(1, 32768, 32, 8), 132);
  EXPECT_EQ(b1_long.n_splits, 16);
  EXPECT_FALSE(b1_long.cluster);
  EXPECT_TRUE(b1_long.reduce);
  EXPECT_TRUE(b1_long.pipeline);  // 128 blocks of 16 passes
  EXPECT_LE(int64_t(b1_long.n_splits) * 8, 132);  // a block per SM
  EXPECT_GE(int64_t(b1_long.n_splits) * 8, 120);
  DecodeAttentionArgs c16 = args(1, 32768, 32, 8);
  c16.max_cluster_splits = kMaxClusterSplits;
  const DecodeSplit b1c16 = decode_attention_split(c16, 132);
  EXPECT_EQ(b1c16.n_splits, 16);
  EXPECT_TRUE(b1c16.cluster);
  EXPECT_FALSE(b1c16.reduce);
  // More blocks than SMs (two blocks per SM asked for): never a cluster, no load pipeline.
  DecodeAttentionArgs bps2 = args(8, 4096, 32, 8);
  bps2.split.blocks_per_sm = 2;
  const DecodeSplit b8bps2 = decode_attention_split(bps2, 132);
  EXPECT_EQ(b8bps2.n_splits, 4);
  EXPECT_FALSE(b8bps2.cluster);
  EXPECT_TRUE(b8bps2.reduce);
  EXPECT_FALSE(b8bps2.pipeline);
  // Two blocks per SM with the load pipeline allowed there (pipeline_blocks_per_sm 2): the same
  // cut, pipelined where a split has more than one pass.
  bps2.pipeline_blocks_per_sm = 2;
  const DecodeSplit b8bps2pipe = decode_attention_split(bps2, 132);
  EXPECT_EQ(b8bps2pipe.n_splits, 4);
  EXPECT_EQ(b8bps2pipe.blocks_per_sm, 2);
  EXPECT_TRUE(b8bps2pipe.reduce);
  EXPECT_FALSE(b8bps2pipe.cluster);
  EXPECT_TRUE(b8bps2pipe.pipeline);
  DecodeAttentionArgs b8k1 = args(8, 1024, 32, 8);
  b8k1.split.blocks_per_sm = 2;
  b8k1.pipeline_blocks_per_sm = 2;
  EXPECT_EQ(decode_attention_split(b8k1, 132).split_len, 256);  // 4 splits of 2 passes, 256 blocks
  EXPECT_TRUE(decode_attention_split(b8k1, 132).pipeline);
  DecodeAttentionArgs b1long = args(1, 32768, 32, 8);
  b1long.split.blocks_per_sm = 2;
  b1long.pipeline_blocks_per_sm = 2;
  const DecodeSplit b1bps2pipe = decode_attention_split(b1long, 132);
  EXPECT_EQ(b1bps2pipe.n_splits, 32);  // 33 fit; 1024-position splits (rounded to 64) make 32
  EXPECT_EQ(b1bps2pipe.split_len, 1024);
  EXPECT_TRUE(b1bps2pipe.pipeline);
  DecodeAttentionArgs b1k4 = args(1, 4096, 32, 8);  // 32 splits of one pass: nothing to overlap
  b1k4.split.blocks_per_sm = 2;
  b1k4.pipeline_blocks_per_sm = 2;
  EXPECT_FALSE(decode_attention_split(b1k4, 132).pipeline);
  bps2.pipeline_blocks_per_sm = 1;  // one block per SM asked for the pipeline: none at two
  EXPECT_FALSE(decode_attention_split(bps2, 132).pipeline);
  // The default at b8 x 1k x GQA 4 (the auto rule's class: one block per SM would cut 2 splits,
  // two per SM cut splits of 2 passes): the two-per-SM pipelined cut; one block per SM asked for
  // gives the cut before the fourth pass.
  const DecodeSplit b8k1auto = decode_attention_split(args(8, 1024, 32, 8), 132);
  EXPECT_EQ(b8k1auto.blocks_per_sm, 2);
  EXPECT_EQ(b8k1auto.n_splits, 4);
  EXPECT_EQ(b8k1auto.split_len, 256);
  EXPECT_TRUE(b8k1auto.pipeline);
  EXPECT_TRUE(b8k1auto.reduce);
  EXPECT_FALSE(b8k1auto.cluster);
  DecodeAttentionArgs b8k1one = args(8, 1024, 32, 8);
  b8k1one.split.blocks_per_sm = 1;
  const DecodeSplit b8k1bps1 = decode_attention_split(b8k1one, 132);
  EXPECT_EQ(b8k1bps1.n_splits, 2);
  EXPECT_TRUE(b8k1bps1.cluster);
  EXPECT_TRUE(b8k1bps1.pipeline);
  EXPECT_EQ(b8k1bps1.blocks_per_sm, 1);
  // Outside the class, one block per SM: splits of 8+ passes (b8 x 4k, b1 x 32k), b1 x 8k (16
  // splits at one per SM), b1 x 1k (8 splits of one pass), b16 x 1k (1 split at one per SM).
  EXPECT_EQ(decode_attention_split(args(8, 4096, 32, 8), 132).blocks_per_sm, 1);
  EXPECT_EQ(decode_attention_split(args(1, 32768, 32, 8), 132).blocks_per_sm, 1);
  EXPECT_EQ(decode_attention_split(args(1, 8192, 32, 8), 132).blocks_per_sm, 1);
  EXPECT_EQ(decode_attention_split(args(1, 1024, 32, 8), 132).blocks_per_sm, 1);
  EXPECT_EQ(decode_attention_split(args(16, 1024, 32, 8), 132).blocks_per_sm, 1);
  EXPECT_EQ(decode_attention_split(args(8, 1024, 32, 8, 512), 132).blocks_per_sm, 1);  // fixed split: never
  const DecodeSplit b32 = decode_attention_split(args(32, 1024, 32, 8), 132);
  EXPECT_EQ(b32.n_splits, 1);  // 256 blocks: one wave of 2 resident blocks per SM
  EXPECT_FALSE(b32.reduce);
  EXPECT_FALSE(b32.pipeline);
  const DecodeSplit b8 = decode_attention_split(args(8, 32768, 32, 8), 132);
  EXPECT_EQ(b8.n_splits, 2);
  EXPECT_TRUE(b8.cluster);
  // A smaller least split length: b1 x 1k in 16 splits of 64 (a cluster only where 16 are allowed).
  DecodeAttentionArgs min64 = args(1, 1024, 32, 8);
  min64.split.min_split_len = 64;
  EXPECT_EQ(decode_attention_split(min64, 132).n_splits, 16);
  EXPECT_EQ(decode_attention_split(min64, 132).split_len, 64);
  EXPECT_FALSE(decode_attention_split(min64, 132).cluster);
  min64.max_cluster_splits = kMaxClusterSplits;
  EXPECT_TRUE(decode_attention_split(min64, 132).cluster);
  min64.split.min_split_len = 512;  // and a larger one: 2 splits
  EXPECT_EQ(decode_attention_split(min64, 132).n_splits, 2);
  // No GQA, head_dim 32, or turned off: the CUDA-core kernel.
  EXPECT_FALSE(decode_attention_split(args(1, 1024, 32, 32), 132).tensor_cores);
  DecodeAttentionArgs hd32 = args(1, 1024, 32, 8);
  hd32.shape.head_dim = 32;
  EXPECT_FALSE(decode_attention_split(hd32, 132).tensor_cores);
  DecodeAttentionArgs off = args(1, 1024, 32, 8);
  off.tensor_cores = false;
  EXPECT_FALSE(decode_attention_split(off, 132).tensor_cores);
}

TEST(DecodeSplitPolicy, PipelineBlocksPerSmOutsideZeroToTwoIsRefused) {
  for (int bad : {-1, 3}) {
    DecodeAttentionArgs a = args(1, 1024, 32, 8);
    a.pipeline_blocks_per_sm = bad;
    EXPECT_THROW(decode_attention(a, nullptr), std::invalid_argument) << bad;  // before any device call
  }
}

TEST(DecodeSplitPolicy, WorkspaceHoldsOutputsSoftmaxStatisticsAndCounters) {
  // head_dim outputs + (max, sum) + one counter per (sequence, head, split).
  EXPECT_EQ(decode_attention_workspace_bytes(2, 4, 128, 3), size_t(2 * 4 * 3 * 131 * 4));
}

}  // namespace
}  // namespace servelab::kernels
