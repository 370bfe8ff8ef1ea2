// The reference of the multi-row decode attention (kernels/ref/attention_rows_ref.h): a step in
// its one-row form with row spans gives attention_ref's rows of the grouped step, bit for bit,
// and spans that do not describe sequences of consecutive rows are refused, naming the entry.
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ref/attention_rows_ref.h"
#include "tests/kernels/kv_fixture.h"

namespace servelab::kernels {
namespace attention_rows_ref_test {  // named, not anonymous: a unity batch shares one translation unit

TEST(AttentionRowsRef, TheOneRowFormGivesTheGroupedRowsBitForBit) {
  std::mt19937_64 rng(5);
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive}) {
    const testing::KvBatch b = testing::make_batch({{9, 40, 3, 17}, {8, 1, 3, 5}, 8, 2, 32, kind, 4}, rng);
    std::vector<int32_t> ctx, spans, tables;
    std::vector<int64_t> bases;
    const size_t stride = size_t(b.in.block_table_stride);
    for (int s = 0; s < b.in.n_seqs(); ++s) {
      const int q = b.in.query_start[s + 1] - b.in.query_start[s];
      for (int j = 0; j < q; ++j) {
        ctx.push_back(b.in.context_lens[s] - q + 1 + j);
        spans.push_back(j == q - 1 ? q : 0);
        if (kind == KvLayoutKind::paged)
          tables.insert(tables.end(), b.in.block_tables.begin() + ptrdiff_t(s * stride),
                        b.in.block_tables.begin() + ptrdiff_t((s + 1) * stride));
        else
          bases.push_back(b.in.base_slots[s]);
      }
    }
    std::vector<float> out(b.q.size(), -1.0f);
    AttentionRefArgs a;
    a.q = b.q.data();
    a.k_cache = b.k_cache.data();
    a.v_cache = b.v_cache.data();
    a.shape = b.shape;
    a.n_heads = 8;
    a.n_seqs = int(spans.size());
    a.context_lens = ctx.data();
    a.kv = b.in.addressing();
    a.kv.block_tables = tables.data();
    a.kv.base_slots = bases.data();
    a.scale = 1.0f / std::sqrt(32.0f);
    a.out = out.data();
    attention_rows_ref(a, spans.data(), 8);
    EXPECT_EQ(out, testing::reference_attention(b)) << "layout " << int(kind);
  }
}

TEST(AttentionRowsRef, SpansThatAreNotSequencesAreRefusedNamingTheEntry) {
  const std::vector<int32_t> ctx = {5, 6, 7, 10};
  auto message = [&](std::vector<int32_t> spans, int max_rows = 8) {
    try {
      check_decode_row_spans(spans.data(), ctx.data(), int(ctx.size()), max_rows);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({0, 0, 3, 1}), "");
  EXPECT_EQ(message({1, 1, 1, 1}), "");
  EXPECT_NE(message({0, 0, 3, 0}).find("entry 3"), std::string::npos);      // a last row without its span
  EXPECT_NE(message({0, 0, 3, 1}, 2).find("entry 2"), std::string::npos);   // more rows than allowed
  EXPECT_NE(message({0, 2, 3, 1}).find("entry 1"), std::string::npos);      // a sequence inside another
  EXPECT_NE(message({0, 0, 0, 4}).find("entry 2"), std::string::npos);      // positions not consecutive
  EXPECT_NE(message({0, 0, 5, 1}).find("entry 2"), std::string::npos);      // rows before the first entry
}

}  // namespace attention_rows_ref_test
}  // namespace servelab::kernels
