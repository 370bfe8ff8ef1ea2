// Multi-LoRA on the engine: logits of rows with adapter A equal the base model with A merged into
// its weights, in one step mixing adapters and no adapter (prefill and cached decode rows); greedy
// tokens through the engine agree with the merged models'; the scheduler's adapter bound holds
// without starving a rare adapter; the prefix cache never shares K/V across adapters.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/lora/lora_slots.h"
#include "engine/lora/peft.h"
#include "engine/model/weights.h"
#include "tests/engine/engine_test_support.h"

namespace servelab::enginetest {
namespace lora_engine_test {  // named, not anonymous: a unity batch shares one translation unit

double rel_err(std::span<const float> a, std::span<const float> b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

/// A temp path of this test alone: ctest runs the tests as parallel processes, and a folder one
/// test rewrites while another maps its safetensors file ends in SIGBUS.
std::string test_tmp_path(const std::string& stem) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + (t ? t->name() : "none") + "_" + std::to_string(::getpid())))
      .string();
}

/// Adapters of the micro model: A on q/v (rank 4), B on every linear (rank 8), C on o/gate/down
/// (rank 2, rsLoRA), each written as a PEFT folder in bf16 and read back, as a server gets them.
std::vector<std::shared_ptr<const LoraAdapter>> micro_adapters(const ModelConfig& c) {
  using T = LoraTarget;
  std::vector<LoraAdapter> made = {
      random_lora(c, "A", 4, 8.0f, {T::q, T::v}, 11),
      random_lora(c, "B", 8, 8.0f, {T::q, T::k, T::v, T::o, T::gate, T::up, T::down}, 12),
      random_lora(c, "C", 2, 2.0f, {T::o, T::gate, T::down}, 13),
  };
  made[2].use_rslora = true;
  std::vector<std::shared_ptr<const LoraAdapter>> out;
  for (size_t i = 0; i < made.size(); ++i) {
    const std::string dir = test_tmp_path("micro_lora_" + made[i].name);
    write_peft_adapter(dir, made[i], DType::bf16);
    auto a = std::make_shared<LoraAdapter>(read_peft_adapter(dir, made[i].name, c, 16));
    a->id = i + 1;
    out.push_back(a);
  }
  return out;
}

std::shared_ptr<const ModelWeights> merged(const ModelWeights& base, const LoraAdapter* a) {
  auto w = std::make_shared<ModelWeights>(base);
  if (a) merge_lora(*w, *a);
  return w;
}

/// One step over sequences s (naive layout, base slot 64 · s): rows [start_s, start_s + n_s) of
/// tokens[s], drawing each sequence's last row greedily; lora_slot per sequence (-1 = none).
Step step_of(const std::vector<std::vector<TokenId>>& tokens, const std::vector<int>& start,
             const std::vector<int>& lora_slot) {
  Step st;
  kernels::StepInput& in = st.in;
  in.kv_kind = kernels::KvLayoutKind::naive;
  in.query_start.push_back(0);
  for (size_t s = 0; s < tokens.size(); ++s) {
    for (int p = start[s]; p < int(tokens[s].size()); ++p) {
      in.token_ids.push_back(tokens[s][size_t(p)]);
      in.positions.push_back(p);
      in.slot_mapping.push_back(int64_t(64 * s) + p);
      in.lora_slot.push_back(lora_slot[s]);
    }
    in.query_start.push_back(in.n_tokens());
    in.context_lens.push_back(int(tokens[s].size()));
    in.seq_ids.push_back(s + 1);
    in.base_slots.push_back(int64_t(64 * s));
    in.sample_rows.push_back(in.n_tokens() - 1);
    in.temperature.push_back(0.0f);
    in.top_k.push_back(0);
    in.top_p.push_back(1.0f);
    in.seed.push_back(0);
    in.seq_key.push_back(0);
    in.sample_position.push_back(int(tokens[s].size()));
    in.mask_index.push_back(-1);
    in.draft_token.push_back(-1);  // no speculative draft to verify
    in.draft_dist.push_back(-1);
  }
  return st;
}

