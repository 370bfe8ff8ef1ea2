// Scenario schema: every kind of bad field gives its own message at the right line:col; defaults.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "loadgen_test_util.h"
#include "loadgen/backend_spec.h"
#include "loadgen/scenario.h"

namespace servelab {
namespace {

using testing_util::kBaseScenario;
using testing_util::load_yaml;
using testing_util::scenario_errors;
using testing_util::write_temp;

/// The only error of `yaml`, or a failure listing them.
std::string only_error(const std::string& yaml) {
  const auto errs = scenario_errors(yaml);
  std::string all;
  for (const auto& e : errs) all += e + "\n";
  EXPECT_EQ(errs.size(), 1u) << all;
  return errs.empty() ? "" : errs[0];
}

TEST(Scenario, BaseLoadsWithDefaults) {
  const Scenario s = load_yaml(kBaseScenario);
  EXPECT_EQ(s.name, "base");
  EXPECT_EQ(s.output_dir, "results/runs/base");
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.model.preset, "tiny");
  EXPECT_EQ(s.model.vocab_size, preset("tiny").vocab_size);
  EXPECT_EQ(s.engine.max_model_len, preset("tiny").max_position);
  EXPECT_EQ(s.engine.swap_space_bytes, 4ll << 30);  // vLLM's default swap_space: 4 GiB
  ASSERT_EQ(s.strategies.size(), 1u);
  EXPECT_EQ(s.strategies[0].label, "continuous-paged");
  EXPECT_EQ(s.strategies[0].kv.max_model_len, s.engine.max_model_len);
  EXPECT_EQ(s.workload.mode, LoadMode::open_loop);
  EXPECT_EQ(s.workload.arrival.process, ArrivalProcess::poisson);
  EXPECT_EQ(s.workload.rates, (std::vector<double>{1, 2}));
  EXPECT_EQ(s.workload.prompt.dist.kind, LengthDistKind::fixed);
  EXPECT_EQ(s.workload.prompt.dist.value, 16);
  EXPECT_DOUBLE_EQ(s.slo.ttft_ms, 1000.0);
  EXPECT_DOUBLE_EQ(s.slo.tpot_ms, 150.0);
  EXPECT_DOUBLE_EQ(s.slo.attainment, 0.9);
  EXPECT_EQ(describe(s), "1 strategy × 2 rates, 10 requests per rate, poisson arrivals, model tiny on cpu");
}

TEST(Scenario, FullSchemaMapsOntoEngineConfigs) {
  const Scenario s = load_yaml(
      "name: full\n"
      "seed: 42\n"
      "model: {preset: tiny, dtype: f32}\n"
      "backend: {kind: sim, sim_device: h100}\n"
      "engine: {kv_cache_mb: 8, max_model_len: 512, swap_space: 0.5}\n"
      "strategies:\n"
      "  - {label: st, batching: static, batch_size: 4, max_wait_ms: 20, kv: {kind: naive, reserve: pow2}}\n"
      "  - {batching: dynamic, max_batch_size: 6, max_queue_delay_ms: 2}\n"
      "  - batching: continuous\n"
      "    max_num_seqs: 16\n"
      "    max_num_batched_tokens: 256\n"
      "    chunked_prefill: true\n"
      "    preemption: swap\n"
      "    kv: {kind: paged, block_size: 8, prefix_caching: false}\n"
      "workload:\n"
      "  arrival: {process: gamma, cv: 2}\n"
      "  rates: {from: 1, to: 4, steps: 4}\n"
      "  duration_s: 30\n"
      "  warmup_requests: 3\n"
      "  prompt_tokens: {dist: lognormal, mean: 100, sigma: 0.5, max: 300}\n"
      "  output_tokens: {dist: uniform, min: 10, max: 50}\n"
      "  shared_prefix_tokens: 32\n"
      "slo: {ttft_ms: 200, tpot_ms: 50, attainment: 0.95}\n"
      "gates:\n"
      "  - {metric: goodput, min: 10, strategy: st, rate: 2}\n"
      "  - {metric: ttft_p99_ms, max: 500}\n");
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.model.dtype, DType::f32);
  EXPECT_EQ(s.backend.kind, BackendKind::sim);
  EXPECT_EQ(s.engine.kv_cache_bytes, 8ll << 20);
  EXPECT_EQ(s.engine.swap_space_bytes, 512ll << 20);
  ASSERT_EQ(s.strategies.size(), 3u);
  EXPECT_EQ(s.strategies[0].label, "st");
  EXPECT_EQ(s.strategies[0].sched.kind, BatchingKind::static_batch);
  EXPECT_EQ(s.strategies[0].sched.batch_size, 4);
  EXPECT_DOUBLE_EQ(s.strategies[0].sched.max_wait_ms, 20);
  EXPECT_EQ(s.strategies[0].kv.kind, KvKind::naive);
  EXPECT_EQ(s.strategies[0].kv.reserve, NaiveReserve::pow2);
  EXPECT_EQ(s.strategies[1].label, "dynamic-paged");
  EXPECT_EQ(s.strategies[1].sched.max_batch_size, 6);
  const auto& c = s.strategies[2];
  EXPECT_EQ(c.sched.max_num_seqs, 16);
  EXPECT_EQ(c.sched.max_num_batched_tokens, 256);
  EXPECT_TRUE(c.sched.chunked_prefill);
  EXPECT_EQ(c.sched.preempt, PreemptMode::swap);
  EXPECT_EQ(c.kv.block_size, 8);
  EXPECT_FALSE(c.kv.prefix_caching);
  EXPECT_EQ(c.kv.max_model_len, 512);
  EXPECT_EQ(s.workload.arrival.process, ArrivalProcess::gamma);
  EXPECT_DOUBLE_EQ(s.workload.arrival.cv, 2.0);
  EXPECT_EQ(s.workload.n_requests, 0);
  EXPECT_DOUBLE_EQ(s.workload.duration_s, 30);
  EXPECT_EQ(s.workload.prompt.dist.kind, LengthDistKind::lognormal);
  EXPECT_EQ(s.workload.prompt.dist.max, 300);
  EXPECT_EQ(s.workload.shared_prefix_tokens, 32);
  ASSERT_EQ(s.gates.size(), 2u);
  EXPECT_EQ(s.gates[0].strategy, "st");
  EXPECT_EQ(*s.gates[0].rate, 2.0);
  EXPECT_EQ(*s.gates[1].max, 500.0);
  EXPECT_FALSE(s.gates[1].min.has_value());
}

