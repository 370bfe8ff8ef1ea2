// decode_attention_rows (several query rows per sequence, read once) on the GPU against the plain
// C++ reference (attention_rows_ref = attention_ref over the rows), on awkward shapes: contexts not
// multiples of the block, 1..8 rows per sequence mixed in one batch, GQA groups 1, 4 and 8, paged
// blocks of 1, 16 and 32 slots and naive, auto and fixed splits; bf16 and fp16; poisoned outputs.
// With a fixed split a row's bits do not depend on the batch or on how many rows its sequence has.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/attention_decode_rows.h"
#include "kernels/ref/attention_rows_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace decode_rows_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;
using testing::KvBatch;

/// b's step in its one-row form: one entry per query row (context = its position + 1, its
/// sequence's table row / base slot), and the spans grouping the entries into b's sequences.
struct OneRowForm {
  std::vector<int32_t> context_lens, block_tables, spans;
  std::vector<int64_t> base_slots;
};

OneRowForm one_row_form(const KvBatch& b) {
  OneRowForm f;
  const StepInput& in = b.in;
  const size_t stride = size_t(in.block_table_stride);
  for (int s = 0; s < in.n_seqs(); ++s) {
    const int q0 = in.query_start[s], q = in.query_start[s + 1] - q0;
    for (int j = 0; j < q; ++j) {
      f.context_lens.push_back(in.context_lens[s] - q + 1 + j);
      f.spans.push_back(j == q - 1 ? q : 0);
      if (in.kv_kind == KvLayoutKind::paged)
        f.block_tables.insert(f.block_tables.end(), in.block_tables.begin() + ptrdiff_t(s * stride),
                              in.block_tables.begin() + ptrdiff_t((s + 1) * stride));
      else
        f.base_slots.push_back(in.base_slots[s]);
    }
  }
  return f;
}

/// The reference through attention_rows_ref (which also checks the spans).
std::vector<float> rows_reference(const KvBatch& b) {
  const OneRowForm f = one_row_form(b);
  std::vector<float> out(b.q.size(), 0.0f);
  AttentionRefArgs a;
  a.q = b.q.data();
  a.k_cache = b.k_cache.data();
  a.v_cache = b.v_cache.data();
  a.shape = b.shape;
  a.n_heads = b.spec.n_heads;
  a.n_seqs = int(f.spans.size());
  a.context_lens = f.context_lens.data();
  a.kv = b.in.addressing();
  a.kv.block_tables = f.block_tables.data();
  a.kv.base_slots = f.base_slots.data();
  a.scale = 1.0f / std::sqrt(float(b.shape.head_dim));
  a.out = out.data();
  attention_rows_ref(a, f.spans.data(), kMaxDecodeRows);
  return out;
}

int sm_count() {
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

/// Runs decode_attention_rows on b's one-row form; `ws` (zeroed once by the caller, or empty: a
/// fresh one) is the workspace.
std::vector<float> run_rows(ScalarType t, const KvBatch& b, SplitPolicy split, DecodeSplit* used = nullptr,
                            DeviceBuffer* ws = nullptr, int queries_per_block = kDecodeRowsQueries) {
  const OneRowForm f = one_row_form(b);
  const DeviceBuffer k = testing::upload16(t, b.k_cache), v = testing::upload16(t, b.v_cache), q = testing::upload16(t, b.q);
  DeviceBuffer out(b.q.size() * 2);
  out.poison();
  const DeviceBuffer ctx = testing::upload(f.context_lens), spans = testing::upload(f.spans);
  const DeviceBuffer tables = testing::upload(f.block_tables.empty() ? std::vector<int32_t>{0} : f.block_tables);
  const DeviceBuffer bases = testing::upload(f.base_slots.empty() ? std::vector<int64_t>{0} : f.base_slots);
  DecodeRowsArgs a;
  DecodeAttentionArgs& d = a.base;
  d.dtype = t;
  d.q = q.get();
  d.q_row_stride = int64_t(b.spec.n_heads) * b.shape.head_dim;
  d.k_cache = k.get();
  d.v_cache = v.get();
  d.shape = b.shape;
  d.n_heads = b.spec.n_heads;
  d.n_seqs = int(f.spans.size());
  d.context_lens = ctx.get<int32_t>();
  d.kv = b.in.addressing();
  d.kv.block_tables = tables.get<int32_t>();
  d.kv.base_slots = bases.get<int64_t>();
  d.max_context = b.in.max_context();
  d.scale = 1.0f / std::sqrt(float(b.shape.head_dim));
  d.out = out.get();
  d.out_row_stride = d.q_row_stride;
  d.split = split;
  a.spans = spans.get<int32_t>();
  a.queries_per_block = queries_per_block;
  const DecodeSplit s = decode_attention_rows_split(a, b.in.n_seqs(), sm_count());
  if (used) *used = s;
  DeviceBuffer own;
  DeviceBuffer& w = ws ? *ws : own;
  const size_t need = decode_attention_workspace_bytes(d.n_seqs, d.n_heads, b.shape.head_dim, s.n_splits);
  if (w.bytes() < need) {
    w = DeviceBuffer(need);
    CUDA_CHECK(cudaMemset(w.get(), 0, w.bytes()));
  }
  d.workspace = w.get<float>();
  d.workspace_bytes = w.bytes();
  decode_attention_rows(a, nullptr, b.in.n_seqs());
  CUDA_CHECK(cudaDeviceSynchronize());
  return testing::download16(t, out, b.q.size());
}

/// Random rows (1..8) for n sequences, with contexts >= their rows, not multiples of 16.
std::vector<int> random_rows(int n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> r(1, kMaxDecodeRows);
  std::vector<int> q(static_cast<size_t>(n));
  for (int& x : q) x = r(rng);
  q[0] = kMaxDecodeRows;
  if (n > 1) q[1] = 1;
  return q;
}

class DecodeRowsGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(DecodeRowsGpu, MatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  bool saw_split = false;
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int bs : {1, 16, 32})
        for (int hd : {64, 128}) {
          if (kind == KvLayoutKind::naive && bs != 16) continue;
          std::vector<int> ctx = {8, 97, 1000, 33, 17, 300, 259, 8, 129};
          const std::vector<int> q = random_rows(int(ctx.size()), rng);
          for (size_t s = 0; s < ctx.size(); ++s) ctx[s] = std::max(ctx[s], q[s]);
          const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, hd, kind, bs}, rng);
          const std::vector<float> ref = rows_reference(b);
          EXPECT_LT(testing::rel_error(ref, testing::reference_attention(b)), 1e-6);  // the grouped reference
          for (SplitPolicy split : {SplitPolicy{}, SplitPolicy{64}, SplitPolicy{256}})
            for (int nq : {8, 4}) {
              DecodeSplit used;
              const std::vector<float> out = run_rows(t, b, split, &used, nullptr, nq);
              saw_split = saw_split || used.n_splits > 1;
              EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t))
                  << "kind " << int(kind) << " group " << group << " block " << bs << " hd " << hd << " split "
                  << split.fixed_split_len << " (" << used.n_splits << " splits), " << nq << " pairs a block";
            }
        }
  EXPECT_TRUE(saw_split);
}

