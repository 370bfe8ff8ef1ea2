// The CPU backend's arena: slot copies, swap out/in, the errors a bad batch gets, and how often
// a step asks the KV manager for slots.
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/reference.h"
#include "engine/backend/sim_backend.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

using testing::make_sequence;
using testing::random_tokens;
using testing::rel_error;
using testing::ScrambledKv;
using testing::small_config;

constexpr int64_t kSlots = 512;

std::vector<int64_t> slot_range(int64_t begin, int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

class CpuBackendSlots : public ::testing::Test {
 protected:
  CpuBackendSlots()
      : weights_(std::make_shared<const ModelWeights>(ModelWeights::random(small_config(2, true), 21))),
        backend_(weights_, CpuBackendOptions{.n_threads = 2}) {
    backend_.init_kv(kSlots);
  }

  std::vector<float> run(std::vector<BatchEntry> entries) {
    Batch batch;
    batch.entries = std::move(entries);
    const auto logits = backend_.logits(make_step(backend_, batch, kv_));
    std::vector<float> out(logits.begin(), logits.end());
    for (const BatchEntry& e : batch.entries) e.seq->n_computed += e.n_new;
    return out;
  }

  std::shared_ptr<const ModelWeights> weights_;
  CpuBackend backend_;
  ScrambledKv kv_{kSlots, 17};
};

/// Runs slot i of `slots` <-> host slot host_first + i, merged where both are consecutive.
std::vector<KvSwap> runs_of(const std::vector<int64_t>& slots, int64_t host_first) {
  std::vector<KvSwap> runs;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t host = host_first + static_cast<int64_t>(i);
    if (!runs.empty() && runs.back().device_slot + runs.back().n_slots == slots[i] &&
        runs.back().host_slot + runs.back().n_slots == host)
      ++runs.back().n_slots;
    else
      runs.push_back({slots[i], host, 1});
  }
  return runs;
}

TEST_F(CpuBackendSlots, SwapOutThenInToOtherSlotsContinuesIdentically) {
  Sequence a = make_sequence(1, random_tokens(12, 97, 1));
  kv_.assign(1, 13);
  run({{&a, 12, true}});
  const std::vector<int64_t> a_slots(kv_.slots_of(1).begin(), kv_.slots_of(1).begin() + 12);
  const std::vector<std::byte> a_bytes = testing::read_slots(backend_, a_slots);
  EXPECT_EQ(a_bytes.size(), 12u * backend_.kv_bytes_per_slot());
  std::unique_ptr<HostKvPool> pool = backend_.make_host_pool(40);
  EXPECT_FALSE(pool->pinned());
  EXPECT_EQ(pool->bytes(), 40 * backend_.kv_bytes_per_slot());
  backend_.swap_out(runs_of(a_slots, 20), *pool);  // host slots 20..31

  // b: the same tokens, swapped in to different slots, decoding from where a is.
  Sequence b = a;
  b.id = 2;
  kv_.assign(2, 13);
  const std::vector<int64_t> b_slots(kv_.slots_of(2).begin(), kv_.slots_of(2).begin() + 12);
  backend_.swap_in(runs_of(b_slots, 20), *pool);
  EXPECT_EQ(a_bytes, testing::read_slots(backend_, b_slots));

  a.tokens.push_back(5);
  b.tokens.push_back(5);
  const std::vector<float> logits = run({{&a, 1, true}, {&b, 1, true}});
  const size_t vocab = 97;
  EXPECT_EQ(0, std::memcmp(logits.data(), logits.data() + vocab, vocab * sizeof(float)));
  EXPECT_LT(rel_error(std::span(logits).first(vocab), reference_logits(*weights_, a.tokens)), 1e-4);
}

TEST_F(CpuBackendSlots, SwapRoundTripRestoresTheBytes) {
  Sequence a = make_sequence(1, random_tokens(30, 97, 11));
  kv_.assign(1, 30);  // scattered slots: one run per slot, host slots 5..34
  run({{&a, 30, true}});
  const std::vector<int64_t>& slots = kv_.slots_of(1);
  const std::vector<std::byte> before = testing::read_slots(backend_, slots);
  std::unique_ptr<HostKvPool> pool = backend_.make_host_pool(64);
  backend_.swap_out(runs_of(slots, 5), *pool);

  Sequence c = make_sequence(3, random_tokens(30, 97, 12));  // other tokens into the same slots
  kv_.set(3, slots);
  run({{&c, 30, true}});
  ASSERT_NE(before, testing::read_slots(backend_, slots));
  backend_.swap_in(runs_of(slots, 5), *pool);
  EXPECT_EQ(before, testing::read_slots(backend_, slots));
}

