// The vLLM paper's Figure 2 effect: with ShareGPT-like lengths, a paged cache keeps almost all of
// the memory it hands out filled with token states, while contiguous reservations waste most of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace {

constexpr int kMaxModelLen = 2048;
constexpr int64_t kArenaSlots = 40000;

/// Lognormal length with the given mean, clipped to [1, cap].
int lognormal_len(std::mt19937_64& rng, double mean, double sigma, int cap) {
  std::lognormal_distribution<double> d(std::log(mean) - sigma * sigma / 2, sigma);
  return std::clamp(static_cast<int>(std::lround(d(rng))), 1, cap);
}

/// Admits ShareGPT-like requests (prompt mean ≈161, output mean ≈338) until one no longer fits,
/// each grown to a random point of its output; returns the arena's stored / used share.
double fill_and_measure(const KvConfig& config, uint64_t seed) {
  auto kv = make_kv_manager(config, kArenaSlots);
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<Sequence>> live;
  for (uint64_t id = 1;; ++id) {
    const int n_prompt = lognormal_len(rng, 161.3, 1.0, kMaxModelLen - 1);
    const int n_output = lognormal_len(rng, 338.0, 0.8, kMaxModelLen - n_prompt);
    auto seq = std::make_unique<Sequence>(kvtest::make_seq(id, kvtest::iota_tokens(n_prompt, static_cast<TokenId>(id * 4096)), n_output));
    // Output tokens whose K/V is computed so far: at most n_output − 1 (the last one's never is).
    const int n_done = std::uniform_int_distribution<int>(0, n_output - 1)(rng);
    const int n_now = n_prompt + n_done;
    if (!kv->can_allocate(*seq, n_prompt)) break;
    kv->allocate(*seq, n_prompt);
    if (!kv->can_grow(*seq, n_now)) {
      kv->release(*seq);
      break;
    }
    kv->grow(*seq, n_now);
    seq->tokens.resize(static_cast<size_t>(n_now), 7);
    seq->n_computed = n_now;
    live.push_back(std::move(seq));
  }
  std::vector<const Sequence*> view;
  for (const auto& s : live) view.push_back(s.get());
  kv->check_invariants(view);
  const KvBreakdown b = kv->breakdown(view);
  EXPECT_EQ(b.stored + b.reserved + b.internal_frag + b.external_frag + b.free, b.capacity);
  EXPECT_GT(view.size(), 5u);
  return b.utilization();
}

double mean_utilization(const KvConfig& config) {
  double sum = 0;
  constexpr int kTrials = 8;
  for (int t = 0; t < kTrials; ++t) sum += fill_and_measure(config, 100 + static_cast<uint64_t>(t));
  return sum / kTrials;
}

KvConfig naive(NaiveReserve r) {
  KvConfig c;
  c.kind = KvKind::naive;
  c.reserve = r;
  c.max_model_len = kMaxModelLen;
  return c;
}

TEST(KvUtilization, PagedKeepsMemoryFilledWhileReservationsWasteIt) {
  KvConfig paged;
  paged.kind = KvKind::paged;
  paged.block_size = 16;
  paged.max_model_len = kMaxModelLen;
  const double u_paged = mean_utilization(paged);
  const double u_max = mean_utilization(naive(NaiveReserve::max));
  const double u_pow2 = mean_utilization(naive(NaiveReserve::pow2));
  const double u_oracle = mean_utilization(naive(NaiveReserve::oracle));
  std::printf("KV utilization (stored / used), ShareGPT-like lengths, %lld-slot arena:\n"
              "  naive max %.3f  naive pow2 %.3f  naive oracle %.3f  paged(16) %.3f\n",
              static_cast<long long>(kArenaSlots), u_max, u_pow2, u_oracle, u_paged);
  EXPECT_GE(u_paged, 0.9);
  EXPECT_LE(u_max, 0.4);
  EXPECT_LT(u_max, u_pow2);
  EXPECT_LT(u_pow2, u_oracle);
  EXPECT_LT(u_oracle, u_paged);
}

}  // namespace
}  // namespace servelab