TEST(ScenarioErrors, OutOfRangeValueAtItsLineAndColumn) {
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "workload:\n"
                       "  arrival:\n"
                       "    process: poisson\n"
                       "    rate: -3\n"),
            "scn.yaml:6:11: workload.arrival.rate must be > 0 requests/s (got -3)");
}

TEST(ScenarioErrors, SimCostScaleOnlyForTheSimAndPositive) {
  const Scenario s = load_yaml("backend: {kind: sim, sim_cost_scale: 0.9}\nstrategies: [{batching: continuous}]\n"
                               "workload: {rates: [1], n_requests: 4}\n");
  EXPECT_DOUBLE_EQ(s.backend.sim_cost_scale, 0.9);
  EXPECT_DOUBLE_EQ(backend_spec(s).sim_cost_scale, 0.9);
  EXPECT_EQ(only_error("backend: {kind: cpu, sim_cost_scale: 0.9}\nstrategies: [{batching: continuous}]\n"
                       "workload: {rates: [1], n_requests: 4}\n"),
            "scn.yaml:1:38: backend.sim_cost_scale applies to kind: sim, not cpu");
  EXPECT_EQ(only_error("backend: {kind: sim, sim_cost_scale: -1}\nstrategies: [{batching: continuous}]\n"
                       "workload: {rates: [1], n_requests: 4}\n"),
            "scn.yaml:1:38: backend.sim_cost_scale must be in (0, 1000] (got -1)");
}

