// The cached, batched CPU forward against the plain reference, over MHA and GQA shapes.
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/reference.h"
#include "engine/backend/sampler.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

using testing::make_sequence;
using testing::random_tokens;
using testing::rel_error;
using testing::ScrambledKv;
using testing::small_config;

constexpr double kTolerance = 1e-4;
constexpr int64_t kArenaSlots = 1024;

struct Shape {
  const char* name;
  int n_kv_heads;
  bool attention_bias;
  friend void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }
};

/// One backend over scrambled slots, and a step() that advances n_computed like the engine.
class CpuBackendVsReference : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    weights_ = std::make_shared<const ModelWeights>(
        ModelWeights::random(small_config(GetParam().n_kv_heads, GetParam().attention_bias), 11));
    backend_ = std::make_unique<CpuBackend>(weights_, CpuBackendOptions{.n_threads = 2});
    backend_->init_kv(kArenaSlots);
  }

  Sequence& add(uint64_t id, int n_prompt) {
    seqs_.push_back(std::make_unique<Sequence>(make_sequence(id, random_tokens(n_prompt, vocab(), 100 + id))));
    kv_.assign(id, 256);
    return *seqs_.back();
  }

  /// Runs one batch; returns a copy of each sampled entry's logits; advances n_computed.
  std::vector<std::vector<float>> step(const std::vector<BatchEntry>& entries, int n_padding = 0) {
    Batch batch;
    batch.entries = entries;
    batch.n_padding_tokens = n_padding;
    const std::span<const float> logits = backend_->logits(make_step(*backend_, batch, kv_));
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i * vocab() < logits.size(); ++i)
      out.emplace_back(logits.begin() + i * vocab(), logits.begin() + (i + 1) * vocab());
    for (const BatchEntry& e : entries) e.seq->n_computed += e.n_new;
    return out;
  }

  /// Appends the reference's greedy token, as the engine would append a sampled one.
  void append_reference_token(Sequence& s) { s.tokens.push_back(argmax_token(reference(s))); }

  std::vector<float> reference(const Sequence& s) const { return reference_logits(*weights_, s.tokens); }
  int vocab() const { return weights_->config.vocab_size; }

  std::shared_ptr<const ModelWeights> weights_;
  std::unique_ptr<CpuBackend> backend_;
  ScrambledKv kv_{kArenaSlots, 5};
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

TEST_P(CpuBackendVsReference, SinglePrefill) {
  Sequence& s = add(1, 13);
  const auto logits = step({{&s, 13, true}});
  ASSERT_EQ(logits.size(), 1u);
  EXPECT_LT(rel_error(logits[0], reference(s)), kTolerance);
}

TEST_P(CpuBackendVsReference, ChunkedPrefill) {
  Sequence& s = add(1, 16);
  const std::vector<float> all = reference_logits_all(*weights_, s.tokens);
  int done = 0;
  for (int chunk : {5, 1, 7, 3}) {
    const auto logits = step({{&s, chunk, true}});
    done += chunk;
    const std::span<const float> expected(all.data() + size_t(done - 1) * vocab(), vocab());
    EXPECT_LT(rel_error(logits[0], expected), kTolerance) << "after " << done << " tokens";
  }
}

TEST_P(CpuBackendVsReference, PrefillThenDecode) {
  Sequence& s = add(1, 6);
  step({{&s, 6, true}});
  for (int i = 0; i < 8; ++i) {
    append_reference_token(s);
    const auto logits = step({{&s, 1, true}});
    EXPECT_LT(rel_error(logits[0], reference(s)), kTolerance) << "decode step " << i;
  }
}

