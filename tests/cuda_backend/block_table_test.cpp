// BlockTableDiff (persistent device block tables): a simulated device table that applies each
// step's resize and changes (kernels' block_table_update_ref) holds, for every sequence of every
// step, exactly its blocks, over random runs of joins, growth, leaving, preemption (recompute
// into new blocks), copy-on-write and id reuse; steady decode sends only the appended blocks;
// rows are recycled; the packed input carries rows and changes; and the H2D bytes of a
// 256 sequences x 4k context decode step, full table against changes, on a real paged manager.
#include "engine/backend/step_input.h"
#include "engine/backend/cuda/block_table.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/step_pack.h"
#include "engine/kv/kv_manager.h"
#include "kernels/ref/ops_ref.h"
#include "tests/backend/backend_test_util.h"

namespace servelab::cuda {
namespace {

/// The device side, in plain C++: what resize_block_table and apply_block_table_updates do.
struct FakeDevice {
  std::vector<int32_t> table;
  int rows = 0, stride = 0;
  void apply(const BlockTableStep& t) {
    if (t.resized) {
      ASSERT_EQ(t.old_rows, rows);
      ASSERT_EQ(t.old_stride, stride);
      std::vector<int32_t> fresh(size_t(t.n_rows) * t.stride, 0);
      for (int r = 0; r < rows; ++r)
        std::copy_n(table.begin() + size_t(r) * stride, stride, fresh.begin() + size_t(r) * t.stride);
      table = std::move(fresh);
      rows = t.n_rows;
      stride = t.stride;
    }
    ASSERT_EQ(t.n_rows, rows);
    ASSERT_EQ(t.stride, stride);
    std::set<int32_t> seen;
    for (const auto& u : t.updates) {
      ASSERT_TRUE(u.index >= 0 && size_t(u.index) < table.size()) << u.index;
      ASSERT_TRUE(seen.insert(u.index).second) << "index " << u.index << " updated twice";
    }
    kernels::block_table_update_ref(table.data(), reinterpret_cast<const int32_t*>(t.updates.data()),
                                    static_cast<int>(t.updates.size()));
  }
};

/// A paged step over `seqs` (id -> blocks), context = blocks * bs (the last block full).
kernels::StepInput paged_step(const std::vector<std::pair<uint64_t, std::vector<int32_t>>>& seqs, int bs,
                              std::vector<uint64_t>& ids, std::vector<int> contexts = {}) {
  kernels::StepInput in;
  in.kv_kind = kernels::KvLayoutKind::paged;
  in.block_size = bs;
  int stride = 0;
  for (const auto& [id, b] : seqs) stride = std::max(stride, int(b.size()));
  in.block_table_stride = stride;
  in.block_tables.assign(seqs.size() * size_t(stride), -7);  // beyond a sequence's blocks: never read
  ids.clear();
  for (size_t s = 0; s < seqs.size(); ++s) {
    ids.push_back(seqs[s].first);
    std::copy(seqs[s].second.begin(), seqs[s].second.end(), in.block_tables.begin() + s * stride);
    in.context_lens.push_back(contexts.empty() ? int(seqs[s].second.size()) * bs : contexts[s]);
    in.seq_ids.push_back(seqs[s].first);
  }
  return in;
}

/// The device table serves every sequence of the step its own blocks; row 0 stays zero; the
/// device equals the mirror.
void expect_served(const FakeDevice& d, const BlockTableDiff& diff, const BlockTableStep& t,
                   const kernels::StepInput& in, const std::string& what) {
  ASSERT_EQ(t.rows.size(), size_t(in.n_seqs())) << what;
  std::set<int32_t> rows(t.rows.begin(), t.rows.end());
  EXPECT_EQ(rows.size(), t.rows.size()) << what << ": two sequences share a row";
  EXPECT_EQ(rows.count(0), 0u) << what << ": row 0 is reserved";
  for (int s = 0; s < in.n_seqs(); ++s) {
    const int nb = (in.context_lens[s] + in.block_size - 1) / in.block_size;
    for (int c = 0; c < nb; ++c)
      ASSERT_EQ(d.table[size_t(t.rows[s]) * d.stride + c], in.block_tables[size_t(s) * in.block_table_stride + c])
          << what << ": seq " << s << " block " << c;
  }
  for (int c = 0; c < d.stride; ++c) ASSERT_EQ(d.table[c], 0) << what << ": row 0 written";
  EXPECT_EQ(d.table, diff.mirror()) << what;
}

TEST(BlockTableDiff, RandomStepsReproduceTheFullTable) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937_64 rng(seed);
    const int bs = 1 + int(seed % 3) * 8;  // 1, 9, 17
    BlockTableDiff diff;
    FakeDevice dev;
    std::map<uint64_t, std::vector<int32_t>> live;  // id -> blocks
    std::set<uint64_t> paused;                        // live but out of the batch this step
    uint64_t next_id = 1;
    int32_t next_block = 1;
    auto fresh_blocks = [&](int n) {
      std::vector<int32_t> b;
      for (int i = 0; i < n; ++i) b.push_back(next_block++ % 5000);
      return b;
    };
    size_t total_updates = 0, total_full = 0;
    for (int step = 0; step < 300; ++step) {
      auto pick = [&]() {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        return it;
      };
      // Joins (bursts past 64 rows make the table grow), growth, leaving, preemption, CoW.
      const int joins = step == 150 ? 80 : int(rng() % 3);
      for (int j = 0; j < joins && live.size() < 200; ++j) live[next_id++] = fresh_blocks(1 + int(rng() % 6));
      if (!live.empty()) {
        for (auto& [id, b] : live)
          if (rng() % 3 == 0) b.push_back(next_block++ % 5000);  // grew into a new block
        if (rng() % 2) live.erase(pick());                        // finished
        if (!live.empty() && rng() % 4 == 0) {                    // preempted, recomputed elsewhere
          auto it = pick();
          it->second = fresh_blocks(int(it->second.size()));
        }
        if (!live.empty() && rng() % 4 == 0) {  // copy-on-write of one block
          auto it = pick();
          it->second[rng() % it->second.size()] = next_block++ % 5000;
        }
        if (!live.empty() && rng() % 5 == 0) {  // same id, other blocks (a new KV manager)
          auto it = pick();
          it->second = fresh_blocks(1 + int(rng() % 3));
        }
        if (step == 200) {  // a long context: the stride grows
          auto it = pick();
          const auto more = fresh_blocks(90);
          it->second.insert(it->second.end(), more.begin(), more.end());
        }
        paused.clear();
        for (auto& [id, b] : live)
          if (rng() % 10 == 0) paused.insert(id);
      }
      std::vector<std::pair<uint64_t, std::vector<int32_t>>> seqs;
      for (auto& [id, b] : live)
        if (!paused.count(id)) seqs.push_back({id, b});
      std::shuffle(seqs.begin(), seqs.end(), rng);  // batch order is not row order
      std::vector<uint64_t> ids;
      std::vector<int> contexts;
      for (auto& [id, b] : seqs) contexts.push_back(int(b.size() - 1) * bs + 1 + int(rng() % bs));  // last block partial
      const kernels::StepInput in = paged_step(seqs, bs, ids, contexts);
      BlockTableStep t;
      diff.plan(ids, in, t);
      dev.apply(t);
      expect_served(dev, diff, t, in, "seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (::testing::Test::HasFatalFailure()) return;
      total_updates += t.updates.size();
      for (int c : in.context_lens) total_full += (c + bs - 1) / bs;
    }
    EXPECT_GE(diff.n_rows(), 128) << "the burst of joins grew the table";
    EXPECT_GE(diff.stride(), 91) << "the long context grew the stride";
    EXPECT_LT(total_updates * 3, total_full) << "changes should be a small share of the full tables";
  }
}

TEST(BlockTableDiff, SteadyDecodeSendsOnlyAppendedBlocks) {
  constexpr int bs = 4;
  BlockTableDiff diff;
  FakeDevice dev;
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> seqs;
  std::vector<int> ctx;
  for (int i = 0; i < 8; ++i) {
    seqs.push_back({uint64_t(100 + i), {i * 50, i * 50 + 1}});
    ctx.push_back(5 + i % 4);  // 2 blocks, the second partial
  }
  std::vector<uint64_t> ids;
  BlockTableStep t;
  diff.plan(ids, paged_step(seqs, bs, ids, ctx), t);
  dev.apply(t);
  EXPECT_TRUE(t.resized);
  EXPECT_EQ(t.updates.size(), 16u - 1u) << "every block of every new row, but block 0 (the zero row entry)";
  for (int step = 0; step < 12; ++step) {
    size_t crossing = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ++ctx[i];
      if (ctx[i] > int(seqs[i].second.size()) * bs) {
        seqs[i].second.push_back(1000 + step * 10 + int(i));
        ++crossing;
      }
    }
    const kernels::StepInput in = paged_step(seqs, bs, ids, ctx);
    diff.plan(ids, in, t);
    dev.apply(t);
    expect_served(dev, diff, t, in, "decode step " + std::to_string(step));
    EXPECT_FALSE(t.resized);
    EXPECT_EQ(t.updates.size(), crossing) << "step " << step;
  }
}

