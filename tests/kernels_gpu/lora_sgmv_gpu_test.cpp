// The grouped LoRA kernels (kernels/lora_sgmv.h) against their C++ references on awkward shapes:
// ranks 8, 12 (no 16-byte loads), 16 and 64; 1 to 3 segments; inputs that are not a multiple of
// the shrink's chunk; rows without an adapter among mixed slots; decode-sized and prefill-sized
// steps; eagerly and from a CUDA graph replayed after the rows' slots changed; under each launch
// variant (LoraSgmvConfig: expand by slot tiles or by rows, register cap on or off, chunking,
// slot-tile grids of a block per item or of 1 or 3 blocks an SM looping over the items); and the
// expand writing the delta alone (accumulate = false, LoraSgmvConfig::gate_up_beside); the expand
// choosing slot tiles or rows on the device (expand_auto); the expand launched with PDL.
#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/lora_sgmv.h"
#include "kernels/ref/lora_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/lora_pool_util.h"

namespace servelab::kernels {
namespace {

using testing::DeviceBuffer;

class LoraSgmvGpu : public ::testing::TestWithParam<ScalarType> {};

struct SgmvCase {
  int rows, n_in, max_rank, n_slots;
  std::vector<int> seg_out;  // output columns per segment
  int run;                   // rows come in runs of this many of one slot (1: every row its own)
};

/// The plan's device buffers for n_rows rows over n_slots slots.
struct PlanBuffers {
  DeviceBuffer n_tiles, tiles, perm, perm_slot;
  LoraSgmvConfig config;
  PlanBuffers(int n_rows, int n_slots, LoraSgmvConfig c = {})
      : n_tiles(8),
        tiles(size_t(lora_max_tiles(n_rows, n_slots)) * 12),
        perm(size_t(std::max(n_rows, 1)) * 4),
        perm_slot(size_t(std::max(n_rows, 1)) * 4),
        config(c) {}
  LoraPlan plan() const {
    return LoraPlan{n_tiles.get<int32_t>(), tiles.get<int32_t>(), perm.get<int32_t>(), perm_slot.get<int32_t>(),
                    config};
  }
};

/// The launch variants every case runs under (engine_bench --lora times them).
LoraSgmvConfig no_auto(LoraSgmvConfig c) {
  c.expand_auto = false;
  return c;
}
/// Slot tiles with expand_auto (the default) pick by rows on the device for steps of many short
/// tiles (here the 64-slot case's mixes), slot tiles otherwise (its one-adapter replay).
const LoraSgmvConfig kSgmvVariants[] = {
    {false, true, kLoraDefaultTargetBlocks, 3},  // auto: slot tiles or rows, 3 blocks an SM looping over items
    {false, true, kLoraDefaultTargetBlocks, 0},  // auto, a block per possible item
    no_auto({false, true, kLoraDefaultTargetBlocks, 0}),  // slot tiles only, register cap, a block per item
    no_auto({false, false, 264, 1}),             // slot tiles only, no cap, chunks aimed at 2 blocks an SM, 1 an SM
    {true, true, kLoraDefaultTargetBlocks, 0},   // row blocks, register cap
    {true, false, kLoraDefaultTargetBlocks, 0},  // row blocks, no cap
};

/// Slots of `rows` rows in runs of `run`: -1 (no adapter) for every fourth run, else run index mod n_slots.
std::vector<int32_t> slot_pattern(int rows, int run, int n_slots, int shift) {
  std::vector<int32_t> slot(static_cast<size_t>(rows), 0);
  for (int r = 0; r < rows; ++r) {
    const int q = r / run + shift;
    slot[size_t(r)] = q % 4 == 3 ? -1 : int32_t((q * 5 + 1) % n_slots);
  }
  return slot;
}

void check_plan(const PlanBuffers& pb, const std::vector<int32_t>& slot, int n_slots) {
  const int rows = int(slot.size());
  const LoraPlanRef ref = lora_plan_ref(slot.data(), rows, n_slots, kLoraTileRows);
  const std::vector<int32_t> counts = testing::download<int32_t>(pb.n_tiles, 2);
  const int n_tiles = counts[0];
  ASSERT_EQ(n_tiles, ref.n_tiles());
  ASSERT_EQ(counts[1], int(ref.perm.size()));  // rows with an adapter
  ASSERT_LE(n_tiles, lora_max_tiles(rows, n_slots));
  const std::vector<int32_t> tiles = testing::download<int32_t>(pb.tiles, size_t(n_tiles) * 3);
  EXPECT_EQ(tiles, ref.tiles);
  // Within a slot the device leaves rows in any order: compare each slot's rows as sets.
  std::vector<int32_t> perm = testing::download<int32_t>(pb.perm, ref.perm.size());
  const std::vector<int32_t> perm_slot = testing::download<int32_t>(pb.perm_slot, ref.perm.size());
  for (size_t i = 0; i < perm.size(); ++i) ASSERT_EQ(perm_slot[i], slot[size_t(perm[i])]) << "perm_slot[" << i << "]";
  for (int t = 0; t < n_tiles; ++t) {
    const int s = tiles[size_t(3 * t)], p0 = tiles[size_t(3 * t + 1)], n = tiles[size_t(3 * t + 2)];
    for (int i = p0; i < p0 + n; ++i) ASSERT_EQ(slot[size_t(perm[size_t(i)])], s) << "perm[" << i << "]";
  }
  std::vector<int32_t> sorted_ref = ref.perm;
  std::sort(perm.begin(), perm.end());
  std::sort(sorted_ref.begin(), sorted_ref.end());
  EXPECT_EQ(perm, sorted_ref);
}

/// accumulate = false: the expand writes the delta alone into its rows (lora_silu_mul's input).
/// pdl: the expand launched with programmatic dependent launch after the shrink (the backend's
/// expands into the residual or the delta scratch), eagerly and inside the graph.
void run_case(ScalarType t, const SgmvCase& cs, uint64_t seed, const LoraSgmvConfig& config, bool accumulate = true,
              bool pdl = false) {
  SCOPED_TRACE("accumulate " + std::to_string(accumulate) + " " +
               "rows " + std::to_string(cs.rows) + " n_in " + std::to_string(cs.n_in) + " rank " +
               std::to_string(cs.max_rank) + " segments " + std::to_string(cs.seg_out.size()) + " expand_by_rows " +
               std::to_string(config.expand_by_rows) + " cap " + std::to_string(config.expand_register_cap) +
               " target_blocks " + std::to_string(config.shrink_target_blocks) + " blocks_per_sm " +
               std::to_string(config.grid_blocks_per_sm) + " auto " + std::to_string(config.expand_auto) + " pdl " +
               std::to_string(pdl));
  std::mt19937_64 rng(seed);
  const int n_seg = int(cs.seg_out.size()), total = n_seg * cs.max_rank, c0 = 24;
  int seg_end[kLoraMaxSegments] = {}, n_out = 0;
  for (int m = 0; m < n_seg; ++m) seg_end[m] = n_out += cs.seg_out[size_t(m)];
  const int ld_y = n_out + 40;
  const std::vector<float> x = testing::random16(t, size_t(cs.rows) * cs.n_in, rng);
  const std::vector<float> a = testing::random16(t, size_t(cs.n_slots) * total * cs.n_in, rng, 0.05f);
  const std::vector<float> b = testing::random16(t, size_t(cs.n_slots) * n_out * cs.max_rank, rng, 0.2f);
  std::vector<float> scale(size_t(cs.n_slots));
  for (int s = 0; s < cs.n_slots; ++s) scale[size_t(s)] = 0.25f + 0.5f * float(s);
  const std::vector<float> y0 = testing::random16(t, size_t(cs.rows) * ld_y, rng);

  DeviceBuffer dx = testing::upload16(t, x), da = testing::upload16(t, a), db = testing::upload16(t, b);
  DeviceBuffer ds = testing::upload(scale);
  const LoraPool pool =
      testing::lora_test_pool(da.get(), db.get(), ds.get<float>(), cs.n_slots, cs.n_in, cs.max_rank, cs.seg_out);
  PlanBuffers pb(cs.rows, cs.n_slots, config);
  const size_t part_floats = lora_partial_floats(pool, cs.rows, config.shrink_target_blocks);
  DeviceBuffer dpart(part_floats * 4 + 16);
  ASSERT_LE(part_floats, size_t(cs.rows) * lora_partial_floats_per_row(cs.n_in, total));
  DeviceBuffer dslot(size_t(cs.rows) * 4), dy(size_t(cs.rows) * ld_y * 2);

  auto enqueue = [&](cudaStream_t s) {
    lora_plan(dslot.get<int32_t>(), cs.rows, cs.n_slots, pb.plan(), s);
    lora_sgmv_shrink(t, dx.get(), pb.plan(), cs.rows, pool, dpart.get<float>(), s);
    lora_sgmv_expand(t, dpart.get<float>(), pb.plan(), cs.rows, pool, dy.get(), ld_y, c0, s, accumulate, pdl);
  };
  auto set_inputs = [&](const std::vector<int32_t>& slot) {
    CUDA_CHECK(cudaMemcpy(dslot.get(), slot.data(), slot.size() * 4, cudaMemcpyHostToDevice));
    DeviceBuffer fresh = testing::upload16(t, y0);
    CUDA_CHECK(cudaMemcpy(dy.get(), fresh.get(), fresh.bytes(), cudaMemcpyDeviceToDevice));
    dpart.poison();
    CUDA_CHECK(cudaDeviceSynchronize());
  };
  auto check = [&](const std::vector<int32_t>& slot, const char* how) {
    SCOPED_TRACE(how);
    std::vector<float> xa_ref(size_t(cs.rows) * total), y_ref = y0;
    if (!accumulate)  // the adapter rows' columns c0 .. c0 + n_out hold the delta alone
      for (int r = 0; r < cs.rows; ++r)
        if (slot[size_t(r)] >= 0) std::fill_n(y_ref.begin() + int64_t(r) * ld_y + c0, n_out, 0.0f);
    lora_shrink_ref(x.data(), slot.data(), cs.rows, a.data(), scale.data(), cs.n_in, total, xa_ref.data());
    lora_expand_segments_ref(xa_ref.data(), slot.data(), cs.rows, b.data(), n_out, cs.max_rank, n_seg, seg_end,
                             y_ref.data(), ld_y, c0);
    check_plan(pb, slot, cs.n_slots);
    const std::vector<float> y = testing::download16(t, dy, y_ref.size());
    EXPECT_LT(testing::rel_error(y, y_ref), testing::tolerance(t));
    for (int r = 0; r < cs.rows; ++r) {  // rows without an adapter untouched, bit for bit
      if (slot[size_t(r)] >= 0) continue;
      for (int c = 0; c < ld_y; ++c) ASSERT_EQ(y[size_t(r) * ld_y + c], y0[size_t(r) * ld_y + c]) << "row " << r;
    }
  };

  const std::vector<int32_t> first = slot_pattern(cs.rows, cs.run, cs.n_slots, 0);
  set_inputs(first);
  enqueue(nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  check(first, "eager");
  // One graph, replayed with other slots in the same buffer: the plan is rebuilt inside it.
  testing::CapturedGraph g(enqueue);
  const std::vector<int32_t> second = slot_pattern(cs.rows, cs.run, cs.n_slots, 1);
  set_inputs(second);
  g.replay();
  check(second, "graph, other slots");
  std::vector<int32_t> one(size_t(cs.rows), int32_t(cs.n_slots - 1));  // every row one adapter
  set_inputs(one);
  g.replay();
  check(one, "graph, one adapter");
  std::vector<int32_t> none(size_t(cs.rows), -1);
  set_inputs(none);
  g.replay();
  check(none, "graph, no adapter");
}

TEST_P(LoraSgmvGpu, MatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  const SgmvCase cases[] = {
      {37, 896, 16, 5, {600}, 1},              // decode: every row its own draw, 896 = 3.5 chunks of 256
      {64, 1032, 8, 9, {128, 64, 64}, 1},      // q|k|v-like, rank 8, a short last chunk
      {300, 264, 64, 3, {200, 136}, 7},        // prefill-sized: runs of 7 rows, gate|up-like, rank 64
      {9, 520, 12, 2, {100}, 1},               // rank 12: the expand's scalar loads
      {130, 4104, 16, 64, {96}, 3},            // many slots, a wide input split in many chunks
  };
  uint64_t seed = 31;
  for (const LoraSgmvConfig& config : kSgmvVariants)
    for (const SgmvCase& cs : cases) run_case(t, cs, seed++, config);
  // The delta alone (accumulate = false) and PDL, auto and by rows, on two of the shapes; PDL
  // with y accumulated on all five under the default.
  for (const LoraSgmvConfig& config : {kSgmvVariants[1], kSgmvVariants[4]})
    for (int i : {0, 4}) run_case(t, cases[i], seed++, config, false, true);
  for (const SgmvCase& cs : cases) run_case(t, cs, seed++, LoraSgmvConfig{}, true, true);
}

TEST_P(LoraSgmvGpu, RefusesBadPools) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  PlanBuffers pb(4, 2);
  LoraPool pool;
  pool.n_slots = 2;
  pool.n_in = 12;  // not a multiple of 8
  pool.n_out = 8;
  pool.max_rank = 8;
  EXPECT_THROW(lora_sgmv_shrink(t, nullptr, pb.plan(), 4, pool, nullptr, nullptr), std::invalid_argument);
  pool.n_in = 16;
  pool.max_rank = kLoraMaxRank + 1;
  EXPECT_THROW(lora_sgmv_expand(t, nullptr, pb.plan(), 4, pool, nullptr, 8, 0, nullptr), std::invalid_argument);
  EXPECT_THROW(lora_plan(nullptr, 4, 0, pb.plan(), nullptr), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraSgmvGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace
}  // namespace servelab::kernels
