#pragma once
// A seeded serving workload on a PagedKvManager, to see the block tables it produces after churn
// (the layout the decode kernel reads): background requests arrive, prefill, decode one token a
// step and leave, keeping the arena busy; then n_targets sequences arrive one after another, each
// prefills a random share of ctx tokens and decodes to ctx, beside the background that goes on.
// Used by the layout test (tests/kv) and by kernel_bench's `engine` arena (bench/kernels). Plain
// C++ with a small header, so a .cu file can include it.
#include <cstdint>
#include <vector>

namespace servelab {

/// The workload. validate() names the bad field.
struct PagedChurnConfig {
  int block_size = 16;
  int n_targets = 8;           ///< sequences whose tables are returned
  int ctx = 4096;              ///< their final length in positions
  double slack = 0.5;          ///< arena = the targets' blocks × (1 + slack)
  int warmup_steps = 1000;     ///< background-only steps before the first target arrives
  int target_gap_steps = 32;   ///< steps between target arrivals
  int bg_prompt_max = 1024;    ///< background prompt tokens: uniform in [max(16, shared_prefix + 1), max]
  int bg_output_max = 512;     ///< background output tokens: uniform in [2, max]
  int bg_arrivals_per_step = 2;  ///< at most this many background requests join a step
  int shared_prefix = 64;      ///< half the background prompts start with these shared tokens
  bool prefix_caching = true;
  uint64_t seed = 1;
  void validate() const;
};

/// The targets' tables and what the run did.
struct PagedChurnResult {
  int64_t n_blocks = 0;                      ///< arena blocks (block ids are < n_blocks)
  std::vector<std::vector<int32_t>> tables;  ///< per target: its ceil(ctx / block_size) block ids
  int64_t table_blocks = 0, table_runs = 0;  ///< over the targets' tables: blocks and physical runs
  int64_t n_steps = 0, n_background = 0;     ///< steps run, background requests served
  int64_t n_cached_prefix_tokens = 0;        ///< background prompt tokens found in the prefix cache
  /// Mean blocks per physical run (consecutive ids in table order) over the targets' tables.
  double mean_run_blocks() const { return table_runs ? double(table_blocks) / double(table_runs) : 0.0; }
};

/// Runs the workload (a few ms to a few s: ~steps × live sequences block-table updates).
PagedChurnResult run_paged_churn(const PagedChurnConfig& config);

}  // namespace servelab