TEST(BlockTableDiff, AReservedTableNeverResizesWithinItsLimits) {
  constexpr int bs = 16;
  BlockTableDiff diff;
  diff.reserve(257, 128);  // 256 sequences (+ row 0) of 2048 tokens
  FakeDevice dev;
  std::vector<uint64_t> ids;
  BlockTableStep t;
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> seqs = {{7, {3}}};
  diff.plan(ids, paged_step(seqs, bs, ids), t);
  dev.apply(t);
  EXPECT_TRUE(t.resized);  // the first allocation: the reserved size at once
  EXPECT_EQ(diff.n_rows(), 512);  // powers of two
  EXPECT_EQ(diff.stride(), 128);
  for (int i = 0; i < 255; ++i) seqs.push_back({uint64_t(100 + i), std::vector<int32_t>(128, i + 1)});
  const kernels::StepInput big = paged_step(seqs, bs, ids);
  diff.plan(ids, big, t);
  dev.apply(t);
  EXPECT_FALSE(t.resized) << "256 sequences of 2048 tokens fit the reservation";
  expect_served(dev, diff, t, big, "full step");
  diff.reset();
  seqs.resize(1);
  diff.plan(ids, paged_step(seqs, bs, ids), t);
  EXPECT_EQ(diff.n_rows(), 512) << "reset keeps the reservation";
  BlockTableDiff plain;
  plain.plan(ids, paged_step(seqs, bs, ids), t);
  EXPECT_EQ(plain.n_rows(), BlockTableDiff::kMinRows);
  EXPECT_EQ(plain.stride(), BlockTableDiff::kMinStride);
  EXPECT_THROW(diff.reserve(-1, 4), std::invalid_argument);
}