TEST_F(CpuBackendSlots, CopySlotsDuplicatesARunExactly) {
  Sequence a = make_sequence(1, random_tokens(20, 97, 2));
  kv_.set(1, slot_range(100, 21));
  run({{&a, 20, true}});
  const KvCopy copy{.src_slot = 100, .dst_slot = 300, .n_slots = 20};
  backend_.copy_slots(std::span(&copy, 1));

  EXPECT_EQ(testing::read_slots(backend_, slot_range(100, 20)), testing::read_slots(backend_, slot_range(300, 20)));

  Sequence b = a;
  b.id = 2;
  kv_.set(2, slot_range(300, 21));
  a.tokens.push_back(42);
  b.tokens.push_back(42);
  const std::vector<float> logits = run({{&a, 1, true}, {&b, 1, true}});
  EXPECT_EQ(0, std::memcmp(logits.data(), logits.data() + 97, 97 * sizeof(float)));
}

TEST_F(CpuBackendSlots, ForwardLeavesSequencesUntouched) {
  Sequence a = make_sequence(1, random_tokens(7, 97, 3));
  kv_.assign(1, 8);
  const Sequence before = a;
  Batch batch;
  batch.entries = {{&a, 7, true}};
  const StepOutput r = run_batch(backend_, batch, kv_);
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_FALSE(r.predicted_s.has_value());
  EXPECT_EQ(a.tokens, before.tokens);
  EXPECT_EQ(a.n_computed, before.n_computed);
  EXPECT_EQ(a.n_prompt, before.n_prompt);
}

TEST_F(CpuBackendSlots, EmptyAndPaddingOnlyBatchesSampleNothing) {
  EXPECT_TRUE(run_batch(backend_, Batch{}, kv_).tokens.empty());
  EXPECT_TRUE(run_batch(backend_, Batch{{}, 4}, kv_).tokens.empty());
}