TEST(ScenarioErrors, WrongType) {
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  n_requests: abc\n"),
            "scn.yaml:4:15: workload.n_requests must be an integer (got 'abc')");
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload: {rates: [1], prompt_tokens: 8, output_tokens: 8}\n"
                       "slo: {ttft_ms: [1, 2]}\n"),
            "scn.yaml:3:16: slo.ttft_ms must be a number (got a list)");
}

TEST(ScenarioErrors, BadEnumSuggestsTheClosest) {
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: continous\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:2:15: strategies[0].batching must be one of static, dynamic, continuous (got 'continous'); "
            "did you mean 'continuous'?");
}

TEST(ScenarioErrors, UnknownKeyWithDidYouMean) {
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  n_reqests: 5\n"),
            "scn.yaml:4:3: unknown key 'n_reqests' in workload (allowed: arrival, concurrency, trace, rates, "
            "n_requests, duration_s, warmup_requests, prompt_tokens, output_tokens, shared_prefix_tokens, "
            "prefix_groups, sessions, trace_speed, tokenizer, repeat, lora, structured_output, copied_spans); "
            "did you mean 'n_requests'?");
  const std::string far = only_error("strategies: [{batching: continuous}]\nworkload: {rates: [1]}\nfoo: 1\n");
  EXPECT_EQ(far.rfind("scn.yaml:3:1: unknown key 'foo' at the top level (allowed: name, ", 0), 0u) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

TEST(ScenarioErrors, DuplicateKey) {
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  rates: [2]\n"),
            "scn.yaml:4:3: duplicate key 'rates' in workload");
}

TEST(ScenarioErrors, EngineConfigValidateNamesTheStrategyField) {
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: static\n"
                       "    batch_size: 0\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:3:17: strategies[0].batch_size must be >= 1 (got 0)");
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "    kv: {kind: paged, block_size: 0}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:3:35: strategies[0].kv.block_size must be in [1, 4096] (got 0)");
}

TEST(ScenarioErrors, KnobOfAnotherPolicy) {
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: static\n"
                       "    max_num_seqs: 4\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:3:19: strategies[0].max_num_seqs is a knob of continuous batching, not static "
            "(its knobs: batch_size, max_wait_ms)");
  EXPECT_EQ(only_error("strategies:\n"
                       "  - {batching: continuous, kv: {kind: naive, block_size: 16}}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:2:58: strategies[0].kv.block_size applies to kind: paged, not naive (its keys: reserve)");
}