TEST(BlockTableDiff, APausedSequenceKeepsItsRowAndRowsAreRecycled) {
  BlockTableDiff diff;
  FakeDevice dev;
  std::vector<uint64_t> ids;
  BlockTableStep t;
  diff.plan(ids, paged_step({{1, {5, 6}}, {2, {7}}}, 16, ids), t);
  dev.apply(t);
  const int row1 = t.rows[0];
  diff.plan(ids, paged_step({{2, {7}}}, 16, ids), t);  // 1 pauses
  dev.apply(t);
  EXPECT_TRUE(t.updates.empty());
  diff.plan(ids, paged_step({{2, {7}}, {1, {5, 6}}}, 16, ids), t);  // and returns
  dev.apply(t);
  EXPECT_EQ(t.rows[1], row1);
  EXPECT_TRUE(t.updates.empty()) << "nothing changed";
  // 1000 sequences, 10 at a time: the table never grows past its first 64 rows.
  for (int wave = 0; wave < 100; ++wave) {
    std::vector<std::pair<uint64_t, std::vector<int32_t>>> seqs;
    for (int i = 0; i < 10; ++i) seqs.push_back({uint64_t(1000 + wave * 10 + i), {wave + 1, i + 1}});
    const kernels::StepInput in = paged_step(seqs, 16, ids);
    diff.plan(ids, in, t);
    dev.apply(t);
    expect_served(dev, diff, t, in, "wave " + std::to_string(wave));
  }
  EXPECT_EQ(diff.n_rows(), BlockTableDiff::kMinRows);
  EXPECT_EQ(diff.row_of(1), -1) << "the least recently used rows were handed on";
}