TEST(LoraEngine, MixedBatchLogitsEqualTheMergedModels) {
  const ModelConfig c = micro_model();
  const ModelWeights base = ModelWeights::random(c, 5);
  const auto adapters = micro_adapters(c);
  // Sequences: A, none, B, C, A again (two runs of one adapter), prompts of awkward lengths.
  const std::vector<int> which = {0, -1, 1, 2, 0};
  std::vector<std::vector<TokenId>> tokens;
  for (size_t s = 0; s < which.size(); ++s) tokens.push_back(prompt_tokens(5 + 3 * int(s), 40 + s));
  CpuBackendOptions opts;
  opts.n_threads = 2;
  CpuBackend mixed(std::make_shared<const ModelWeights>(base), opts);
  mixed.init_kv(64 * int64_t(which.size()));
  // Slots in another order than the adapters', so a slot/adapter mix-up shows.
  const std::vector<int> slot_of = {2, 0, 1};
  for (int i = 0; i < 3; ++i) mixed.load_lora(slot_of[size_t(i)], adapters[size_t(i)]);
  std::vector<int> row_slot;
  for (int w : which) row_slot.push_back(w < 0 ? -1 : slot_of[size_t(w)]);

  // Each merged model runs the same step without adapters; its rows of its own adapter must agree.
  std::vector<std::unique_ptr<CpuBackend>> refs;
  for (int i = -1; i < 3; ++i) {
    refs.push_back(std::make_unique<CpuBackend>(merged(base, i < 0 ? nullptr : adapters[size_t(i)].get()), opts));
    refs.back()->init_kv(64 * int64_t(which.size()));
  }
  const std::vector<int> none(which.size(), -1);
  for (int phase = 0; phase < 2; ++phase) {  // prefill, then one decode row over the cached K/V
    std::vector<int> start(which.size(), 0);
    if (phase == 1)
      for (size_t s = 0; s < tokens.size(); ++s) {
        start[s] = int(tokens[s].size());
        tokens[s].push_back(TokenId(7 + s));
      }
    const std::span<const float> g_all = mixed.logits(step_of(tokens, start, row_slot));
    const std::vector<float> got(g_all.begin(), g_all.end());
    std::vector<std::vector<float>> want;
    for (auto& r : refs) {
      const std::span<const float> w_all = r->logits(step_of(tokens, start, none));
      want.emplace_back(w_all.begin(), w_all.end());
    }
    for (size_t s = 0; s < which.size(); ++s) {
      const size_t V = size_t(c.vocab_size);
      const std::span<const float> g(got.data() + s * V, V), w(want[size_t(which[s] + 1)].data() + s * V, V);
      EXPECT_LT(rel_err(g, w), 1e-5) << "sequence " << s << " phase " << phase;
      // ... and the adapter matters: the base model's logits differ.
      if (which[s] >= 0) { EXPECT_GT(rel_err(g, std::span<const float>(want[0].data() + s * V, V)), 1e-2); }
    }
  }
  EXPECT_THROW(mixed.logits(step_of(tokens, std::vector<int>(which.size(), 0), std::vector<int>(which.size(), 5))),
               std::invalid_argument);  // a slot holding no adapter
}

