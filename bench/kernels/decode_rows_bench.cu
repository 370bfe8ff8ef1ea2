// Verification attention (issue 27): decode_attention_rows (a sequence's k + 1 rows read its K/V
// once) beside the one-row-sequence transform (every row a decode sequence of its own, through
// decode_attention: the K/V read k + 1 times) and plain decode of the same sequences (one row
// each: the floor), on one arena, in the same run. kernel_bench --verify-rows.
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <algorithm>
#include <random>
#include <vector>

#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "kernels/attention.h"
#include "kernels/attention_decode_rows.h"

namespace servelab::kernels::bench {

void bench_decode_rows(std::mt19937_64& rng, int n_sms, double copy_gbs) {
  std::printf("verification attention, paged (block 16, head_dim 128, 32 query heads), k + 1 rows a sequence:\n");
  std::printf("  %-28s %12s %12s %12s %12s %9s %9s\n", "shape", "decode 1row", "transform", "rows (8/blk)", "rows (4/blk)",
              "best/tr", "GB/s best");
  const int hd = 128, n_heads = 32, bs = 16;
  for (int group : {1, 4})
    for (int rows : {2, 5, 8})
      for (int ctx : {384, 4096})
        for (int batch : {1, 32, 64}) {
          if (group > 1 && rows != 5) continue;  // GQA: the backend keeps the transform (tensor cores)
          const int n_kv = n_heads / group;
          const int blocks_per_seq = (ctx + bs - 1) / bs, n_blocks = batch * blocks_per_seq;
          const int64_t n_slots = int64_t(n_blocks) * bs, kv_row = int64_t(n_kv) * hd;
          Buf k(size_t(n_slots * kv_row * 2)), v(size_t(n_slots * kv_row * 2));
          fill_random(k.p, n_slots * kv_row, 11);
          fill_random(v.p, n_slots * kv_row, 12);
          std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          const int n = batch * rows;
          // One-row form: entry e = sequence e / rows, row e % rows; plain decode: one entry a sequence.
          std::vector<int32_t> ctx_rows(static_cast<size_t>(n)), spans(static_cast<size_t>(n)), table_rows(static_cast<size_t>(n)), ctx_plain(static_cast<size_t>(batch), ctx),
              plain_rows(static_cast<size_t>(batch));
          for (int e = 0; e < n; ++e) {
            const int s = e / rows, j = e % rows;
            ctx_rows[size_t(e)] = ctx - rows + 1 + j;
            spans[size_t(e)] = j == rows - 1 ? rows : 0;
            table_rows[size_t(e)] = s;
          }
          std::iota(plain_rows.begin(), plain_rows.end(), 0);
          auto up = [](const std::vector<int32_t>& h) {
            auto b = std::make_unique<Buf>(h.size() * 4);
            CUDA_CHECK(cudaMemcpy(b->p, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
            return b;
          };
          const auto d_tables = up(perm), d_ctx_rows = up(ctx_rows), d_spans = up(spans), d_table_rows = up(table_rows),
                     d_ctx_plain = up(ctx_plain), d_plain_rows = up(plain_rows);
          Buf q(size_t(n) * n_heads * hd * 2), out(size_t(n) * n_heads * hd * 2);
          fill_random(q.p, int64_t(n) * n_heads * hd, 13);
          const size_t ws_bytes = decode_attention_workspace_bytes(n, n_heads, hd, kMaxAutoSplits);
          Buf ws(ws_bytes);
          CUDA_CHECK(cudaMemset(ws.p, 0, ws_bytes));
          DecodeAttentionArgs a;
          a.dtype = ScalarType::bf16;
          a.q = q.p;
          a.q_row_stride = int64_t(n_heads) * hd;
          a.k_cache = k.p;
          a.v_cache = v.p;
          a.shape = KvShape{n_slots, n_kv, hd};
          a.n_heads = n_heads;
          a.kv.kind = KvLayoutKind::paged;
          a.kv.block_tables = d_tables->get<int32_t>();
          a.kv.block_table_stride = blocks_per_seq;
          a.kv.block_size = bs;
          a.max_context = ctx;
          a.scale = 1.0f / std::sqrt(float(hd));
          a.out = out.p;
          a.out_row_stride = a.q_row_stride;
          a.workspace = ws.get<float>();
          a.workspace_bytes = ws_bytes;
          DecodeAttentionArgs plain = a, transform = a;
          plain.n_seqs = batch;
          plain.context_lens = d_ctx_plain->get<int32_t>();
          plain.kv.block_table_rows = d_plain_rows->get<int32_t>();
          transform.n_seqs = n;
          transform.context_lens = d_ctx_rows->get<int32_t>();
          transform.kv.block_table_rows = d_table_rows->get<int32_t>();
          DecodeRowsArgs r;
          r.base = transform;
          r.spans = d_spans->get<int32_t>();
          const double t_plain = time_graph_ms([&](int, cudaStream_t s) { decode_attention(plain, s); }, 20, 20);
          const double t_tr = time_graph_ms([&](int, cudaStream_t s) { decode_attention(transform, s); }, 20, 20);
          const double t_rows = time_graph_ms([&](int, cudaStream_t s) { decode_attention_rows(r, s, batch); }, 20, 20);
          DecodeRowsArgs r4 = r;
          r4.queries_per_block = 4;
          const double t_rows4 = time_graph_ms([&](int, cudaStream_t s) { decode_attention_rows(r4, s, batch); }, 20, 20);
          const double best = std::min(t_rows, t_rows4);
          const double bytes = 2.0 * double(batch) * ctx * kv_row * 2;  // K and V of every sequence once
          char shape[64];
          std::snprintf(shape, sizeof shape, "gqa%d k+1=%d ctx%d b%d", group, rows, ctx, batch);
          std::printf("  %-28s %10.1f us %10.1f us %10.1f us %10.1f us %8.3fx %9.0f\n", shape, t_plain * 1e3, t_tr * 1e3,
                      t_rows * 1e3, t_rows4 * 1e3, best / t_tr, bytes / (best * 1e-3) / 1e9);
        }
  (void)n_sms;
  (void)copy_gbs;
}

}  // namespace servelab::kernels::bench