TEST_P(CpuBackendVsReference, MixedBatchWithPadding) {
  Sequence& a = add(1, 9);
  Sequence& b = add(2, 10);
  Sequence& c = add(3, 15);
  Sequence& d = add(4, 19);
  step({{&b, 10, true}, {&c, 4, false}, {&d, 19, true}});
  append_reference_token(b);
  append_reference_token(d);

  // One prefilling from scratch, two decoding, one mid-prompt chunk that samples nothing.
  const std::vector<BatchEntry> mixed = {{&a, 9, true}, {&b, 1, true}, {&c, 6, false}, {&d, 1, true}};
  const auto plain = step(mixed);
  for (const BatchEntry& e : mixed) e.seq->n_computed -= e.n_new;  // the same step again, padded
  const auto padded = step(mixed, 5);
  ASSERT_EQ(plain.size(), 3u);
  ASSERT_EQ(padded.size(), 3u);
  const Sequence* sampled[] = {&a, &b, &d};
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> expected = reference(*sampled[i]);
    EXPECT_LT(rel_error(plain[i], expected), kTolerance) << "entry " << i;
    EXPECT_LT(rel_error(padded[i], expected), kTolerance) << "padded entry " << i;
    EXPECT_LT(rel_error(padded[i], plain[i]), 1e-5) << "padding changed entry " << i;
  }

  // c's last chunk beside a's first decode.
  append_reference_token(a);
  const auto last = step({{&a, 1, true}, {&c, 5, true}});
  EXPECT_LT(rel_error(last[0], reference(a)), kTolerance);
  EXPECT_LT(rel_error(last[1], reference(c)), kTolerance);
}