TEST(LoraEngine, GreedyTokensAgreeWithMergedModelsThroughTheEngine) {
  const ModelConfig c = micro_model();
  const ModelWeights base = ModelWeights::random(c, 6);
  const auto adapters = micro_adapters(c);
  EngineConfig cfg = paged_config(continuous_sched(8, 256, true), 4 << 20, 4);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 2;  // three adapters over two slots: slots are swapped mid-run
  CpuBackendOptions opts;
  opts.n_threads = 2;
  Engine engine(cfg, std::make_unique<CpuBackend>(std::make_shared<const ModelWeights>(base), opts));
  std::vector<Timed> items;
  std::map<uint64_t, int> which;
  for (uint64_t id = 0; id < 8; ++id) {
    Request r = make_request(id, 6 + int(id), 6);
    const int w = int(id % 4) - 1;  // none, A, B, C, none, ...
    if (w >= 0) r.lora = adapters[size_t(w)];
    which[id] = w;
    items.push_back({0.001 * double(id), r});
  }
  const RunResult got = run_virtual(engine, items);
  for (const StepOutcome& s : got.steps) EXPECT_LE(s.n_loras, 2);
  ASSERT_EQ(got.finished.size(), 8u);
  for (int w = -1; w < 3; ++w) {
    EngineConfig plain = paged_config(continuous_sched(8, 256, true), 4 << 20, 4);
    Engine ref(plain, std::make_unique<CpuBackend>(merged(base, w < 0 ? nullptr : adapters[size_t(w)].get()), opts));
    std::vector<Timed> mine;
    for (const Timed& t : items)
      if (which[t.request.id] == w) {
        mine.push_back(t);
        mine.back().request.lora = nullptr;
      }
    const RunResult want = run_virtual(ref, mine);
    for (const Timed& t : mine)
      EXPECT_EQ(got.at(t.request.id).outputs, want.at(t.request.id).outputs) << "request " << t.request.id;
  }
}

TEST(LoraEngine, AdapterBoundHoldsAndARareAdapterIsNotStarved) {
  auto popular = std::make_shared<LoraAdapter>(random_lora(micro_model(), "popular", 2, 2.0f, {LoraTarget::q}, 1));
  auto rare = std::make_shared<LoraAdapter>(random_lora(micro_model(), "rare", 2, 2.0f, {LoraTarget::q}, 2));
  popular->id = 1;
  rare->id = 2;
  EngineConfig cfg = paged_config(continuous_sched(4, 512, true), 8 << 20);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 1;
  Engine engine(cfg, sim_backend());
  std::vector<Timed> items;
  for (uint64_t id = 0; id < 40; ++id) {
    Request r = make_request(id, 8, 16);
    r.lora = popular;
    items.push_back({0.0, r});
    if (id == 2) {  // the rare one arrives third in line
      Request q = make_request(100, 8, 16);
      q.lora = rare;
      items.push_back({0.0, q});
    }
  }
  // Under the bound of one adapter a step, the first step runs `popular` and leaves `rare` waiting.
  Engine first(cfg, sim_backend());
  EXPECT_TRUE(first.lora_requests().running.empty());
  for (const Timed& t : items) ASSERT_FALSE(first.add(t.request, 0.0).has_value());
  const Engine::LoraRequests queued = first.lora_requests();
  EXPECT_TRUE(queued.running.empty());
  EXPECT_EQ(queued.waiting, (std::vector<std::string>{"popular", "rare"}));
  first.step(0.0);
  const Engine::LoraRequests after = first.lora_requests();
  EXPECT_EQ(after.running, std::vector<std::string>{"popular"});
  EXPECT_EQ(after.waiting, (std::vector<std::string>{"popular", "rare"})) << "popular's later requests wait too";

  const RunResult got = run_virtual(engine, items);
  ASSERT_EQ(got.finished.size(), 41u);
  int n_lora_loads = 0;
  for (const StepOutcome& s : got.steps) {
    EXPECT_LE(s.n_loras, 1);
    n_lora_loads += s.n_lora_loads;
  }
  EXPECT_EQ(n_lora_loads, 3);  // popular, rare, popular again: one swap each way
  // Three popular requests were ahead of it; at most max_num_seqs = 4 more may overtake it.
  const double rare_start = got.at(100).scheduled_s;
  int before = 0;
  for (uint64_t id = 0; id < 40; ++id) before += got.at(id).scheduled_s < rare_start ? 1 : 0;
  EXPECT_LE(before, 3 + 4);
  EXPECT_GE(before, 3);
}

/// The adapter slot of each entry of every step the engine executes.
class SlotTap final : public ForwardingBackend {
 public:
  explicit SlotTap(std::vector<std::vector<int>>& seen) : ForwardingBackend(sim_backend()), seen_(seen) {}
  StepOutput execute(const Step& step) override {
    seen_.push_back(step.seq_lora_slot);
    return inner().execute(step);
  }