TEST(ScenarioErrors, QuantizationAndKvCacheDtypePerStrategy) {
  const std::string bad_q = only_error("strategies:\n"
                                       "  - batching: continuous\n"
                                       "    quantization: int8\n"
                                       "workload: {rates: [1]}\n");
  EXPECT_EQ(bad_q.rfind("scn.yaml:3:19: strategies[0].quantization", 0), 0u) << bad_q;
  EXPECT_NE(bad_q.find("int4_awq"), std::string::npos) << bad_q;
  const std::string bad_kv = only_error("strategies:\n"
                                        "  - {batching: continuous, kv_cache_dtype: fp16}\n"
                                        "workload: {rates: [1]}\n");
  EXPECT_EQ(bad_kv.rfind("scn.yaml:2:44: strategies[0].kv_cache_dtype", 0), 0u) << bad_kv;
  const std::string on_tp = only_error("backend: {kind: cuda, tensor_parallel: 2}\n"
                                       "strategies:\n"
                                       "  - {batching: continuous, quantization: fp8}\n"
                                       "workload: {rates: [1]}\n");
  EXPECT_NE(on_tp.find("strategies[0].quantization runs on backend cuda with tensor_parallel 1 only"), std::string::npos)
      << on_tp;
  const std::string on_f16 = only_error("backend: {kind: cuda, dtype: f16}\n"
                                        "strategies:\n"
                                        "  - {batching: continuous, quantization: int4_awq}\n"
                                        "workload: {rates: [1]}\n");
  EXPECT_NE(on_f16.find("strategies[0].quantization runs on backend cuda with dtype bf16 only"), std::string::npos)
      << on_f16;
  EXPECT_NO_THROW(load_yaml("backend: cuda\nstrategies:\n  - {batching: continuous, quantization: fp8}\n"
                            "workload: {rates: [1]}\n"));  // one GPU, bf16: the quantized Linears run there
  EXPECT_NO_THROW(load_yaml("backend: cuda\nstrategies:\n  - {batching: continuous, kv_cache_dtype: fp8}\n"
                            "workload: {rates: [1]}\n"));  // one GPU: the FP8 KV cache runs there
  const std::string kv_on_tp = only_error("backend: {kind: cuda, tensor_parallel: 2}\n"
                                          "strategies:\n"
                                          "  - {batching: continuous, kv_cache_dtype: fp8}\n"
                                          "workload: {rates: [1]}\n");
  EXPECT_NE(kv_on_tp.find("strategies[0].kv_cache_dtype fp8 runs on backend cuda with tensor_parallel 1 only"),
            std::string::npos)
      << kv_on_tp;
  const Scenario sc = load_yaml("strategies:\n"
                                "  - {batching: continuous}\n"
                                "  - {batching: continuous, quantization: int4_gptq, kv_cache_dtype: fp8}\n"
                                "workload: {rates: [1]}\n");
  EXPECT_FALSE(sc.strategies[0].quantization.has_value());
  EXPECT_EQ(sc.strategies[1].quantization, Quantization::int4_gptq);
  EXPECT_EQ(sc.strategies[1].kv_cache_dtype, KvCacheDType::fp8);
  EXPECT_EQ(sc.strategies[1].label, "continuous-paged-int4_gptq-kvfp8");  // distinct default labels
}

TEST(ScenarioErrors, SpeculativeNeedsContinuousBatchingAndABuiltMethod) {
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: static\n"
                       "    speculative: {num_speculative_tokens: 2}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:3:18: strategies[0].speculative needs batching: continuous (got static)");
  EXPECT_EQ(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: eagle}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:3:27: strategies[0].speculative.method must be one of ngram, self, draft_model (got 'eagle')");
  EXPECT_NE(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: draft_model}\n"
                       "workload: {rates: [1]}\n")
                .find("speculative.model must name a preset or a checkpoint folder"),
            std::string::npos);
  EXPECT_NE(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {num_speculative_tokens: 0}\n"
                       "workload: {rates: [1]}\n")
                .find("num_speculative_tokens must be in [1, 16]"),
            std::string::npos);
  const Scenario sc = load_yaml("strategies:\n"
                                "  - batching: continuous\n"
                                "    speculative: {num_speculative_tokens: 4, prompt_lookup_max: 5}\n"
                                "workload: {rates: [1]}\n");
  ASSERT_TRUE(sc.strategies.at(0).speculative.has_value());
  EXPECT_EQ(sc.strategies[0].speculative->num_speculative_tokens, 4);
  EXPECT_EQ(sc.strategies[0].speculative->prompt_lookup_max, 5);
}

