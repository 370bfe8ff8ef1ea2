// servelab bench --url URL: an ad-hoc load against any OpenAI-compatible server, with the same
// records and reports as `servelab run` (it builds a scenario with `target:` and runs it). The
// flags vLLM `bench serve` users type are accepted beside ours (cli/bench_scenario.h).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/summary.h"
#include "cli/bench_scenario.h"
#include "cli/command.h"
#include "cli/run_scenario.h"
#include "loadgen/records/record.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

/// vLLM's --save-result file of each run: RESULT_DIR/NAME (one run) or NAME-<label>.json.
void write_vllm_results(const BenchArgs& a, const std::string& dir) {
  namespace fs = std::filesystem;
  const analysis::Summary summary = analysis::read_summary_or_dir(dir);
  const std::vector<RequestRecord> records = read_records(dir + "/records.jsonl");
  std::vector<double> percentiles = {99};
  if (!a.metric_percentiles.empty()) {
    percentiles.clear();
    std::stringstream in(a.metric_percentiles);
    for (std::string q; std::getline(in, q, ',');) percentiles.push_back(std::stod(q));
  }
  std::vector<std::string> metrics = {"ttft", "tpot", "itl"};
  if (!a.percentile_metrics.empty()) {
    metrics.clear();
    std::stringstream in(a.percentile_metrics);
    for (std::string m; std::getline(in, m, ',');) metrics.push_back(m);
  }
  const std::string out_dir = a.result_dir.empty() ? dir : a.result_dir;
  fs::create_directories(out_dir);
  for (const auto& run : summary.runs) {
    const double rate = run.info.mode == analysis::RunMode::max ? INFINITY : run.info.rate;
    std::string name = a.result_filename;
    if (name.empty()) {  // vLLM's default: {backend}-{rate}qps[-concurrency{c}]-{model}-{date}.json
      std::ostringstream n;
      n << "servelab-" << (std::isnan(rate) ? std::string("closed") : std::isinf(rate) ? std::string("inf") : ([&] {
                             std::ostringstream r;
                             r << rate;
                             return r.str();
                           })())
        << "qps";
      if (a.max_concurrency > 0) n << "-concurrency" << a.max_concurrency;
      std::string model = a.model.empty() ? "model" : a.model.substr(a.model.rfind('/') + 1);
      n << "-" << model << "-" << timestamp_now();
      if (summary.runs.size() > 1) n << "-" << run.info.label;
      name = n.str() + ".json";
    } else if (summary.runs.size() > 1) {
      name = fs::path(name).stem().string() + "-" + run.info.label + ".json";
    }
    const std::string path = (fs::path(out_dir) / name).string();
    std::ofstream(path) << vllm_result_json(run.info.label, records, a, rate, percentiles, metrics).dump(2) << "\n";
    if (!a.quiet) std::cout << "vLLM result: " << path << "\n";
  }
}

int bench_main(const BenchArgs& a) {
  Scenario scenario;
  try {
    scenario = bench_scenario(a);
  } catch (const ScenarioError& e) {
    for (const auto& m : e.messages) std::cerr << "servelab bench: error: " << m << "\n";
    return 2;
  }
  const std::string dir = a.out.empty() ? scenario.output_dir : a.out;
  std::filesystem::remove(dir + "/replicas.jsonl");  // this run's shares only
  const int rc = run_scenario(scenario, a.out, a.quiet, a.no_plots, a.force);
  if (a.urls.size() > 1) {  // each replica's share of each run
    std::ifstream in(dir + "/replicas.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      std::cout << "replicas of " << j.value("run", "?") << ":\n";
      for (const auto& r : j["replicas"])
        std::printf("  %-32s %6d sent (%5.1f%%), %6d ok, %6d failed\n", r["url"].get<std::string>().c_str(),
                    r["n_sent"].get<int>(), 100.0 * r["share"].get<double>(), r["n_ok"].get<int>(),
                    r["n_failed"].get<int>());
    }
  }
  if ((a.save_result || a.result_format == "vllm") && std::filesystem::exists(dir + "/summary.json")) write_vllm_results(a, dir);
  return rc;
}

const Registrar register_bench(
    "bench", "Load-test an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, servelab serve) over HTTP",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<BenchArgs>();
      add_bench_flags(sub, *a);
      sub.footer(
          "Examples:\n"
          "  servelab bench --url http://127.0.0.1:8000 --rate 4 --rate 8 --n 200\n"
          "  servelab bench --url http://gpu1:8000 --url http://gpu2:8000 --balance least_outstanding --rate 20\n"
          "  servelab bench --url http://127.0.0.1:8080 --api chat --model qwen3 --dataset sharegpt.json --concurrency 32\n"
          "  servelab bench --base-url http://127.0.0.1:8000 --endpoint /v1/completions --model Qwen/Qwen3-0.6B \\\n"
          "      --dataset-name random --random-input-len 512 --random-output-len 128 --request-rate inf \\\n"
          "      --num-prompts 200 --max-concurrency 32 --save-result          # as vllm bench serve\n"
          "Before the load, one request checks the endpoint: a server that does not answer stops the run\n"
          "with its answer (exit 2, no folder written). Records, summary.json and reports are written as\n"
          "by `servelab run`; with several URLs, replicas.jsonl holds each replica's share.\n"
          "Exit codes: 0 ok, 1 a run's failed share passed --max-error-rate (or every request failed)\n"
          "or a gate failed, 2 bad flags or the pre-flight failed, 130 interrupted.");
      sub.callback([a] {
        if (a->urls.empty()) throw CLI::RequiredError("--url (or --base-url)");
      });
      return [a] { return bench_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
