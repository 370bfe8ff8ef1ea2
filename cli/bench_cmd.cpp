// servelab bench --url URL: an ad-hoc load against any OpenAI-compatible server, with the same
// records and reports as `servelab run` (it builds a scenario with `target:` and runs it).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/run_scenario.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

struct BenchArgs {
  std::vector<std::string> urls;
  std::string model;
  std::string api = "completions";
  std::vector<std::string> headers;
  std::string tokenizer;
  double timeout_s = 600;
  std::string balance = "round_robin";
  std::vector<double> rates = {10};
  int n = 100;
  double duration_s = 0;
  int concurrency = 0;
  std::string arrival = "poisson";
  int prompt_tokens = 128;
  int output_tokens = 64;
  std::string dataset;
  int warmup = 0;
  uint64_t seed = 0;
  int max_model_len = 0;
  std::string name = "bench";
  std::string out;
  bool force = false;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool no_plots = false;
};

int bench_main(const BenchArgs& a) {
  nlohmann::ordered_json s;
  s["name"] = a.name;
  s["seed"] = a.seed;
  nlohmann::ordered_json t;
  if (a.urls.size() == 1) t["url"] = a.urls[0];
  else t["urls"] = a.urls;
  if (!a.model.empty()) t["model"] = a.model;
  t["api"] = a.api;
  t["timeout_s"] = a.timeout_s;
  t["balance"] = a.balance;
  if (!a.tokenizer.empty()) t["tokenizer"] = a.tokenizer;
  for (const auto& h : a.headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0) {
      std::cerr << "servelab bench: --header must be 'Name: value' (got '" << h << "')\n";
      return 2;
    }
    std::string v = h.substr(colon + 1);
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    t["headers"][h.substr(0, colon)] = v;
  }
  if (a.max_model_len > 0) s["engine"]["max_model_len"] = a.max_model_len;
  nlohmann::ordered_json w;
  if (a.concurrency > 0) {
    w["concurrency"] = a.concurrency;
  } else {
    w["arrival"] = {{"process", a.arrival}};
    w["rates"] = a.rates;
  }
  if (a.duration_s > 0) w["duration_s"] = a.duration_s;
  else w["n_requests"] = a.n;
  if (a.warmup > 0) w["warmup_requests"] = a.warmup;
  if (!a.dataset.empty()) {
    w["prompt_tokens"] = {{"dataset", a.dataset}};
    w["output_tokens"] = {{"dataset", a.dataset}};
  } else {
    w["prompt_tokens"] = a.prompt_tokens;
    w["output_tokens"] = a.output_tokens;
  }
  s["workload"] = w;
  s["target"] = t;  // after workload: the hook adds the "http" strategy
  Scenario scenario;
  try {
    scenario = load_scenario_text(s.dump(2), "bench", a.overrides);
  } catch (const ScenarioError& e) {
    for (const auto& m : e.messages) std::cerr << m << "\n";
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
  return rc;
}

const Registrar reg(
    "bench", "Load-test an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, servelab serve) over HTTP",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<BenchArgs>();
      sub.add_option("--url", a->urls, "Server URL, http://HOST:PORT (repeat for replicas)")->required();
      sub.add_option("--model", a->model, "Model name to send (default: left out, the server's only model)");
      sub.add_option("--api", a->api, "completions | chat");
      sub.add_option("--header", a->headers, "Extra header 'Name: value' (repeatable), e.g. 'Authorization: Bearer KEY'");
      sub.add_option("--tokenizer", a->tokenizer, "Model folder whose tokenizer turns planned prompts into text");
      sub.add_option("--timeout", a->timeout_s, "Per-request timeout in seconds (default 600)");
      sub.add_option("--balance", a->balance, "round_robin | least_outstanding (several --url)");
      sub.add_option("--rate", a->rates, "Requests/s (repeat for a sweep; default 10)");
      sub.add_option("--n", a->n, "Requests per rate (default 100)");
      sub.add_option("--duration", a->duration_s, "Seconds of arrivals per rate (instead of --n)");
      sub.add_option("--concurrency", a->concurrency, "Closed loop with N users instead of a rate");
      sub.add_option("--arrival", a->arrival, "poisson | constant | gamma (default poisson)");
      sub.add_option("--prompt-tokens", a->prompt_tokens, "Prompt length (default 128)");
      sub.add_option("--output-tokens", a->output_tokens, "Output length, sent as max_tokens with ignore_eos (default 64)");
      sub.add_option("--dataset", a->dataset, "ShareGPT JSON or JSONL file for prompt and output lengths");
      sub.add_option("--warmup", a->warmup, "Warm-up requests left out of the metrics");
      sub.add_option("--seed", a->seed, "Seed of the plan");
      sub.add_option("--max-model-len", a->max_model_len, "Clip prompt + output to this (default 2048)");
      sub.add_option("--name", a->name, "Run name (output folder results/runs/NAME)");
      sub.add_option("--out,-o", a->out, "Output folder");
      sub.add_flag("--force", a->force, "Overwrite the output folder when it already holds files");
      sub.add_option("--set", a->overrides, "Override a scenario value: key.path=value (repeatable)");
      sub.add_flag("--quiet,-q", a->quiet, "No progress line and no console summary");
      sub.add_flag("--no-plots", a->no_plots, "Skip gnuplot figures");
      sub.footer(
          "Examples:\n"
          "  servelab bench --url http://127.0.0.1:8000 --rate 4 --rate 8 --n 200\n"
          "  servelab bench --url http://gpu1:8000 --url http://gpu2:8000 --balance least_outstanding --rate 20\n"
          "  servelab bench --url http://127.0.0.1:8080 --api chat --model qwen3 --dataset sharegpt.json --concurrency 32\n"
          "Records, summary.json and reports are written as by `servelab run`; with several URLs,\n"
          "replicas.jsonl holds each replica's share. Exit codes as `servelab run`.");
      return [a] { return bench_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