TEST(ScenarioErrors, SpeculativeModelProposersNameTheirDraft) {
  // self and draft_model run a draft model on backend cpu or cuda (one GPU); the sim prices one.
  EXPECT_EQ(only_error("backend: {kind: sim}\n"
                       "strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: self, num_layers: 2}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:4:27: strategies[0].speculative.method: self on backend sim needs "
            "strategies[0].speculative.sim_acceptance ({per_position: [p1, p2, ...]} or {summary: FILE}): the sim "
            "runs no draft model, it accepts drafts at the rates given");
  EXPECT_NE(only_error("backend: {kind: cuda, tensor_parallel: 2}\n"
                       "strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: self, num_layers: 2}\n"
                       "workload: {rates: [1]}\n")
                .find("scn.yaml:4:27: strategies[0].speculative.method: self runs its draft model beside a one-GPU "
                      "target so far (got tensor_parallel 2"),
            std::string::npos);
  EXPECT_NE(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: self}\n"
                       "workload: {rates: [1]}\n")
                .find("scn.yaml:3:18: strategies[0].speculative: speculative.num_layers must be >= 1 for method self"),
            std::string::npos);
  EXPECT_NE(only_error("strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: ngram, num_layers: 2}\n"
                       "workload: {rates: [1]}\n")
                .find("num_layers is for method self (got method ngram)"),
            std::string::npos);
  // The tiny preset has 4 layers: self must skip at least one.
  EXPECT_EQ(only_error("model: {preset: tiny}\n"
                       "strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: self, num_layers: 4}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:4:45: strategies[0].speculative.num_layers must be below the target's 4 layers (got 4)");
  // A draft of another vocabulary (qwen2.5-0.5b's 151936 tokens against tiny's).
  EXPECT_NE(only_error("model: {preset: tiny}\n"
                       "strategies:\n"
                       "  - batching: continuous\n"
                       "    speculative: {method: draft_model, model: qwen2.5-0.5b}\n"
                       "workload: {rates: [1]}\n")
                .find("strategies[0].speculative.model names a draft (qwen2.5-0.5b) of 151936 tokens; it must share the "
                      "target's vocabulary of 2048"),
            std::string::npos);
  const Scenario sc = load_yaml("strategies:\n"
                                "  - batching: continuous\n"
                                "    speculative: {method: self, num_layers: 1, num_speculative_tokens: 5, adaptive: false}\n"
                                "workload: {rates: [1]}\n");
  ASSERT_TRUE(sc.strategies.at(0).speculative.has_value());
  EXPECT_EQ(sc.strategies[0].speculative->method, SpecMethod::self);
  EXPECT_EQ(sc.strategies[0].speculative->num_layers, 1);
  EXPECT_FALSE(sc.strategies[0].speculative->adaptive);
}

TEST(ScenarioErrors, MissingRequiredField) {
  EXPECT_EQ(only_error("strategies:\n"
                       "  - kv: {kind: paged}\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:2:5: strategies[0].batching is required (static, dynamic or continuous)");
  EXPECT_EQ(only_error("workload: {rates: [1]}\n").find("missing strategies:"), std::string("scn.yaml:1:1: ").size());
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\nworkload: {n_requests: 5}\n"),
            "scn.yaml:2:11: workload.rates is required for open-loop arrivals: a list [1, 2, 4], a range "
            "{from: 1, to: 8, steps: 4}, or arrival.rate: R");
}

TEST(ScenarioErrors, ConflictingKeys) {
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  arrival: {process: poisson}\n"
                       "  concurrency: 4\n"
                       "  n_requests: 5\n"),
            "scn.yaml:4:16: workload: give one of arrival, concurrency or trace (got arrival and concurrency)");
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload: {arrival: {process: poisson, cv: 2}, rates: [1]}\n"),
            "scn.yaml:2:44: workload.arrival.cv applies to process: gamma, not poisson (its gaps have CV 1)");
  EXPECT_EQ(only_error("strategies: [{batching: continuous}, {batching: continuous}]\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:1:38: strategies[1] has the label 'continuous-paged' of strategies[0]; give each strategy a "
            "distinct label:");
}

TEST(ScenarioErrors, LengthDistributions) {
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  prompt_tokens: {dist: normal, mean: 100}\n"),
            "scn.yaml:4:18: workload.prompt_tokens with dist: normal needs std:");
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  output_tokens: {dist: uniform, min: 50, max: 10}\n"),
            "scn.yaml:4:48: workload.output_tokens.max must be >= min (50) (got 10)");
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  output_tokens: {dist: fixed, value: 8, min: 2}\n"),
            "scn.yaml:4:42: unknown key 'min' in workload.output_tokens (allowed: dist, value)");
  EXPECT_EQ(only_error("engine: {swap_space: -1}\n"
                       "strategies: [{batching: continuous, preemption: swap}]\n"
                       "workload: {rates: [1]}\n"),
            "scn.yaml:1:22: engine.swap_space must be in [0, 1024] GiB (got -1)");
  // The smallest request cannot fit.
  EXPECT_EQ(only_error("engine: {max_model_len: 64}\n"
                       "strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  shared_prefix_tokens: 40\n"
                       "  output_tokens: 30\n"),
            "scn.yaml:6:18: workload: shared_prefix_tokens (40) + 1 prompt token + the smallest output_tokens (30) = "
            "71 exceeds engine.max_model_len (64)");
}

