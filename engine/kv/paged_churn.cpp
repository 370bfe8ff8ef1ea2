#include "engine/kv/paged_churn.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include "engine/kv/block_runs.h"
#include "engine/kv/paged_kv.h"

namespace servelab {
namespace {

void require(bool ok, const char* field, const std::string& range, double got) {
  if (!ok) throw std::invalid_argument(std::string("paged churn: ") + field + " must be " + range + " (got " + std::to_string(got) + ")");
}

}  // namespace

void PagedChurnConfig::validate() const {
  require(block_size >= 1 && block_size <= 4096, "block_size", "in [1, 4096]", block_size);
  require(n_targets >= 1, "n_targets", ">= 1", n_targets);
  require(ctx >= 2, "ctx", ">= 2", ctx);
  require(slack >= 0 && slack <= 16, "slack", "in [0, 16]", slack);
  require(warmup_steps >= 0, "warmup_steps", ">= 0", warmup_steps);
  require(target_gap_steps >= 0, "target_gap_steps", ">= 0", target_gap_steps);
  require(shared_prefix >= 0, "shared_prefix", ">= 0", shared_prefix);
  require(bg_prompt_max >= 16 && bg_prompt_max > shared_prefix, "bg_prompt_max", ">= 16 and > shared_prefix", bg_prompt_max);
  require(bg_output_max >= 2, "bg_output_max", ">= 2", bg_output_max);
  require(bg_arrivals_per_step >= 0, "bg_arrivals_per_step", ">= 0", bg_arrivals_per_step);
}

PagedChurnResult run_paged_churn(const PagedChurnConfig& c) {
  c.validate();
  const int bs = c.block_size;
  const auto blocks_for = [bs](int64_t n) { return (n + bs - 1) / bs; };
  const int64_t target_blocks = blocks_for(c.ctx);
  PagedChurnResult out;
  out.n_blocks = static_cast<int64_t>(std::ceil(double(c.n_targets * target_blocks) * (1.0 + c.slack)));
  KvConfig kc;
  kc.kind = KvKind::paged;
  kc.block_size = bs;
  kc.prefix_caching = c.prefix_caching;
  PagedKvManager kv(kc, out.n_blocks * bs);

  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<TokenId> token(1000, 30000);
  std::vector<TokenId> system_prompt(static_cast<size_t>(c.shared_prefix));
  for (TokenId& t : system_prompt) t = token(rng);
  // Every live sequence's blocks still to come, plus every waiting target's: admission keeps
  // free blocks >= this, so no sequence ever waits to grow (no preemption in this workload).
  int64_t owed = c.n_targets * target_blocks;
  uint64_t next_id = 1;
  std::deque<std::unique_ptr<Sequence>> live;  // admission order
  std::vector<Sequence*> targets;
  std::vector<char> is_target(1, 0);  // by sequence id
  const auto final_blocks = [&](const Sequence& s) { return blocks_for(s.n_kv_final()); };
  const auto admit = [&](std::unique_ptr<Sequence> s) {
    kv.allocate(*s, s->n_prompt);
    s->n_computed = s->n_prompt;
    kv.on_computed(*s);
    owed -= static_cast<int64_t>(s->kv.blocks.size());
    live.push_back(std::move(s));
  };
  const auto make = [&](int n_prompt, int n_kv_final, bool shared) {
    auto s = std::make_unique<Sequence>();
    s->id = s->request_id = next_id++;
    is_target.push_back(0);
    s->n_prompt = n_prompt;
    s->sampling.max_tokens = n_kv_final + 1 - n_prompt;
    s->tokens.resize(static_cast<size_t>(n_prompt));
    for (int i = 0; i < n_prompt; ++i) s->tokens[static_cast<size_t>(i)] = shared && i < c.shared_prefix ? system_prompt[static_cast<size_t>(i)] : token(rng);
    return s;
  };
  std::uniform_real_distribution<double> share(0.25, 0.75);
  std::uniform_int_distribution<int> bg_prompt(std::max(16, c.shared_prefix + 1), c.bg_prompt_max), bg_output(2, c.bg_output_max);
  const int64_t first_target = c.warmup_steps;
  int n_arrived = 0;
  for (int64_t step = 0;; ++step) {
    // Targets arrive on their steps (their blocks are owed from the start: they always fit).
    while (n_arrived < c.n_targets && step >= first_target + int64_t{n_arrived} * c.target_gap_steps) {
      const int n_prompt = std::clamp(static_cast<int>(c.ctx * share(rng)), 1, c.ctx);
      auto s = make(n_prompt, c.ctx, false);
      owed -= target_blocks;
      owed += final_blocks(*s);
      targets.push_back(s.get());
      is_target[s->id] = 1;
      admit(std::move(s));
      ++n_arrived;
    }
    // Background joins while its whole life fits beside what is owed.
    for (int k = 0; k < c.bg_arrivals_per_step; ++k) {
      const int n_prompt = bg_prompt(rng), n_out = bg_output(rng);
      auto s = make(n_prompt, n_prompt + n_out - 1, rng() % 2 == 0);
      const int64_t need = final_blocks(*s);
      if (kv.free_slots() / bs - owed < need) break;
      owed += need;
      admit(std::move(s));
      out.n_cached_prefix_tokens += live.back()->kv.n_cached_prefix;
      ++out.n_background;
    }
    // One decode token for every live sequence that has not reached its final length.
    for (auto& s : live) {
      const int n = s->n_computed;
      if (n >= s->n_kv_final()) continue;
      s->tokens.push_back(token(rng));
      const int64_t held = static_cast<int64_t>(s->kv.blocks.size());
      kv.grow(*s, n + 1);
      owed -= static_cast<int64_t>(s->kv.blocks.size()) - held;
      s->n_computed = n + 1;
      kv.on_computed(*s);
    }
    bool targets_done = n_arrived == c.n_targets;
    for (const Sequence* t : targets) targets_done = targets_done && t->n_computed >= c.ctx;
    // Finished background leaves; targets stay.
    for (auto it = live.begin(); it != live.end();) {
      Sequence& s = **it;
      if (!is_target[s.id] && s.n_computed >= s.n_kv_final()) {
        kv.release(s);
        it = live.erase(it);
      } else {
        ++it;
      }
    }
    out.n_steps = step + 1;
    if (targets_done) break;
  }
  std::vector<const Sequence*> all;
  for (const auto& s : live) all.push_back(s.get());
  kv.check_invariants(all);
  TableRuns runs;
  for (const Sequence* t : targets) {
    out.tables.emplace_back(t->kv.blocks.begin(), t->kv.blocks.begin() + target_blocks);
    runs.add(out.tables.back());
  }
  out.table_blocks = runs.blocks;
  out.table_runs = runs.runs;
  return out;
}

}  // namespace servelab