TEST_P(CpuBackendVsReference, GreedyTokensDoNotDependOnBatchComposition) {
  Sequence& alone = add(1, 12);
  Sequence& other1 = add(2, 7);
  Sequence& other2 = add(3, 20);
  Sequence twin = alone;  // the same prompt in another backend, run in a crowded batch
  twin.id = 9;
  kv_.assign(9, 256);
  CpuBackend crowded(weights_, CpuBackendOptions{.n_threads = 1});
  crowded.init_kv(kArenaSlots);

  for (SamplingParams params : {SamplingParams{}, SamplingParams{.temperature = 0.9f, .top_p = 0.95f, .seed = 3}}) {
    for (Sequence* s : {&alone, &twin, &other1, &other2}) {
      s->tokens.resize(s->n_prompt);
      s->n_computed = 0;
      s->sampling = params;
    }
    for (int i = 0; i < 5; ++i) {
      Batch solo;
      solo.entries = {{&alone, alone.n_tokens() - alone.n_computed, true}};
      Batch many;
      many.entries = {{&other1, other1.n_tokens() - other1.n_computed, true},
                      {&twin, twin.n_tokens() - twin.n_computed, true},
                      {&other2, other2.n_tokens() - other2.n_computed, true}};
      many.n_padding_tokens = 3;
      const TokenId t_solo = run_batch(*backend_, solo, kv_).tokens.at(0);
      const StepOutput r_many = run_batch(crowded, many, kv_);
      ASSERT_EQ(r_many.tokens.size(), 3u);
      EXPECT_EQ(t_solo, r_many.tokens[1]) << "step " << i << " temperature " << params.temperature;
      const std::vector<std::pair<Sequence*, TokenId>> next = {
          {&alone, t_solo}, {&other1, r_many.tokens[0]}, {&twin, r_many.tokens[1]}, {&other2, r_many.tokens[2]}};
      for (auto [s, t] : next) {
        s->n_computed = s->n_tokens();
        s->tokens.push_back(t);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBackendVsReference,
                         ::testing::Values(Shape{"mha", 4, false}, Shape{"gqa2", 2, false},
                                           Shape{"gqa1", 1, false}, Shape{"qwen_bias", 2, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CpuBackend, ThreadedAttentionOverLongPromptMatchesReference) {
  // 70 tokens: three attention chunks per kv head, enough work to be split across the pool.
  auto weights = std::make_shared<const ModelWeights>(ModelWeights::random(small_config(2), 3));
  CpuBackend backend(weights, CpuBackendOptions{.n_threads = 3});
  EXPECT_EQ(backend.n_threads(), 3);
  backend.init_kv(512);
  ScrambledKv kv(512, 9);
  Sequence s = make_sequence(1, random_tokens(70, 97, 4));
  kv.assign(1, 80);
  Batch batch;
  batch.entries = {{&s, 70, true}};
  const std::span<const float> logits = backend.logits(make_step(backend, batch, kv));
  EXPECT_LT(rel_error(logits, reference_logits(*weights, s.tokens)), kTolerance);
}

TEST(CpuBackend, SlotContentsMatchBetweenPrefillAndDecode) {
  // The same tokens, one sequence prefilled at once and one fed token by token: their cached
  // K/V agree to rounding (dense layers may round differently for 1 row and for many).
  auto weights = std::make_shared<const ModelWeights>(ModelWeights::random(small_config(2, true), 8));
  CpuBackend backend(weights, CpuBackendOptions{.n_threads = 2});
  backend.init_kv(256);
  ScrambledKv kv(256, 3);
  Sequence whole = make_sequence(1, random_tokens(24, 97, 6));
  Sequence stepped = whole;
  stepped.id = 2;
  kv.assign(1, 24);
  kv.assign(2, 24);
  run_batch(backend, Batch{{{&whole, 24, true}}, 0}, kv);
  for (; stepped.n_computed < 24; ++stepped.n_computed) run_batch(backend, Batch{{{&stepped, 1, true}}, 0}, kv);
  const std::vector<std::byte> a = testing::read_slots(backend, kv.slots_of(1));
  const std::vector<std::byte> b = testing::read_slots(backend, kv.slots_of(2));
  ASSERT_EQ(a.size(), b.size());
  const std::span<const float> fa(reinterpret_cast<const float*>(a.data()), a.size() / sizeof(float));
  const std::span<const float> fb(reinterpret_cast<const float*>(b.data()), b.size() / sizeof(float));
  EXPECT_LT(rel_error(fb, fa), 1e-5);
}

TEST(CpuBackend, Llama3RopeScalingMatchesReference) {
  // theta 100 and an original length of 128 put the 8 frequency pairs of head_dim 16 in all three
  // bands (3 kept, 3 smoothed, 2 divided by 8) within a 40-token context.
  ModelConfig config = small_config(2);
  config.rope_theta = 100.0f;
  config.rope_scaling = {.type = RopeScaling::Type::llama3, .factor = 8.0f, .low_freq_factor = 1.0f,
                         .high_freq_factor = 4.0f, .original_max_position = 128};
  auto weights = std::make_shared<const ModelWeights>(ModelWeights::random(config, 5));
  ModelWeights unscaled = ModelWeights::random(config, 5);
  unscaled.config.rope_scaling = {};
  CpuBackend backend(weights, CpuBackendOptions{.n_threads = 2});
  backend.init_kv(256);
  ScrambledKv kv(256, 4);
  Sequence s = make_sequence(1, random_tokens(40, 97, 12));
  kv.assign(1, 48);
  const std::span<const float> prefill = backend.logits(make_step(backend, Batch{{{&s, 40, true}}, 0}, kv));
  const std::vector<float> expected = reference_logits(*weights, s.tokens);
  EXPECT_LT(rel_error(prefill, expected), kTolerance);
  EXPECT_GT(rel_error(reference_logits(unscaled, s.tokens), expected), 1e-3) << "the scaling must matter here";
  s.n_computed = 40;
  for (int i = 0; i < 4; ++i) {  // decode steps read the scaled keys back from the arena
    s.tokens.push_back(argmax_token(reference_logits(*weights, s.tokens)));
    const std::span<const float> logits = backend.logits(make_step(backend, Batch{{{&s, 1, true}}, 0}, kv));
    EXPECT_LT(rel_error(logits, reference_logits(*weights, s.tokens)), kTolerance) << "decode step " << i;
    ++s.n_computed;
  }
}

TEST(CpuBackend, KvBytesPerSlotCountsKAndVOfEveryLayer) {
  CpuBackend backend(ModelWeights::random(small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  EXPECT_EQ(backend.name(), "cpu");
  EXPECT_EQ(backend.kv_bytes_per_slot(), 2 * 2 * (2 * 16) * 4);
}

}  // namespace
}  // namespace servelab