TEST(ScenarioErrors, GatesReferToRealMetricsStrategiesAndRates) {
  const auto errs = scenario_errors(
      "strategies: [{batching: continuous}]\n"
      "workload: {rates: [1, 2]}\n"
      "gates:\n"
      "  - {metric: goodpt, min: 1}\n"
      "  - {metric: goodput, strategy: nope, min: 1}\n"
      "  - {metric: goodput, rate: 3, min: 1}\n"
      "  - {metric: goodput}\n");
  ASSERT_EQ(errs.size(), 4u);
  EXPECT_EQ(errs[0].rfind("scn.yaml:4:14: gates[0].metric must be a summary metric", 0), 0u) << errs[0];
  EXPECT_NE(errs[0].find("did you mean 'goodput'?"), std::string::npos);
  EXPECT_EQ(errs[1], "scn.yaml:5:33: gates[1].strategy must be one of the strategy labels: continuous-paged (got 'nope')");
  EXPECT_EQ(errs[2], "scn.yaml:6:29: gates[2].rate must be one of the sweep's rates: 1, 2 (got 3)");
  EXPECT_EQ(errs[3], "scn.yaml:7:5: gates[3] needs min: or max: (or both)");
}

TEST(ScenarioErrors, MissingFiles) {
  EXPECT_EQ(only_error("strategies: [{batching: continuous}]\n"
                       "workload:\n"
                       "  rates: [1]\n"
                       "  prompt_tokens: {dataset: no_such_file.json}\n")
                .find("scn.yaml:4:28: workload.prompt_tokens.dataset names no readable file: "),
            0u);
  EXPECT_NE(only_error("strategies: [{batching: continuous}]\nworkload: {trace: nothere.jsonl}\n").find("workload.trace names no readable file"),
            std::string::npos);
}

TEST(ScenarioErrors, SyntaxErrorAndEmptyFile) {
  const std::string e = only_error("strategies: [{batching: continuous}\nworkload: {rates: [1]}\n");
  EXPECT_EQ(e.rfind("scn.yaml:", 0), 0u);
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
  EXPECT_EQ(only_error(""), "scn.yaml: empty scenario: expected a map with at least strategies: and workload:");
}

TEST(ScenarioErrors, ManyErrorsAreAllReportedInFileOrder) {
  const auto errs = scenario_errors(
      "model: {preset: tinny}\n"
      "strategies:\n"
      "  - batching: static\n"
      "    batch_size: -1\n"
      "workload:\n"
      "  rates: [1, -2]\n"
      "  warmup_requests: -1\n"
      "slo: {attainment: 1.5}\n");
  ASSERT_EQ(errs.size(), 5u);
  EXPECT_EQ(errs[0].rfind("scn.yaml:1:17: model.preset must be one of tiny,", 0), 0u) << errs[0];
  EXPECT_NE(errs[0].find("did you mean 'tiny'?"), std::string::npos);
  EXPECT_EQ(errs[1], "scn.yaml:4:17: strategies[0].batch_size must be >= 1 (got -1)");
  EXPECT_EQ(errs[2], "scn.yaml:6:14: workload.rates[1] must be > 0 requests/s (got -2)");
  EXPECT_EQ(errs[3], "scn.yaml:7:20: workload.warmup_requests must be >= 0 (got -1)");
  EXPECT_EQ(errs[4], "scn.yaml:8:19: slo.attainment must be in (0, 1] (got 1.5)");
  // what() joins them all.
  try {
    load_yaml("model: {preset: tinny}\nstrategies: [{batching: static, batch_size: -1}]\nworkload: {rates: [1]}\n");
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.messages.size(), 2u);
    EXPECT_NE(std::string(e.what()).find('\n'), std::string::npos);
  }
}

