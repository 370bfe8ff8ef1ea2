#pragma once
// kernel_bench's paged KV batch on the device: a batch of sequences' K/V over one arena, laid out
// as a long-running paged cache leaves it (ArenaOrder), with the arguments of a decode step over
// it. Shared by the decode and prefill attention benchmarks (decode_attn_bench.cu,
// prefill_attn_bench.cu) and kernel_bench.cu's validation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "engine/kv/paged_churn.h"
#include "kernels/attention.h"
#include "bench/kernels/bench_util.cuh"

namespace servelab::kernels::bench {

/// How a PagedBatch lays its sequences' blocks over the arena: shuffled (the default: a block
/// table as a long-running paged cache leaves it), identity (the table's blocks in arena order, so
/// a sequence's slots are one contiguous run) or naive (the same contiguous runs addressed by
/// KvAddressing::base_slots, no block table).
/// window: shuffled within aligned groups of 64 blocks (2 MB of K rows at 8 KV heads, block 16).
/// engine: the tables the engine's PagedKvManager gives the batch's sequences after a seeded
/// serving churn (engine/kv/paged_churn.h: background requests come and go while these prefill a
/// share of ctx and decode to it), in an arena 1.5x their blocks.
enum class ArenaOrder { shuffled, identity, naive, window, engine };

/// A paged batch on the device: n_rot independent copies of every sequence's KV (rotation),
/// blocks shuffled over one arena (or in order: ArenaOrder).
struct PagedBatch {
  int batch, ctx, n_heads, n_kv, hd = 128, bs = 16, n_rot = 1;
  ArenaOrder order = ArenaOrder::shuffled;
  int64_t n_slots = 0;
  std::unique_ptr<Buf> k, v, q, out, ctx_lens, qstart, tables, bases, ws;
  int blocks_per_seq = 0;
  double mean_run_blocks = 0;  ///< engine: blocks per physical run of the batch's tables
  PagedBatch(int batch_, int ctx_, int n_heads_, int n_kv_, int64_t l2_bytes, std::mt19937_64& rng,
             ArenaOrder order_ = ArenaOrder::shuffled, int block_size = 16)
      : batch(batch_), ctx(ctx_), n_heads(n_heads_), n_kv(n_kv_), bs(block_size), order(order_) {
    const int64_t kv_bytes = int64_t(batch) * ctx * n_kv * hd * 2 * 2;
    n_rot = int(std::min<int64_t>(8, std::max<int64_t>(1, 4 * l2_bytes / kv_bytes + 1)));
    blocks_per_seq = (ctx + bs - 1) / bs;
    int64_t n_blocks = int64_t(blocks_per_seq) * batch * n_rot;
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    if (order == ArenaOrder::engine) {  // every rotation's sequences are targets of one churn
      PagedChurnConfig churn;
      churn.block_size = bs;
      churn.n_targets = batch * n_rot;
      churn.ctx = ctx;
      const PagedChurnResult r = run_paged_churn(churn);
      n_blocks = r.n_blocks;
      for (size_t i = 0; i < r.tables.size(); ++i) std::copy(r.tables[i].begin(), r.tables[i].end(), perm.begin() + i * blocks_per_seq);
      mean_run_blocks = r.mean_run_blocks();
      std::printf("  engine layout, %d x ctx %d: %lld-block arena after %lld steps, %lld background requests: %.1f blocks per run\n",
                  churn.n_targets, ctx, (long long)r.n_blocks, (long long)r.n_steps, (long long)r.n_background, mean_run_blocks);
    }
    n_slots = n_blocks * bs;
    k = std::make_unique<Buf>(n_slots * n_kv * hd * 2);
    v = std::make_unique<Buf>(n_slots * n_kv * hd * 2);
    fill_random(k->p, n_slots * n_kv * hd, rng());
    fill_random(v->p, n_slots * n_kv * hd, rng());
    if (order == ArenaOrder::shuffled) std::shuffle(perm.begin(), perm.end(), rng);
    if (order == ArenaOrder::window)
      for (size_t w = 0; w < perm.size(); w += 64) std::shuffle(perm.begin() + w, perm.begin() + std::min(perm.size(), w + 64), rng);
    tables = std::make_unique<Buf>(perm.size() * 4);  // rotation r uses rows [r * batch, (r+1) * batch)
    CUDA_CHECK(cudaMemcpy(tables->p, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int64_t> base(size_t(batch) * n_rot);  // naive: sequence i of all rotations at slot i * blocks * bs
    for (size_t i = 0; i < base.size(); ++i) base[i] = int64_t(i) * blocks_per_seq * bs;
    bases = std::make_unique<Buf>(base.size() * 8);
    CUDA_CHECK(cudaMemcpy(bases->p, base.data(), base.size() * 8, cudaMemcpyHostToDevice));
    q = std::make_unique<Buf>(size_t(batch) * n_heads * hd * 2);
    fill_random(q->p, int64_t(batch) * n_heads * hd, rng());
    out = std::make_unique<Buf>(size_t(batch) * n_heads * hd * 2);
    std::vector<int32_t> lens(batch, ctx), qs(batch + 1);
    std::iota(qs.begin(), qs.end(), 0);
    ctx_lens = std::make_unique<Buf>(batch * 4);
    qstart = std::make_unique<Buf>((batch + 1) * 4);
    CUDA_CHECK(cudaMemcpy(ctx_lens->p, lens.data(), batch * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(qstart->p, qs.data(), (batch + 1) * 4, cudaMemcpyHostToDevice));
  }
  DecodeAttentionArgs decode_args(int rot, SplitPolicy split, int n_sms, bool tensor_cores = true,
                                  int max_cluster = DecodeAttentionArgs{}.max_cluster_splits, bool pipeline = true,
                                  int pipe_bps = 0) {
    DecodeAttentionArgs a;
    a.q = q->p;
    a.q_row_stride = int64_t(n_heads) * hd;
    a.k_cache = k->p;
    a.v_cache = v->p;
    a.shape = KvShape{n_slots, n_kv, hd};
    a.n_heads = n_heads;
    a.n_seqs = batch;
    a.context_lens = ctx_lens->get<int32_t>();
    a.kv.kind = KvLayoutKind::paged;
    a.kv.block_size = bs;
    a.kv.block_table_stride = blocks_per_seq;
    a.kv.block_tables = tables->get<int32_t>() + size_t(rot % n_rot) * batch * blocks_per_seq;
    if (order == ArenaOrder::naive) {
      a.kv.kind = KvLayoutKind::naive;
      a.kv.base_slots = bases->get<int64_t>() + size_t(rot % n_rot) * batch;
    }
    a.max_context = ctx;
    a.scale = 1.0f / std::sqrt(float(hd));
    a.out = out->p;
    a.out_row_stride = a.q_row_stride;
    a.split = split;
    a.tensor_cores = tensor_cores;
    a.max_cluster_splits = max_cluster;
    a.pipeline = pipeline;
    a.pipeline_blocks_per_sm = pipe_bps;
    const DecodeSplit s = decode_attention_split(a, n_sms);
    const size_t need = decode_attention_workspace_bytes(batch, n_heads, hd, s.n_splits);
    if (!ws || ws->bytes < need) {
      ws = std::make_unique<Buf>(need);
      CUDA_CHECK(cudaMemset(ws->p, 0, need));  // the split counters start at zero
    }
    a.workspace = ws->get<float>();
    a.workspace_bytes = ws->bytes;
    return a;
  }
};

}  // namespace servelab::kernels::bench