 private:
  std::vector<std::vector<int>>& seen_;
};

TEST(LoraEngine, AStepsPromptsOfOneAdapterRunNextToEachOther) {
  // Six prompts arriving together, alternating between two adapters: the cuda backend would pay a
  // run (its own GEMMs) per contiguous group of one slot's rows, so the engine puts each adapter's
  // prompts together, in arrival order within it, the first adapter first.
  auto a = std::make_shared<LoraAdapter>(random_lora(micro_model(), "a", 2, 2.0f, {LoraTarget::q}, 1));
  auto b = std::make_shared<LoraAdapter>(random_lora(micro_model(), "b", 2, 2.0f, {LoraTarget::q}, 2));
  a->id = 1;
  b->id = 2;
  EngineConfig cfg = paged_config(continuous_sched(8, 512, true), 8 << 20);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 2;
  cfg.lora.admit_when_packed = false;  // every prompt in the first step: none waits for its adapter's pack
  std::vector<std::vector<int>> seen;
  Engine engine(cfg, std::make_unique<SlotTap>(seen));
  std::vector<Timed> items;
  for (uint64_t id = 0; id < 6; ++id) {
    Request r = make_request(id, 8 + int(id), 4);
    r.lora = id % 2 ? b : a;
    items.push_back({0.0, r});
  }
  const RunResult got = run_virtual(engine, items);
  ASSERT_EQ(got.finished.size(), 6u);
  ASSERT_FALSE(seen.empty());
  ASSERT_EQ(seen[0].size(), 6u);  // every prompt in the first step
  const int sa = seen[0][0], sb = seen[0][3];
  EXPECT_NE(sa, sb);
  EXPECT_EQ(seen[0], (std::vector<int>{sa, sa, sa, sb, sb, sb}));
  EXPECT_EQ(got.steps[0].n_loras, 2);
  // Turned off (lora.group_prompts: false): the scheduler's order, alternating.
  EngineConfig off = cfg;
  off.lora.group_prompts = false;
  std::vector<std::vector<int>> seen_off;
  Engine plain(off, std::make_unique<SlotTap>(seen_off));
  ASSERT_EQ(run_virtual(plain, items).finished.size(), 6u);
  ASSERT_EQ(seen_off[0].size(), 6u);
  EXPECT_EQ(seen_off[0], (std::vector<int>{sa, sb, sa, sb, sa, sb}));
  // Every request still gets its own tokens: the same as a run of it alone.
  for (const Timed& t : items) {
    std::vector<std::vector<int>> alone_seen;
    Engine alone(cfg, std::make_unique<SlotTap>(alone_seen));
    const RunResult want = run_virtual(alone, {t});
    EXPECT_EQ(got.at(t.request.id).outputs, want.at(t.request.id).outputs) << "request " << t.request.id;
  }
}

/// The backend's LoRA calls in order: "stage NAME" and "load NAME".
class LoraCallTap final : public ForwardingBackend {
 public:
  explicit LoraCallTap(std::vector<std::string>& calls) : ForwardingBackend(sim_backend()), calls_(calls) {}
  void stage_lora(std::shared_ptr<const LoraAdapter> adapter, double now_s) override {
    calls_.push_back("stage " + adapter->name);
    inner().stage_lora(std::move(adapter), now_s);
  }
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override {
    calls_.push_back("load " + (adapter ? adapter->name : std::string("-")));
    inner().load_lora(slot, std::move(adapter));
  }

 private:
  std::vector<std::string>& calls_;
};

