#include "loadgen/profile_grid_for.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/sched/scheduler_config.h"
#include "loadgen/backend_spec.h"
#include "loadgen/plan.h"

namespace servelab {

namespace {

/// The q-quantile of sorted `v` (nearest rank), at least 1.
int grid_quantile(const std::vector<int>& v, double q) {
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::floor(q * double(v.size() - 1) + 0.5)));
  return std::max(1, v[i]);
}

std::vector<int> grid_sorted_unique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

std::string grid_list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

}  // namespace

ScenarioGrid profile_grid_for(const Scenario& scenario, const ProfileOptions& base) {
  const std::vector<double> rates = scenario.sweep_rates();
  const Plan plan = Planner(scenario).make(rates.empty() ? 0.0 : rates.front());
  std::vector<int> prompts, contexts_mid;
  int longest = 1;
  for (const PlannedRequest& r : plan.requests) {
    const int p = std::max(1, static_cast<int>(r.prompt.size()));
    prompts.push_back(p);
    contexts_mid.push_back(p + r.output_tokens / 2);
    longest = std::max(longest, p + r.output_tokens);
  }
  if (prompts.empty()) throw std::invalid_argument("profile --for-scenario: the scenario plans no request");
  std::sort(prompts.begin(), prompts.end());
  std::sort(contexts_mid.begin(), contexts_mid.end());

  int max_seqs = 1, max_rows = 1, chunk = 0;
  const int max_model_len = std::max(1, scenario.engine.max_model_len);
  for (const StrategySpec& st : scenario.strategies) {
    max_seqs = std::max(max_seqs, max_step_seqs(st.sched));
    max_rows = std::max(max_rows, max_step_rows(st.sched, max_model_len));
    if (st.sched.chunked_prefill) chunk = std::max(chunk, st.sched.max_num_batched_tokens);
  }

  ScenarioGrid out;
  out.grid = base;
  ProfileOptions& g = out.grid;
  g.prefill_lens.clear();
  for (double q : {0.0, 0.25, 0.5, 0.75, 0.95, 1.0}) g.prefill_lens.push_back(grid_quantile(prompts, q));
  g.prefill_lens = grid_sorted_unique(g.prefill_lens);
  g.prompt_lens = grid_sorted_unique({grid_quantile(prompts, 0.5), prompts.back()});
  g.contexts.clear();
  for (double q : {0.05, 0.5, 0.95}) g.contexts.push_back(grid_quantile(contexts_mid, q));
  g.contexts.push_back(longest);
  g.contexts = grid_sorted_unique(g.contexts);
  g.batch_sizes.clear();
  for (int b = 1; b <= std::min(16, max_seqs); ++b) g.batch_sizes.push_back(b);
  for (int b = 32; b < max_seqs; b *= 2) g.batch_sizes.push_back(b);
  g.batch_sizes.push_back(max_seqs);
  g.batch_sizes = grid_sorted_unique(g.batch_sizes);
  g.chunk_lens.clear();
  for (double q : {0.25, 0.5, 0.75}) {
    const int c = grid_quantile(prompts, q);
    g.chunk_lens.push_back(chunk > 0 ? std::min(c, chunk) : c);
  }
  if (chunk > 0 && prompts.back() > chunk) {
    g.chunk_lens.push_back(chunk);
    // A prompt longer than the chunk ends in a chunk of its length mod the chunk, at a long
    // context: those remainders' quartiles too (a grid of full chunks alone left them to the
    // decodes' row knots, which priced them 85-89% low on an H200).
    std::vector<int> rest;
    for (int p : prompts)
      if (p > chunk && p % chunk != 0) rest.push_back(p % chunk);
    std::sort(rest.begin(), rest.end());
    if (!rest.empty())
      for (double q : {0.25, 0.5, 0.75}) g.chunk_lens.push_back(grid_quantile(rest, q));
  }
  g.chunk_lens = grid_sorted_unique(g.chunk_lens);
  // No point longer than a sequence can be: a chunk at the longest context starts earlier.
  g.max_len = max_model_len;
  // Static batching pads a batch to its longest prompt; a chunked step holds at most its chunk.
  g.max_rows = std::min(max_rows, std::max(max_seqs * prompts.back(), std::max(chunk, 1)));

  const std::string from = std::to_string(plan.requests.size()) + " planned requests";
  out.notes.push_back("--prefill-lens " + grid_list(g.prefill_lens) + ": prompt-length quantiles 0/25/50/75/95/100% of " + from);
  out.notes.push_back("--prompt-len " + grid_list(g.prompt_lens) + ": median and longest prompt (batched prefills)");
  out.notes.push_back("--contexts " + grid_list(g.contexts) + ": prompt + output/2 at 5/50/95%, and the longest prompt + output");
  out.notes.push_back("--batch " + grid_list(g.batch_sizes) + ": up to " + std::to_string(max_seqs) +
                      ", the largest batch of the scenario's strategies");
  out.notes.push_back("--chunk-lens " + grid_list(g.chunk_lens) + ": prompt quartiles" +
                      (chunk > 0 ? ", capped at the " + std::to_string(chunk) + "-token chunk" +
                                       (prompts.back() > chunk ? ", and the quartiles of the last chunks of longer prompts" : "")
                                 : std::string()));
  out.notes.push_back("--max-rows " + std::to_string(g.max_rows) + ": the largest step of the scenario's strategies");
  g.verify_ks.clear();
  for (const StrategySpec& st : scenario.strategies) {
    if (!st.speculative) continue;
    const SpeculativeConfig& sc = *st.speculative;
    g.verify_ks.push_back(sc.num_speculative_tokens);
    if (sc.adaptive && sc.num_speculative_tokens > 1) g.verify_ks.push_back(1);
    if (sc.method == SpecMethod::self && out.draft_layers == 0 && out.draft_preset.empty()) out.draft_layers = sc.num_layers;
    if (sc.method == SpecMethod::draft_model && out.draft_layers == 0 && out.draft_preset.empty()) out.draft_preset = sc.model;
  }
  g.verify_ks = grid_sorted_unique(g.verify_ks);
  if (!g.verify_ks.empty())
    out.notes.push_back("--verify-k " + grid_list(g.verify_ks) + ": the speculating strategies' draft counts");
  if (out.draft_layers > 0)
    out.notes.push_back("--draft-layers " + std::to_string(out.draft_layers) + ": the first self-speculating strategy's draft");
  if (!out.draft_preset.empty())
    out.notes.push_back("--draft-preset " + out.draft_preset + ": the first draft_model strategy's draft");
  g.lora_rank = 0;
  // The strategies' adapters (each its own `lora:` or workload.lora): the largest rank; one adapter
  // a step and, for each, as many as its slots hold (a step's distinct adapters are bounded by max_loras).
  std::vector<int> lora_adapters;
  for (const StrategySpec& st : scenario.strategies) {
    const LoraWorkloadSpec& lora = strategy_lora(scenario, st);
    if (!lora.enabled()) continue;
    g.lora_rank = std::max(g.lora_rank, lora.rank);
    lora_adapters.push_back(1);
    lora_adapters.push_back(std::max(1, std::min<int>(lora.max_loras, int(lora.adapters.size()))));
  }
  if (g.lora_rank > 0) {
    g.lora_adapters = grid_sorted_unique(lora_adapters);
    out.notes.push_back("--lora-rank " + std::to_string(g.lora_rank) + " --lora-adapters " + grid_list(g.lora_adapters) +
                        ": the adapters' largest rank and the most a step holds (max_loras)");
  }
  return out;
}

}  // namespace servelab