TEST_F(CpuBackendSlots, RejectsMalformedBatchesWithTheirReason) {
  Sequence a = make_sequence(1, random_tokens(5, 97, 4));
  kv_.assign(1, 8);
  auto error_of = [&](Batch batch) -> std::string {
    try {
      run_batch(backend_, batch, kv_);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of(Batch{{{&a, 0, true}}, 0}).find("n_new"), std::string::npos);
  EXPECT_NE(error_of(Batch{{{&a, 6, true}}, 0}).find("outside its 5 tokens"), std::string::npos);
  EXPECT_NE(error_of(Batch{{{nullptr, 1, true}}, 0}).find("null"), std::string::npos);
  EXPECT_NE(error_of(Batch{{{&a, 5, true}}, -1}).find("n_padding_tokens"), std::string::npos);
  Sequence bad = a;
  bad.tokens[2] = 97;
  EXPECT_NE(error_of(Batch{{{&bad, 5, true}}, 0}).find("token 97 at position 2"), std::string::npos);
  kv_.set(1, {0, 1, 2, 3, kSlots});  // a slot past the arena
  EXPECT_NE(error_of(Batch{{{&a, 5, true}}, 0}).find("outside the arena"), std::string::npos);

  std::unique_ptr<HostKvPool> pool = backend_.make_host_pool(8);
  const KvSwap past_arena{.device_slot = kSlots - 1, .host_slot = 0, .n_slots = 2};
  const KvSwap past_pool{.device_slot = 0, .host_slot = 7, .n_slots = 2};
  EXPECT_THROW(backend_.swap_out(std::span(&past_arena, 1), *pool), std::out_of_range);
  EXPECT_THROW(backend_.swap_in(std::span(&past_pool, 1), *pool), std::out_of_range);
  EXPECT_THROW(backend_.make_host_pool(0), std::invalid_argument);
  SimBackend sim(small_config(2), SimCostModel{});
  sim.init_kv(kSlots);
  const KvSwap fine{.device_slot = 0, .host_slot = 0, .n_slots = 2};
  EXPECT_THROW(backend_.swap_out(std::span(&fine, 1), *sim.make_host_pool(8)), std::invalid_argument)
      << "a pool without memory (another backend's) is refused";
  const KvCopy past_end{.src_slot = kSlots - 2, .dst_slot = 0, .n_slots = 4};
  EXPECT_THROW(backend_.copy_slots(std::span(&past_end, 1)), std::out_of_range);
}

TEST(CpuBackendSetup, ForwardBeforeInitKvIsAnError) {
  CpuBackend backend(ModelWeights::random(small_config(4), 1), CpuBackendOptions{.n_threads = 1});
  ScrambledKv kv(16, 1);
  Sequence a = make_sequence(1, {1, 2, 3});
  kv.assign(1, 3);
  EXPECT_THROW(run_batch(backend, Batch{{{&a, 3, true}}, 0}, kv), std::logic_error);
  EXPECT_THROW(backend.init_kv(0), std::invalid_argument);
}

TEST(CpuBackendSetup, RejectsWeightsThatDoNotMatchTheConfig) {
  ModelWeights w = ModelWeights::random(small_config(2), 1);
  w.layers[1].wk.pop_back();
  try {
    CpuBackend backend(std::move(w));
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.k_proj.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CpuBackend(ModelWeights::random(small_config(2), 1), CpuBackendOptions{.n_threads = -1}),
               std::invalid_argument);
}

/// The CPU backend reads K/V through the step input: the KV manager is asked once per block
/// (paged) or once per sequence (naive) each step, not once per cached position, and the logits
/// are those of a manager asked position by position.
class CpuBackendKvLookups : public ::testing::TestWithParam<KvKind> {};

TEST_P(CpuBackendKvLookups, SlotCallsPerStepAreOBlocksNotOPositions) {
  const KvKind kind = GetParam();
  constexpr int kBlock = 16;
  KvConfig config;
  config.kind = kind;
  config.block_size = kBlock;
  config.prefix_caching = false;
  config.reserve = NaiveReserve::max;
  config.max_model_len = 128;
  testing::CountingKv kv(make_kv_manager(config, kSlots));
  auto weights = std::make_shared<const ModelWeights>(ModelWeights::random(small_config(2), 3));
  CpuBackend backend(weights, CpuBackendOptions{.n_threads = 2});
  backend.init_kv(kSlots);
  // Reference run: every position through a scrambled manager asked per position.
  CpuBackend scrambled_backend(weights, CpuBackendOptions{.n_threads = 2});
  scrambled_backend.init_kv(kSlots);
  ScrambledKv scrambled(kSlots, 5);

  Sequence a = make_sequence(1, random_tokens(70, 97, 8));
  Sequence b = make_sequence(2, random_tokens(37, 97, 9));
  Sequence a2 = a, b2 = b;
  a.sampling.max_tokens = b.sampling.max_tokens = 8;
  kv.allocate(a, 70);
  kv.allocate(b, 37);
  scrambled.assign(1, 80);
  scrambled.assign(2, 48);
  auto blocks = [&](int n) { return kind == KvKind::paged ? (n + kBlock - 1) / kBlock : 1; };

  Batch prefill{{{&a, 70, true}, {&b, 37, true}}, 0};
  kv.n_slot_calls = 0;
  const std::vector<float> got = [&] {
    auto l = backend.logits(make_step(backend, prefill, kv));
    return std::vector<float>(l.begin(), l.end());
  }();
  EXPECT_EQ(kv.n_slot_calls, blocks(70) + blocks(37));  // paged: 5 + 3, naive: 1 + 1 (not 107)
  Batch prefill2{{{&a2, 70, true}, {&b2, 37, true}}, 0};
  const auto want = scrambled_backend.logits(make_step(scrambled_backend, prefill2, scrambled));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  a.n_computed = a2.n_computed = 70;
  b.n_computed = b2.n_computed = 37;

  for (int step = 0; step < 5; ++step) {  // decodes: still per block, whatever the context
    for (Sequence* s : {&a, &b, &a2, &b2}) s->tokens.push_back(static_cast<TokenId>(11 + step));
    kv.grow(a, a.n_tokens());
    kv.grow(b, b.n_tokens());
    kv.n_slot_calls = 0;
    Batch decode{{{&a, 1, true}, {&b, 1, true}}, 0};
    const auto l = backend.logits(make_step(backend, decode, kv));
    const std::vector<float> dgot(l.begin(), l.end());
    EXPECT_EQ(kv.n_slot_calls, blocks(a.n_tokens()) + blocks(b.n_tokens())) << "step " << step;
    Batch decode2{{{&a2, 1, true}, {&b2, 1, true}}, 0};
    const auto dwant = scrambled_backend.logits(make_step(scrambled_backend, decode2, scrambled));
    EXPECT_EQ(0, std::memcmp(dgot.data(), dwant.data(), dgot.size() * sizeof(float))) << "step " << step;
    for (Sequence* s : {&a, &b, &a2, &b2}) ++s->n_computed;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuBackendKvLookups, ::testing::Values(KvKind::paged, KvKind::naive),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace servelab