TEST(LoraEngine, EachRequestsAdapterIsStagedWhenItArrivesAheadOfItsLoad) {
  // The cuda backend packs an adapter's image off the engine's thread once asked (stage_lora):
  // the engine asks as each request naming one is accepted, so the load of a step later finds it
  // under way; a request without an adapter, or one refused, stages nothing.
  auto a = std::make_shared<LoraAdapter>(random_lora(micro_model(), "a", 2, 2.0f, {LoraTarget::q}, 1));
  auto b = std::make_shared<LoraAdapter>(random_lora(micro_model(), "b", 2, 2.0f, {LoraTarget::q}, 2));
  a->id = 1;
  b->id = 2;
  EngineConfig cfg = paged_config(continuous_sched(4, 512, true), 8 << 20);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 1;
  std::vector<std::string> calls;
  Engine engine(cfg, std::make_unique<LoraCallTap>(calls));
  Request ra = make_request(0, 8, 2), rb = make_request(1, 8, 2), plain = make_request(2, 8, 2);
  ra.lora = a;
  rb.lora = b;
  ASSERT_FALSE(engine.add(ra, 0.0).has_value());
  ASSERT_FALSE(engine.add(plain, 0.0).has_value());
  ASSERT_FALSE(engine.add(rb, 0.0).has_value());
  EXPECT_EQ(calls, (std::vector<std::string>{"stage a", "stage b"})) << "staged on arrival, before any step";
  while (engine.has_work()) engine.step(0.0);
  EXPECT_EQ(calls, (std::vector<std::string>{"stage a", "stage b", "load a", "load b"}));
  // Refused (rank past max_lora_rank): not staged.
  auto big = std::make_shared<LoraAdapter>(random_lora(micro_model(), "big", 32, 32.0f, {LoraTarget::q}, 3));
  big->id = 3;
  Request rbig = make_request(3, 8, 2);
  rbig.lora = big;
  EXPECT_TRUE(engine.add(rbig, 0.0).has_value());
  EXPECT_EQ(calls.size(), 4u);
}

/// lora_ready says false for the adapters named in `packing` (a device backend still packing them).
class PackingTap final : public ForwardingBackend {
 public:
  explicit PackingTap(std::set<std::string>& packing) : ForwardingBackend(sim_backend()), packing_(packing) {}
  bool lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double now_s) override {
    return !packing_.count(adapter->name) && inner().lora_ready(adapter, now_s);
  }

 private:
  std::set<std::string>& packing_;
};

TEST(LoraEngine, ARequestWhoseAdapterIsStillPackedLetsOthersGoFirst) {
  // The cuda backend packs a new adapter's image on a worker (ms); a step that loaded it before
  // the pack ends would wait for it, and every running request with it. So the scheduler passes
  // over such a request while others can run, and admits it once its adapter is ready, once
  // lora.admit_wait_s (0.25 s here; default 0.5) has passed since it arrived, or when nothing
  // else would run.
  auto slow = std::make_shared<LoraAdapter>(random_lora(micro_model(), "slow", 2, 2.0f, {LoraTarget::q}, 1));
  slow->id = 1;
  EngineConfig cfg = paged_config(continuous_sched(8, 512, true), 8 << 20);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 2;
  cfg.lora.admit_wait_s = 0.25;
  std::set<std::string> packing{"slow"};
  Engine engine(cfg, std::make_unique<PackingTap>(packing));
  Request first = make_request(0, 8, 8), s = make_request(1, 8, 8), behind = make_request(2, 8, 8);
  s.lora = slow;
  for (const Request& r : {first, s, behind}) ASSERT_FALSE(engine.add(r, 0.0).has_value());
  EXPECT_EQ(engine.step(0.001).n_lora_waits, 1);  // counted in the step: the report's waits
  EXPECT_EQ(engine.lora_requests().waiting, std::vector<std::string>{"slow"}) << "the one behind went first";
  EXPECT_EQ(engine.step(0.002).n_lora_waits, 1);
  EXPECT_EQ(engine.lora_requests().waiting, std::vector<std::string>{"slow"});
  packing.clear();  // packed
  EXPECT_EQ(engine.step(0.003).n_lora_waits, 0);
  EXPECT_TRUE(engine.lora_requests().waiting.empty());
  EXPECT_EQ(engine.lora_requests().running, std::vector<std::string>{"slow"});
  while (engine.has_work()) engine.step(0.004);

  // Still packing, but past admit_wait_s since it arrived: admitted (the load waits).
  packing.insert("slow2");
  auto slow2 = std::make_shared<LoraAdapter>(random_lora(micro_model(), "slow2", 2, 2.0f, {LoraTarget::q}, 2));
  slow2->id = 2;
  Request keep = make_request(3, 8, 64), late = make_request(4, 8, 8);
  late.lora = slow2;
  ASSERT_FALSE(engine.add(keep, 1.0).has_value());
  engine.step(1.0);  // keep runs: the steps below are not empty without slow2
  ASSERT_FALSE(engine.add(late, 1.0).has_value());
  engine.step(1.0 + 0.24);
  EXPECT_EQ(engine.lora_requests().waiting, std::vector<std::string>{"slow2"});
  engine.step(1.0 + 0.25);
  EXPECT_TRUE(engine.lora_requests().waiting.empty());
  while (engine.has_work()) engine.step(2.0);

  // Still packing, nothing else to run: admitted at once rather than idling.
  auto slow3 = std::make_shared<LoraAdapter>(random_lora(micro_model(), "slow3", 2, 2.0f, {LoraTarget::q}, 3));
  slow3->id = 3;
  packing.insert("slow3");
  Request alone = make_request(5, 8, 4);
  alone.lora = slow3;
  ASSERT_FALSE(engine.add(alone, 3.0).has_value());
  engine.step(3.0);
  EXPECT_TRUE(engine.lora_requests().waiting.empty());
  EXPECT_EQ(engine.lora_requests().running, std::vector<std::string>{"slow3"});
}