TEST(BlockTableDiff, BadStepsThrowAndLeaveTheMirrorAsItWas) {
  BlockTableDiff diff;
  std::vector<uint64_t> ids;
  BlockTableStep t;
  diff.plan(ids, paged_step({{1, {5, 6}}}, 16, ids), t);
  const std::vector<int32_t> before = diff.mirror();
  kernels::StepInput dup = paged_step({{1, {8, 9}}, {1, {8, 9}}}, 16, ids);
  EXPECT_THROW(diff.plan(ids, dup, t), std::invalid_argument);
  EXPECT_EQ(diff.mirror(), before);
  std::vector<uint64_t> short_ids = {1};
  EXPECT_THROW(diff.plan(short_ids, paged_step({{1, {5}}, {2, {6}}}, 16, ids), t), std::invalid_argument);
  kernels::StepInput naive;
  naive.kv_kind = kernels::KvLayoutKind::naive;
  EXPECT_THROW(diff.plan({}, naive, t), std::invalid_argument);
  EXPECT_EQ(diff.mirror(), before);
}

template <typename T>
std::vector<T> read(const std::vector<uint8_t>& buf, size_t offset, int n) {
  const T* p = reinterpret_cast<const T*>(buf.data() + offset);
  return std::vector<T>(p, p + n);
}

TEST(BlockTableDiff, PackedInputCarriesRowsAndChangesInsteadOfTheTable) {
  Step plan;
  std::vector<uint64_t> ids;
  plan.in = paged_step({{7, {3, 4}}, {9, {5}}}, 4, ids);
  plan.in.context_lens = {6, 3};
  plan.in.token_ids = {1, 2};
  plan.in.positions = {5, 2};
  plan.in.slot_mapping = {4 * 4 + 1, 5 * 4 + 2};
  plan.in.query_start = {0, 1, 2};
  plan.in.decode_only = true;
  for (int i = 0; i < 2; ++i) {
    plan.in.sample_rows.push_back(i);
    plan.in.temperature.push_back(0.0f);
    plan.in.top_k.push_back(0);
    plan.in.top_p.push_back(1.0f);
    plan.in.seed.push_back(0);
    plan.in.seq_key.push_back(0);
    plan.in.sample_position.push_back(plan.in.context_lens[i]);
    plan.in.mask_index.push_back(-1);
  }
  BlockTableDiff diff;
  BlockTableStep t;
  diff.plan(ids, plan.in, t);
  const PackedLayout l = compact_layout(plan, &t);
  EXPECT_TRUE(l.persistent_tables);
  EXPECT_EQ(l.table_stride, 0);
  EXPECT_EQ(l.n_updates, 3);
  std::vector<uint8_t> buf(l.total, 0xAB);
  pack_step(plan, l, buf.data(), &t);
  EXPECT_EQ(read<int32_t>(buf, l.table_rows, 2), t.rows);
  EXPECT_EQ(read<int32_t>(buf, l.update_count, 1), std::vector<int32_t>{3});
  const auto u = read<int32_t>(buf, l.updates, 6);
  EXPECT_EQ(u, (std::vector<int32_t>{t.rows[0] * t.stride, 3, t.rows[0] * t.stride + 1, 4, t.rows[1] * t.stride, 5}));
  EXPECT_EQ(l.total, (l.updates + 3 * 8 + 15) / 16 * 16);  // the list goes last
  // A bucket: padding sequences read the reserved zero row; offsets do not move with the list.
  const PackedLayout b = bucket_layout(plan, 4, 0, &t);
  std::vector<uint8_t> bb(b.total, 0xAB);
  pack_step(plan, b, bb.data(), &t);
  EXPECT_EQ(read<int32_t>(bb, b.table_rows, 4), (std::vector<int32_t>{t.rows[0], t.rows[1], 0, 0}));
  BlockTableStep none = t;
  none.updates.clear();
  const PackedLayout b0 = bucket_layout(plan, 4, 0, &none);
  EXPECT_EQ(b0.updates, b.updates);
  EXPECT_EQ(b0.update_count, b.update_count);
  EXPECT_LT(b0.total, b.total);
}

