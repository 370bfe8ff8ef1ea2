#pragma once
// The scenario `servelab bench` (and `servelab capacity --url`) builds from its flags, with
// vLLM `bench serve`'s names accepted beside ours, and errors turned back into the flag the user
// typed (`--rate: must be > 0`, not `bench:9:7: workload.rates[0]`).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "loadgen/records/record.h"
#include "loadgen/scenario.h"

namespace servelab::cli {

/// bench's flags; ours and vLLM's aliases land in the same fields.
struct BenchArgs {
  std::vector<std::string> urls;     ///< --url / --base-url (a full endpoint URL is understood)
  std::string endpoint;              ///< --endpoint /v1/completions | /v1/chat/completions
  std::string model;
  std::string api;                   ///< "" = completions, or what the URL/--endpoint names
  std::vector<std::string> headers;
  std::string tokenizer;
  double timeout_s = 600;
  std::string balance = "round_robin";
  std::vector<std::string> rates = {"10"};  ///< numbers or inf (--rate / --request-rate)
  int n = 100;                       ///< --n / --num-prompts
  double duration_s = 0;
  int concurrency = 0;               ///< closed loop with N users
  int max_concurrency = 0;           ///< a cap on requests in flight on top of the rate (vLLM's meaning)
  std::string arrival = "poisson";
  double burstiness = 1.0;           ///< vLLM: gamma shape; 1 = Poisson
  int prompt_tokens = 128;           ///< --prompt-tokens / --random-input-len
  int output_tokens = 64;            ///< --output-tokens / --random-output-len
  double range_ratio = 0.0;          ///< --random-range-ratio: lengths uniform in L(1 ± r)
  std::string dataset_name;          ///< --dataset-name random | sharegpt
  std::string dataset;               ///< --dataset / --dataset-path
  int warmup = 0;
  uint64_t seed = 0;
  int max_model_len = 0;
  std::vector<std::string> goodput;  ///< --goodput ttft:MS tpot:MS e2el:MS
  std::string percentile_metrics;    ///< --percentile-metrics ttft,tpot,itl,e2el (vLLM result keys)
  std::string metric_percentiles;    ///< --metric-percentiles 50,90,99
  bool ignore_eos = true;            ///< --ignore-eos: accepted as vLLM users type it (the default)
  bool no_ignore_eos = false;        ///< --no-ignore-eos: let the server stop at EOS
  std::string extra_body;            ///< JSON object merged into every request body
  std::string structured_output;     ///< --structured-output builtin | FILE: JSON schemas sent as response_format
  double structured_fraction = 1.0;  ///< --structured-fraction: share of requests carrying a schema
  double max_error_rate = 0.05;
  bool no_preflight = false;
  std::string name;                  ///< "" = bench-YYYYmmdd-HHMMSS
  std::string out;
  bool force = false;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool no_plots = false;
  bool save_result = false;          ///< vLLM: write its result JSON
  std::string result_format = "servelab";  ///< servelab | vllm
  std::string result_dir;
  std::string result_filename;
};

/// Adds every target and workload flag (ours and vLLM's) to `sub`, with their conflicts.
void add_bench_flags(CLI::App& sub, BenchArgs& a);

/// Builds and loads the scenario. Throws ScenarioError whose messages name the flags.
Scenario bench_scenario(const BenchArgs& a);

/// Local time as YYYYmmdd-HHMMSS (result names that never collide).
std::string timestamp_now();

/// One run's vLLM `bench serve --save-result` JSON from its records (vLLM's key names).
nlohmann::ordered_json vllm_result_json(const std::string& run_label, const std::vector<RequestRecord>& records,
                                        const BenchArgs& a, double rate, const std::vector<double>& percentiles,
                                        const std::vector<std::string>& metrics);

}  // namespace servelab::cli