TEST(LoraEngine, PrefixCacheIsKeyedByAdapter) {
  auto a = std::make_shared<LoraAdapter>(random_lora(micro_model(), "a", 2, 2.0f, {LoraTarget::k}, 1));
  auto b = std::make_shared<LoraAdapter>(random_lora(micro_model(), "b", 2, 2.0f, {LoraTarget::k}, 2));
  a->id = 1;
  b->id = 2;
  EngineConfig cfg = paged_config(continuous_sched(4, 512, false), 8 << 20, 4);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 2;
  Engine engine(cfg, sim_backend());
  // One 33-token prompt, sent one after another: with a, with a again, with b, with no adapter.
  std::vector<Timed> items;
  const std::vector<std::shared_ptr<const LoraAdapter>> order = {a, a, b, nullptr, nullptr};
  for (size_t i = 0; i < order.size(); ++i) {
    Request r = make_request(i, 33, 1, /*salt=*/77);
    r.lora = order[i];
    items.push_back({10.0 * double(i), r});
  }
  const RunResult got = run_virtual(engine, items);
  std::vector<int> prefill_tokens;
  for (const StepOutcome& s : got.steps)
    if (!s.idle()) prefill_tokens.push_back(s.n_tokens);
  // Cached: 8 full blocks of 4 for the second a and the second base request; none across adapters.
  EXPECT_EQ(prefill_tokens, (std::vector<int>{33, 1, 33, 33, 1}));
}

TEST(LoraEngine, RequestsWithAdaptersNeedLoraEnabledAndAFittingRank) {
  auto a = std::make_shared<LoraAdapter>(random_lora(micro_model(), "big", 32, 32.0f, {LoraTarget::q}, 1));
  a->id = 1;
  Engine off(paged_config(continuous_sched(4, 512, false), 8 << 20), sim_backend());
  Request r = make_request(1, 8, 4);
  r.lora = a;
  auto rejected = off.add(r, 0.0);
  ASSERT_TRUE(rejected);
  EXPECT_NE(rejected->error.find("LoRA is off"), std::string::npos);
  EngineConfig cfg = paged_config(continuous_sched(4, 512, false), 8 << 20);
  cfg.lora.enabled = true;
  Engine on(cfg, sim_backend());
  rejected = on.add(r, 0.0);
  ASSERT_TRUE(rejected);
  EXPECT_NE(rejected->error.find("rank 32 > max_lora_rank 16"), std::string::npos) << rejected->error;
  cfg.sched = static_sched(4, 1.0);
  EXPECT_THROW(Engine(cfg, sim_backend()), std::invalid_argument);
}

}  // namespace lora_engine_test
}  // namespace servelab::enginetest