TEST(ScenarioRates, ListRangeAndStepExpand) {
  auto rates = [](const std::string& spec) {
    return load_yaml("strategies: [{batching: continuous}]\nworkload: {rates: " + spec + "}\n").workload.rates;
  };
  EXPECT_EQ(rates("[0.5, 1, 8]"), (std::vector<double>{0.5, 1, 8}));
  EXPECT_EQ(rates("3"), (std::vector<double>{3}));
  EXPECT_EQ(rates("{from: 1, to: 4, steps: 4}"), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(rates("{from: 2, to: 3, steps: 3}"), (std::vector<double>{2, 2.5, 3}));
  EXPECT_EQ(rates("{from: 5, to: 9, steps: 1}"), (std::vector<double>{5}));
  EXPECT_EQ(rates("{from: 0.1, to: 0.3, step: 0.1}"), (std::vector<double>{0.1, 0.2, 0.3}));
  EXPECT_EQ(rates("{from: 1, to: 2.9, step: 0.5}"), (std::vector<double>{1, 1.5, 2, 2.5}));
  EXPECT_EQ(load_yaml("strategies: [{batching: continuous}]\nworkload: {arrival: {rate: 7}}\n").workload.rates,
            (std::vector<double>{7}));
  const auto bad = [](const std::string& spec) {
    const auto e = scenario_errors("strategies: [{batching: continuous}]\nworkload: {rates: " + spec + "}\n");
    std::string all;
    for (const auto& m : e) all += m + "\n";
    return all;
  };
  EXPECT_NE(bad("{from: 4, to: 1, steps: 3}").find("workload.rates.to must be >= from (4) (got 1)"), std::string::npos);
  EXPECT_NE(bad("{from: 1, to: 4, steps: 3, step: 1}").find("exactly one of steps"), std::string::npos);
  EXPECT_NE(bad("{from: 1, to: 4, steps: 0}").find("workload.rates.steps must be in [1, 1000] (got 0)"), std::string::npos);
  EXPECT_NE(bad("{from: 1, to: 4, stps: 3}").find("did you mean 'steps'?"), std::string::npos);
}

TEST(ScenarioRates, DuplicateRatesAreRejectedAtTheirPlace) {
  const std::string head = "strategies: [{batching: continuous}]\nworkload:\n  rates: ";
  EXPECT_EQ(only_error(head + "[4, 8, 4]\n"),
            "scn.yaml:3:17: workload.rates[2] repeats workload.rates[0] (4): each rate is one sweep point; list it "
            "once, or use fewer steps for a range");
  // Equal up to 1e-9 (as gates and compare match rates): still one point.
  EXPECT_NE(only_error(head + "[1, 1.0000000001]\n").find("scn.yaml:3:14: workload.rates[1] repeats workload.rates[0] (1 ≈ 1.0000000001)"),
            std::string::npos);
  // A range whose points round together, reported at the range.
  EXPECT_EQ(only_error(head + "{from: 1, to: 1.0000000000001, steps: 3}\n").rfind("scn.yaml:3:10: workload.rates[1] repeats", 0), 0u);
  // An override too; .inf only equals .inf.
  EXPECT_EQ(scenario_errors(kBaseScenario, {"workload.rates=[2, .inf, .inf]"}),
            (std::vector<std::string>{"--set workload.rates=[2, .inf, .inf]: workload.rates[2] repeats workload.rates[1] (inf): "
                                      "each rate is one sweep point; list it once, or use fewer steps for a range"}));
  EXPECT_TRUE(scenario_errors(kBaseScenario, {"workload.rates=[1, 1.001, .inf]"}).empty());
}

TEST(Scenario, ClosedLoopAndTraceHaveOneSweepPoint) {
  const Scenario c = load_yaml("strategies: [{batching: continuous}]\nworkload: {concurrency: 4, n_requests: 8}\n");
  EXPECT_EQ(c.workload.mode, LoadMode::closed_loop);
  EXPECT_EQ(c.sweep_rates(), (std::vector<double>{0.0}));
  const auto errs = scenario_errors("strategies: [{batching: continuous}]\nworkload: {concurrency: 4, rates: [1]}\n");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0],
            "scn.yaml:2:35: workload.rates is for open-loop arrivals; with concurrency the users set the load");
}