TEST_P(DecodeRowsGpu, ALongContextSplitsAndMatches) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int group : {1, 4}) {
    const KvBatch b = testing::make_batch({{5003, 7}, {5, 7}, 32, 32 / group, 128, KvLayoutKind::paged, 16}, rng);
    DecodeSplit used;
    const std::vector<float> out = run_rows(t, b, SplitPolicy{}, &used);
    EXPECT_GT(used.n_splits, 1);
    EXPECT_LT(testing::rel_error(out, rows_reference(b)), testing::tolerance(t)) << group;
  }
}

// Fixed split: a row's bits are those of the same sequence alone, and those of the same sequence
// cut after that row (fewer rows: the later rows' positions are masked, not absent), with 8 or 4
// (row, head) pairs a block.
TEST_P(DecodeRowsGpu, FixedSplitIsBatchAndRowCountInvariant) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int group : {1, 4, 8}) {
    std::vector<int> ctx = {700, 97, 33, 1000, 5, 260};
    const std::vector<int> q = {8, 3, 1, 5, 5, 7};
    const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, 128, KvLayoutKind::paged, 16}, rng);
    const std::vector<float> all = run_rows(t, b, SplitPolicy{64});
    const std::vector<float> all4 = run_rows(t, b, SplitPolicy{64}, nullptr, nullptr, 4);
    EXPECT_TRUE(std::equal(all.begin(), all.end(), all4.begin())) << "group " << group << ": 8 against 4 pairs a block";
    const size_t row = size_t(8) * 128;
    for (int s : {0, 3, 5})
      for (int cut : {1, 2, q[size_t(s)]}) {  // sequence s alone, its first `cut` rows
        const KvBatch one = testing::rows_of(b, s, 0, cut);
        const std::vector<float> alone = run_rows(t, one, SplitPolicy{64});
        const size_t first = size_t(b.in.query_start[s]) * row;
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + ptrdiff_t(first)))
            << "group " << group << " seq " << s << " rows " << cut;
      }
  }
}

// Every launch leaves the split counters at zero: one workspace serves calls of other shapes.
TEST_P(DecodeRowsGpu, SplitCountersResetAcrossCalls) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  DeviceBuffer ws(decode_attention_workspace_bytes(64, 32, 128, kMaxAutoSplits));
  CUDA_CHECK(cudaMemset(ws.get(), 0, ws.bytes()));
  for (int i = 0; i < 4; ++i) {
    const KvBatch b = testing::make_batch({{2000 + 37 * i, 300}, {1 + i, 8}, 32, 8, 128, KvLayoutKind::paged, 16}, rng);
    const std::vector<float> out = run_rows(t, b, i % 2 ? SplitPolicy{64} : SplitPolicy{}, nullptr, &ws);
    EXPECT_LT(testing::rel_error(out, rows_reference(b)), testing::tolerance(t)) << i;
    EXPECT_TRUE(testing::split_counters_zero(ws, 128)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeRowsGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace decode_rows_gpu_test
}  // namespace servelab::kernels