/// H2D bytes of a decode step at 256 sequences x 4k context (paged, block size 16), from a real
/// paged KvManager through build_step_input: the whole table every step against the changes.
TEST(BlockTableDiff, DecodeStepBytesAt256SequencesOf4kContext) {
  constexpr int kSeqs = 256, kContext = 4096, kBs = 16, kSteps = 32;
  KvConfig kc;
  kc.kind = KvKind::paged;
  kc.block_size = kBs;
  kc.prefix_caching = false;
  kc.max_model_len = kContext + kSteps + kBs;
  auto kv = make_kv_manager(kc, int64_t(kSeqs) * (kContext + kSteps + 2 * kBs));
  std::vector<Sequence> seqs(kSeqs);
  for (int i = 0; i < kSeqs; ++i) {
    // Staggered lengths around 4k, so block boundaries fall on different steps.
    const int n = kContext - kBs + i % kBs;
    seqs[i] = testing::make_sequence(i + 1, std::vector<TokenId>(n, 1));
    seqs[i].sampling.max_tokens = kSteps + 8;
    kv->allocate(seqs[i], n);
    seqs[i].n_computed = n - 1;
  }
  BlockTableDiff diff;
  Step plan;
  BlockTableStep t;
  std::vector<uint64_t> ids;
  size_t full_compact = 0, full_bucket = 0, diff_compact = 0, diff_bucket = 0, n_updates = 0;
  double plan_us_min = 1e30, full_pack_us_min = 1e30;
  std::vector<uint8_t> packed;
  for (int step = 0; step <= kSteps; ++step) {
    Batch b;
    for (Sequence& s : seqs) {
      kv->grow(s, s.n_tokens());
      b.entries.push_back({&s, 1, true});
    }
    build_step_input(b, *kv, 100, plan);
    ids.clear();
    for (const Sequence& s : seqs) ids.push_back(s.id);
    const auto t0 = std::chrono::steady_clock::now();
    diff.plan(ids, plan.in, t);
    const double plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) {
      plan_us_min = std::min(plan_us_min, plan_us);
      const auto t1 = std::chrono::steady_clock::now();
      const PackedLayout fl = compact_layout(plan);
      packed.resize(fl.total);
      pack_step(plan, fl, packed.data());
      full_pack_us_min = std::min(full_pack_us_min, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count());  // step 0 sends every row whole (the sequences are new to the table)
      int context = 256;  // the backend's graph context bucket
      while (context < plan.in.max_context()) context *= 2;
      full_compact += compact_layout(plan).total;
      full_bucket += bucket_layout(plan, kSeqs, context / kBs).total;
      diff_compact += compact_layout(plan, &t).total;
      diff_bucket += bucket_layout(plan, kSeqs, 0, &t).total;
      n_updates += t.updates.size();
    } else {
      size_t blocks = 0;
      for (int c : plan.in.context_lens) blocks += (c + kBs - 1) / kBs;
      EXPECT_LE(t.updates.size(), blocks);
      EXPECT_GE(t.updates.size() + 1, blocks) << "every block but block 0 (the table starts zeroed)";
    }
    for (Sequence& s : seqs) {
      s.n_computed += 1;
      s.tokens.push_back(1);
    }
  }
  std::printf("decode step H2D bytes, %d seqs x ~%d ctx, block %d, mean of %d steps:\n", kSeqs, kContext, kBs, kSteps);
  std::printf("  full table: compact %zu, graph bucket %zu\n", full_compact / kSteps, full_bucket / kSteps);
  std::printf("  changes:    compact %zu, graph bucket %zu (%.1f changed entries a step)\n", diff_compact / kSteps,
              diff_bucket / kSteps, double(n_updates) / kSteps);
  std::printf("  host time a step (fastest of %d, this machine): diff %.1f us; packing the full-table input %.1f us\n",
              kSteps, plan_us_min, full_pack_us_min);
  EXPECT_EQ(n_updates, size_t(kSeqs) * kSteps / kBs) << "one new block per sequence every 16 steps";
  EXPECT_LT(diff_compact * 10, full_compact);
  EXPECT_LT(diff_bucket * 10, full_bucket);
}

}  // namespace
}  // namespace servelab::cuda