TEST(Scenario, RelativeFilesResolveBesideTheScenario) {
  write_temp("lens.jsonl", "{\"prompt_tokens\": 5, \"output_tokens\": 6}\n");
  const Scenario s = load_yaml("strategies: [{batching: continuous}]\n"
                               "workload: {rates: [1], prompt_tokens: {dataset: lens.jsonl}, output_tokens: {dataset: lens.jsonl}}\n");
  EXPECT_TRUE(std::filesystem::exists(s.workload.prompt.dataset)) << s.workload.prompt.dataset;
  EXPECT_EQ(s.workload.prompt.dataset_format, DatasetFormat::jsonl);  // from the extension
}

// The example at the end of scenarios/README.md is a valid scenario.
TEST(Scenario, ReadmeExampleValidates) {
  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/scenarios/README.md");
  ASSERT_TRUE(in) << "scenarios/README.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t begin = doc.rfind("```yaml\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  const Scenario s = load_yaml(doc.substr(begin + 8, end - begin - 8));
  EXPECT_EQ(s.name, "quick");
  EXPECT_EQ(s.strategies.size(), 2u);
}

TEST(Scenario, DidYouMean) {
  EXPECT_EQ(did_you_mean("arival", {"arrival", "rates"}), "arrival");
  EXPECT_EQ(did_you_mean("max_batch", {"max_batch_size", "batch_size"}), "max_batch_size");
  EXPECT_EQ(did_you_mean("zzz", {"arrival", "rates"}), "");
}

// The CLI's exit codes: 0 ok, 2 invalid scenario. Runs the servelab binary when it has been built.
TEST(ValidateCommand, ExitCodesAndMessages) {
  const std::string bin = std::string(SERVELAB_BINARY_DIR) + "/servelab";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "servelab binary not built";
  const std::string good = write_temp("good.yaml", kBaseScenario);
  const std::string bad = write_temp("bad.yaml", "strategies: [{batching: continuous}]\nworkload: {rates: [-1]}\n");
  const std::string out = write_temp("out.txt", "");
  auto run = [&](const std::string& args) {
    const int rc = std::system((bin + " " + args + " > " + out + " 2>&1").c_str());
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    return std::pair{WEXITSTATUS(rc), text.str()};
  };
  auto [rc_ok, text_ok] = run("validate " + good);
  EXPECT_EQ(rc_ok, 0) << text_ok;
  EXPECT_NE(text_ok.find(": ok (1 strategy × 2 rates"), std::string::npos) << text_ok;
  auto [rc_bad, text_bad] = run("validate " + bad);
  EXPECT_EQ(rc_bad, 2) << text_bad;
  EXPECT_NE(text_bad.find("bad.yaml:2:20: workload.rates[0] must be > 0 requests/s (got -1)"), std::string::npos) << text_bad;
  auto [rc_set, text_set] = run("validate --set workload.rates=[3] " + bad);
  EXPECT_EQ(rc_set, 0) << text_set;
  auto [rc_path, text_path] = run("validate " + good + " --set strategies.3.kv.kind=naive");
  EXPECT_EQ(rc_path, 2) << text_path;
  EXPECT_NE(text_path.find("--set strategies.3.kv.kind=naive: strategies has 1 entry (index 3 is out of range)"),
            std::string::npos)
      << text_path;
}

}  // namespace
}  // namespace servelab
