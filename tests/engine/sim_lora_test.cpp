// The sim backend prices multi-LoRA (engine/backend/sim_lora.h): a step's decode rows on adapters
// cost the fitted kernel time per layer by their count (knots) plus the distinct adapters' weights at
// the fitted bandwidth share; adapted prefill rows a fixed part, a part per run after the first and
// per row; a load the
// copy over the host link; the cpu-2core device the adapters' FLOPs alone; and the engine on the sim
// tells its steps' adapters to the backend, so a run with adapters takes longer than without.
#include <gtest/gtest.h>

#include <memory>

#include "engine/backend/sim_backend.h"
#include "engine/backend/sim_lora.h"
#include "engine/lora/lora_adapter.h"
#include "tests/engine/engine_test_support.h"

namespace servelab::enginetest {
namespace sim_lora_test {  // named, not anonymous: a unity batch shares one translation unit

using T = LoraTarget;

/// A shape of `rows[s]` query rows per sequence (context 64 + rows) with seq_lora_slot `slot` (may be empty).
Step shape_step(const std::vector<int>& rows, const std::vector<int>& slot) {
  Step st;
  st.shape_only = true;
  st.in.query_start.push_back(0);
  for (size_t s = 0; s < rows.size(); ++s) {
    st.in.query_start.push_back(st.in.query_start.back() + rows[s]);
    st.in.context_lens.push_back(64 + rows[s]);
    st.in.seq_ids.push_back(int64_t(s) + 1);
    if (s < slot.size()) st.seq_lora_slot.push_back(slot[s]);
  }
  return st;
}

TEST(SimLora, DecodeRowsCostTheirKernelsAndTheDistinctAdaptersWeights) {
  const ModelConfig c = micro_model();
  const SimDevice d = SimDevice::preset("h200");
  const LoraAdapter a = random_lora(c, "a", 8, 16.0f, {T::q, T::k, T::v, T::o, T::gate, T::up, T::down}, 1);
  const LoraAdapter b = random_lora(c, "b", 4, 8.0f, {T::q, T::v}, 2);
  const int64_t pa = lora_params(c, &a), pb = lora_params(c, &b);
  int64_t counted = 0;  // the weights' own count: every layer holds each targeted pair
  for (const auto& layer : a.layers)
    for (const LoraPair& p : layer) counted += int64_t(p.a.size() + p.b.size());
  EXPECT_EQ(pa, counted);
  ASSERT_GT(pa, pb);
  const std::vector<SimLoraSlot> slots = {{pa}, {pb}};
  const double L = c.n_layers, bw = d.lora_bandwidth_share * d.mem_bw_bytes_s;
  // Three decode rows on a, one on none.
  const double one = lora_step_seconds(d, c, shape_step({1, 1, 1, 1}, {0, 0, -1, 0}), slots);
  EXPECT_DOUBLE_EQ(one, L * lora_decode_layer_seconds(d, 3) + double(pa) * d.weight_dtype_bytes / bw);
  // A second adapter reads its weights once more; its row costs one more row.
  const double two = lora_step_seconds(d, c, shape_step({1, 1, 1, 1}, {0, 0, 1, 0}), slots);
  EXPECT_NEAR(two - one,
              L * (lora_decode_layer_seconds(d, 4) - lora_decode_layer_seconds(d, 3)) +
                  double(pb) * d.weight_dtype_bytes / bw,
              1e-15);
  // No adapter, or none told: nothing.
  EXPECT_EQ(lora_step_seconds(d, c, shape_step({1, 1}, {-1, -1}), slots), 0.0);
  EXPECT_EQ(lora_step_seconds(d, c, shape_step({1, 1}, {}), slots), 0.0);
  // A slot never loaded prices nothing.
  EXPECT_EQ(lora_step_seconds(d, c, shape_step({1}, {5}), slots), 0.0);
}

TEST(SimLora, DecodeRowsFollowTheKnotsThenTheLastKnotsRatePerRow) {
  SimDevice d = SimDevice::preset("h200");
  d.lora_decode_knots = 3;
  d.lora_decode_knot_rows = {1, 8, 32};
  d.lora_decode_knot_s = {4e-6, 20e-6, 16e-6};  // dearer at 8 rows than at 32 (an H200's gemv path)
  EXPECT_EQ(lora_decode_layer_seconds(d, 0), 0.0);
  EXPECT_DOUBLE_EQ(lora_decode_layer_seconds(d, 0.5), 2e-6);  // from (0, 0) to the first knot
  EXPECT_DOUBLE_EQ(lora_decode_layer_seconds(d, 1), 4e-6);
  EXPECT_DOUBLE_EQ(lora_decode_layer_seconds(d, 8), 20e-6);
  EXPECT_DOUBLE_EQ(lora_decode_layer_seconds(d, 20), 18e-6);  // halfway from 8 to 32
  EXPECT_DOUBLE_EQ(lora_decode_layer_seconds(d, 64), 32e-6);  // 16 us over 32 rows, 64 rows
  d.validate();
  d.lora_decode_knots = 0;  // no knots: the per-row figure
  EXPECT_DOUBLE_EQ(lora_decode_layer_seconds(d, 10), 10 * d.lora_decode_row_s);
  d.lora_decode_knots = 3;
  d.lora_decode_knot_rows = {1, 8, 8};
  EXPECT_THROW(d.validate(), std::invalid_argument);  // rows must ascend
  d.lora_decode_knot_rows = {1, 8, 32};
  d.lora_decode_knot_s[1] = -1e-6;
  EXPECT_THROW(d.validate(), std::invalid_argument);
  SimDevice::preset("h200").validate();
  EXPECT_GT(SimDevice::preset("h200").lora_decode_knots, 0);  // the GPU presets carry the H200's knots
  EXPECT_EQ(SimDevice::preset("cpu-2core").lora_decode_knots, 0);
}

TEST(SimLora, PrefillRowsCostAFixedPartOnePerRunAfterTheFirstAndOnePerRow) {
  const ModelConfig c = micro_model();
  const SimDevice d = SimDevice::preset("h200");
  const LoraAdapter a = random_lora(c, "a", 8, 16.0f, {T::q, T::v, T::down}, 1);
  const std::vector<SimLoraSlot> slots = {{lora_params(c, &a)}, {lora_params(c, &a)}};
  const double L = c.n_layers, w = double(lora_params(c, &a)) * d.weight_dtype_bytes;
  const double bw = d.lora_bandwidth_share * d.mem_bw_bytes_s;
  // Prompts of 30 and 20 rows on two slots, a decode row on the first.
  const double got = lora_step_seconds(d, c, shape_step({30, 20, 1}, {0, 1, 0}), slots);
  const double kernels = L * (d.lora_prefill_layer_s + 1 * d.lora_prefill_run_s + 50 * d.lora_prefill_row_s) +
                         L * lora_decode_layer_seconds(d, 1);
  EXPECT_NEAR(got, kernels + 2 * w / bw, 1e-15);
  // The same rows told per row (a full step's in.lora_slot, no seq_lora_slot): the same price.
  Step full = shape_step({30, 20, 1}, {});
  for (int r = 0; r < 51; ++r) full.in.lora_slot.push_back(r < 30 ? 0 : r < 50 ? 1 : 0);
  EXPECT_DOUBLE_EQ(lora_step_seconds(d, c, full, slots), got);
}

TEST(SimLora, APrefillPaysPerRunOfOneAdaptersConsecutivePromptsNotPerAdapter) {
  // The cuda backend multiplies each contiguous run of one slot's rows by its own GEMMs: prompts
  // alternating between two adapters are four runs, the same prompts grouped by adapter two.
  const ModelConfig c = micro_model();
  const SimDevice d = SimDevice::preset("h200");
  const LoraAdapter a = random_lora(c, "a", 8, 16.0f, {T::q, T::v}, 1);
  const std::vector<SimLoraSlot> slots = {{lora_params(c, &a)}, {lora_params(c, &a)}};
  const double L = c.n_layers;
  const double alternating = lora_step_seconds(d, c, shape_step({20, 20, 20, 20}, {0, 1, 0, 1}), slots);
  const double grouped = lora_step_seconds(d, c, shape_step({20, 20, 20, 20}, {0, 0, 1, 1}), slots);
  EXPECT_NEAR(alternating - grouped, 2 * L * d.lora_prefill_run_s, 1e-15);
  // A decode row between two prompts of one adapter ends the run; a base-model prompt does too.
  const double split = lora_step_seconds(d, c, shape_step({20, 1, 20}, {0, 0, 0}), slots);
  const double joined = lora_step_seconds(d, c, shape_step({20, 20, 1}, {0, 0, 0}), slots);
  EXPECT_NEAR(split - joined, L * d.lora_prefill_run_s, 1e-15);
  const double base_between = lora_step_seconds(d, c, shape_step({20, 20, 20}, {0, -1, 0}), slots);
  EXPECT_NEAR(base_between - lora_step_seconds(d, c, shape_step({20, 20}, {0, 0}), slots), L * d.lora_prefill_run_s,
              1e-15);
}

TEST(SimLora, TheCpuDevicePricesTheAdaptersFlopsOrBytes) {
  const ModelConfig c = micro_model();
  const SimDevice d = SimDevice::preset("cpu-2core");
  const LoraAdapter a = random_lora(c, "a", 8, 16.0f, {T::q, T::k, T::v, T::o, T::gate, T::up, T::down}, 1);
  const int64_t p = lora_params(c, &a);
  const std::vector<SimLoraSlot> slots = {{p}};
  for (const int rows : {1, 64}) {
    const double got = lora_step_seconds(d, c, shape_step({rows}, {0}), slots);
    EXPECT_DOUBLE_EQ(got, std::max(double(p) * d.weight_dtype_bytes / d.mem_bw_bytes_s, 2.0 * rows * double(p) / d.peak_flops))
        << rows << " rows";
  }
}

TEST(SimLora, ALoadChargesTheCopyAndTheEngineTellsTheStepsAdapters) {
  const ModelConfig c = micro_model();
  const LoraAdapter made = random_lora(c, "a", 8, 16.0f, {T::q, T::k, T::v, T::o, T::gate, T::up, T::down}, 3);
  auto adapter = std::make_shared<LoraAdapter>(made);
  adapter->id = 1;
  // A load costs its weights over the host link, in the next step, and packing them the first time
  // (the backend keeps the adapter object's image: twice max_loras of them, in buffers allocated
  // with the pool). Reading the adapter into host memory is the front end's, not the step's
  // (lora_read_seconds: the run's source holds the request back for it).
  SimBackend sim(c, SimCostModel::roofline(SimDevice::preset("h200")));
  sim.init_kv(1 << 12);
  sim.reserve_loras(1, 8);
  const Step st = shape_step({1}, {-1});
  const double plain = *sim.execute(st).predicted_s;
  const SimDevice& dev = sim.cost().device;
  const int64_t params = lora_params(c, adapter.get());
  const double copy = lora_load_seconds(dev, params), pack = lora_pack_seconds(dev, params);
  const double host = lora_host_load_seconds(dev, params);
  EXPECT_NEAR(pack, params * 4.0 / dev.lora_pack_bytes_s, 1e-15);
  EXPECT_NEAR(host, params * 4.0 / dev.lora_host_load_bytes_s, 1e-15);
  EXPECT_GT(pack, 0.0);
  EXPECT_GT(host, 0.0);
  EXPECT_DOUBLE_EQ(sim.lora_read_seconds(*adapter), host);
  // The copy runs beside the step (lora_copies_seconds): between its first layer's part and all of it.
  sim.load_lora(0, adapter);
  const double first = *sim.execute(st).predicted_s - plain;
  EXPECT_GE(first, pack + copy / c.n_layers - 1e-12);
  EXPECT_LE(first, pack + copy + 1e-12);
  EXPECT_DOUBLE_EQ(*sim.execute(st).predicted_s, plain) << "charged once";
  sim.load_lora(0, adapter);  // its image kept: the copy alone
  const double kept = *sim.execute(st).predicted_s - plain;
  EXPECT_NEAR(first - kept, pack, 1e-12);
  auto again = std::make_shared<LoraAdapter>(made);  // the same adapter drawn again: a new object
  again->id = 1;
  sim.load_lora(0, again);  // the second image
  EXPECT_NEAR(*sim.execute(st).predicted_s - plain, kept + pack, 1e-12);
  auto other = std::make_shared<LoraAdapter>(made);
  other->id = 2;
  sim.load_lora(0, other);  // a third image past 2 x max_loras: the least recently loaded's buffer
  EXPECT_NEAR(*sim.execute(st).predicted_s - plain, kept + pack, 1e-12);
  sim.load_lora(0, again);
  EXPECT_NEAR(*sim.execute(st).predicted_s - plain, kept, 1e-12) << "kept";
  sim.load_lora(0, adapter);
  EXPECT_NEAR(*sim.execute(st).predicted_s - plain, kept + pack, 1e-12) << "its image was evicted";
  EXPECT_EQ(lora_pack_seconds(SimDevice::preset("cpu-2core"), params), 0.0);
  EXPECT_THROW(sim.load_lora(-1, adapter), std::invalid_argument);

  // Eight requests, each with the adapter or without, through the engine on the sim: the run with
  // adapters takes longer on the virtual clock, by at least the loads and rows priced.
  auto run = [&](bool with) {
    EngineConfig cfg = paged_config(continuous_sched(8, 256, true), 4 << 20, 4);
    cfg.lora.enabled = true;
    cfg.lora.max_loras = 1;
    Engine engine(cfg, sim_backend(c, "h200"));
    std::vector<Timed> items;
    for (uint64_t id = 0; id < 8; ++id) {
      Request r = make_request(id, 12, 16);
      if (with) r.lora = adapter;
      items.push_back({0.0, r});
    }
    const RunResult got = run_virtual(engine, items);
    EXPECT_EQ(got.finished.size(), 8u);
    double t = 0.0;
    for (const auto& [id, f] : got.finished) t = std::max(t, f.end_s);
    return t;
  };
  const double base = run(false), with = run(true);
  const SimDevice d = SimDevice::preset("h200");
  // At least one load's first layer and 16 decode steps of 8 rows each on the adapter.
  const double floor = lora_load_seconds(d, lora_params(c, adapter.get())) / c.n_layers +
                       15 * c.n_layers * lora_decode_layer_seconds(d, 8);
  EXPECT_GT(with - base, floor);
}

TEST(SimLora, ALoadsCopyRunsBesideItsStepLayerByLayer) {
  // The cuda backend copies an image on its own stream beside the loading step, each layer waiting
  // for its part (cuda_lora.h): a step longer than the copy pays the first layer's part, a step of
  // no work the whole copy, one between what outlasts its layers after the first; a load before
  // the last in a step waits for the copy under way, so it pays its whole copy.
  const double c = 0.0016;
  EXPECT_DOUBLE_EQ(lora_copies_seconds({}, 1.0, 32), 0.0);
  EXPECT_DOUBLE_EQ(lora_copies_seconds(std::vector<double>{c}, 0.010, 32), c / 32);
  EXPECT_DOUBLE_EQ(lora_copies_seconds(std::vector<double>{c}, 0.0, 32), c);
  EXPECT_NEAR(lora_copies_seconds(std::vector<double>{c}, 0.0008, 32), c - 0.0008 * 31 / 32, 1e-15);
  EXPECT_NEAR(lora_copies_seconds(std::vector<double>{c, c, c}, 0.010, 32), 2 * c + c / 32, 1e-15);
  EXPECT_DOUBLE_EQ(lora_copies_seconds(std::vector<double>{c}, 0.010, 1), c) << "one layer: nothing to hide it behind";
}

TEST(SimLora, AStagedPackRunsOnTheEnginesClockOneAtATime) {
  // The cuda backend packs a staged adapter's image on one worker thread from its arrival; the sim
  // prices that worker on the engine's clock: lora_ready says whether the pack is done by now, a
  // load pays what is left of it (none once done), and packs queue behind each other.
  const ModelConfig c = micro_model();
  const LoraAdapter made = random_lora(c, "a", 8, 16.0f, {T::q, T::k, T::v, T::o, T::gate, T::up, T::down}, 3);
  auto a = std::make_shared<LoraAdapter>(made), b = std::make_shared<LoraAdapter>(made),
       d = std::make_shared<LoraAdapter>(made);
  a->id = 1, b->id = 2, d->id = 3;
  SimBackend sim(c, SimCostModel::roofline(SimDevice::preset("h200")));
  sim.init_kv(1 << 12);
  sim.reserve_loras(2, 8);
  const Step st = shape_step({1}, {-1});
  const double plain = *sim.execute(st).predicted_s;
  const double copy = lora_load_seconds(sim.cost().device, lora_params(c, a.get()));
  const double pack = lora_pack_seconds(sim.cost().device, lora_params(c, a.get()));
  ASSERT_GT(pack, 0.0);
  sim.stage_lora(a, 1.0);
  sim.stage_lora(b, 1.0);  // behind a's pack
  EXPECT_FALSE(sim.lora_ready(a, 1.0 + 0.5 * pack));
  EXPECT_TRUE(sim.lora_ready(a, 1.0 + pack));
  EXPECT_FALSE(sim.lora_ready(b, 1.0 + 1.5 * pack));
  EXPECT_TRUE(sim.lora_ready(b, 1.0 + 2.0 * pack));
  sim.at_time(1.0 + 2.0 * pack);
  sim.load_lora(0, a);  // packed: the copy alone, beside the step
  const double kept = *sim.execute(st).predicted_s - plain;
  EXPECT_GE(kept, copy / c.n_layers - 1e-12);
  EXPECT_LE(kept, copy + 1e-12);
  EXPECT_TRUE(sim.lora_ready(a, 0.0)) << "kept";
  EXPECT_FALSE(sim.lora_ready(d, 5.0)) << "neither kept nor staged: staged now";
  sim.at_time(5.0 + 0.25 * pack);
  sim.load_lora(1, d);  // a quarter of its pack done
  EXPECT_NEAR(*sim.execute(st).predicted_s - plain, kept + 0.75 * pack, 1e-12);
}

}  // namespace sim_lora_test
}  // namespace servelab::enginetest
