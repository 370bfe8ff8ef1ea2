// grammar_bench: the structured-output engine on a real tokenizer (Qwen3's, 151k tokens) over the
// generated schema corpus, on one CPU thread: compile times (cold: in corpus order, the
// tokenizer's shared cache filling as it goes; warm: the same schemas again), per-token mask
// times while generating under the mask (random allowed tokens; a quarter of the picks among eos
// and the tokens that only close things, so strings and containers end, a quarter among the
// one-byte tokens, so literal characters such as '@' turn up; past a quarter of --max-tokens, nine in
// ten close things), and the
// share of outputs valid against their schema
// (the independent validator of tests/grammar). Prints a table; --json PATH writes the figures.
//   build/grammar_bench --schemas 1000 --outputs 10 --json results/grammar/grammar-bench.json
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/model/tokenizer.h"
#include "tests/grammar/grammar_test_util.h"
#include "analysis/json_schema_check.h"
#include "engine/grammar/schema_corpus.h"

namespace {

using namespace servelab;
using namespace servelab::grammar;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// This thread's CPU time (ms): unlike wall time, it does not grow when other processes share the
// cores, so compile figures from a loaded machine stay comparable.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Summary {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  size_t n = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<size_t>(static_cast<double>(v.size()) * 0.99))];
  s.max = v.back();
  return s;
}

nlohmann::json to_json(const Summary& s) { return {{"n", s.n}, {"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}, {"max", s.max}}; }

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_dir = testing::qwen_dir(), json_path;
  int n_schemas = 1000, n_outputs = 10, max_tokens = 2000;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokenizer") tokenizer_dir = next();
    else if (a == "--schemas") n_schemas = std::stoi(next());
    else if (a == "--outputs") n_outputs = std::stoi(next());
    else if (a == "--max-tokens") max_tokens = std::stoi(next());
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--json") json_path = next();
    else {
      std::fprintf(stderr, "usage: grammar_bench [--tokenizer DIR] [--schemas N] [--outputs N] [--max-tokens N] [--seed S] [--json PATH]\n");
      return 2;
    }
  }
  auto t0 = Clock::now();
  std::unique_ptr<Tokenizer> tok = load_tokenizer_from_dir(tokenizer_dir);
  if (!tok) {
    std::fprintf(stderr, "no tokenizer.json in %s (bash scripts/install-deps.sh installs Qwen3's)\n", tokenizer_dir.c_str());
    return 1;
  }
  const double load_ms = ms_since(t0);
  t0 = Clock::now();
  auto table = TokenTable::build(*tok);
  const double table_ms = ms_since(t0);
  std::printf("tokenizer %s: %d tokens, loaded in %.0f ms; token table (trie of %zu nodes) in %.0f ms\n", tok->name().c_str(),
              table->n_vocab(), load_ms, table->n_nodes(), table_ms);

  const auto corpus = make_schema_corpus(n_schemas, seed);
  std::vector<std::shared_ptr<const CompiledGrammar>> compiled(corpus.size());
  std::vector<double> compile_cold, compile_warm, front_ms, cpu_cold, cpu_warm;
  int n_refused = 0;
  size_t n_walked = 0, n_hits = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    try {
      t0 = Clock::now();
      const double c0 = thread_cpu_ms();
      const Grammar g = grammar_from_json_schema(corpus[i]);
      front_ms.push_back(ms_since(t0));
      compiled[i] = CompiledGrammar::compile(g, table);
      compile_cold.push_back(ms_since(t0));
      cpu_cold.push_back(thread_cpu_ms() - c0);
      n_walked += static_cast<size_t>(compiled[i]->stats().n_walked);
      n_hits += static_cast<size_t>(compiled[i]->stats().n_shared_hits);
    } catch (const GrammarError& e) {
      if (++n_refused <= 5) std::printf("refused schema %zu: %s\n", i, e.what());
    }
  }
  for (size_t i = 0; i < corpus.size(); ++i) {
    if (!compiled[i]) continue;
    t0 = Clock::now();
    const double c0 = thread_cpu_ms();
    const auto again = CompiledGrammar::compile(grammar_from_json_schema(corpus[i]), table);
    compile_warm.push_back(ms_since(t0));
    cpu_warm.push_back(thread_cpu_ms() - c0);
  }

  std::mt19937_64 rng(seed);
  std::vector<double> mask_us;
  mask_us.reserve(static_cast<size_t>(n_schemas) * static_cast<size_t>(n_outputs) * 100);
  int n_total = 0, n_valid = 0, n_unfinished = 0, n_invalid = 0;
  size_t n_tokens = 0, n_bytes = 0;
  t0 = Clock::now();
  for (size_t i = 0; i < corpus.size(); ++i) {
    if (!compiled[i]) continue;
    for (int k = 0; k < n_outputs; ++k) {
      GrammarMatcher m(compiled[i]);
      bool finished = false;
      const size_t before = mask_us.size();
      const std::string out = testing::generate(m, rng, max_tokens, &finished, &mask_us);
      n_tokens += mask_us.size() - before;
      n_bytes += out.size();
      ++n_total;
      if (!finished) {
        if (++n_unfinished <= 3) std::printf("unfinished after %d tokens (schema %zu): %.200s...\n", max_tokens, i, out.c_str());
        continue;
      }
      const std::string why = analysis::validate_json_text(out, corpus[i]);
      if (why.empty()) {
        ++n_valid;
      } else if (++n_invalid <= 5) {
        std::printf("INVALID (schema %zu): %s\n  schema: %s\n  output: %.300s\n", i, why.c_str(), corpus[i].dump().c_str(), out.c_str());
      }
    }
  }
  const double gen_s = ms_since(t0) / 1000;

  const Summary cold = summarize(compile_cold), warm = summarize(compile_warm), front = summarize(front_ms), mask = summarize(mask_us);
  const Summary cold_cpu = summarize(cpu_cold), warm_cpu = summarize(cpu_warm);
  std::printf("\n%-34s %10s %10s %10s %10s\n", "", "mean", "p50", "p99", "max");
  std::printf("%-34s %10.3f %10.3f %10.3f %10.3f\n", "compile, cold cache (ms)", cold.mean, cold.p50, cold.p99, cold.max);
  std::printf("%-34s %10.3f %10.3f %10.3f %10.3f\n", "compile, warm cache (ms)", warm.mean, warm.p50, warm.p99, warm.max);
  std::printf("%-34s %10.3f %10.3f %10.3f %10.3f\n", "compile, cold cache, CPU time (ms)", cold_cpu.mean, cold_cpu.p50, cold_cpu.p99, cold_cpu.max);
  std::printf("%-34s %10.3f %10.3f %10.3f %10.3f\n", "compile, warm cache, CPU time (ms)", warm_cpu.mean, warm_cpu.p50, warm_cpu.p99, warm_cpu.max);
  std::printf("%-34s %10.3f %10.3f %10.3f %10.3f\n", "  of which schema -> grammar (ms)", front.mean, front.p50, front.p99, front.max);
  std::printf("%-34s %10.2f %10.2f %10.2f %10.1f\n", "mask per token (us)", mask.mean, mask.p50, mask.p99, mask.max);
  std::printf("\nschemas %zu compiled, %d refused; states walked %zu, from the shared cache %zu\n", compile_cold.size(), n_refused,
              n_walked, n_hits);
  std::printf("outputs %d: valid %d (%.2f%%), invalid %d, unfinished %d; %zu tokens, %zu bytes, %.1f s generating\n", n_total,
              n_valid, n_total ? 100.0 * n_valid / n_total : 0.0, n_invalid, n_unfinished, n_tokens, n_bytes, gen_s);

  if (!json_path.empty()) {
    const nlohmann::json j = {
        {"tokenizer", tok->name()},
        {"vocab", table->n_vocab()},
        {"schemas", corpus.size()},
        {"refused", n_refused},
        {"outputs_per_schema", n_outputs},
        {"max_tokens", max_tokens},
        {"seed", seed},
        {"token_table_ms", table_ms},
        {"compile_cold_ms", to_json(cold)},
        {"compile_warm_ms", to_json(warm)},
        {"compile_cold_cpu_ms", to_json(cold_cpu)},
        {"compile_warm_cpu_ms", to_json(warm_cpu)},
        {"schema_to_grammar_ms", to_json(front)},
        {"mask_us", to_json(mask)},
        {"outputs", n_total},
        {"valid", n_valid},
        {"invalid", n_invalid},
        {"unfinished", n_unfinished},
        {"valid_rate", n_total ? static_cast<double>(n_valid) / n_total : 0.0},
        {"tokens", n_tokens},
        {"states_walked", n_walked},
        {"states_from_shared_cache", n_hits}};
    std::ofstream(json_path) << j.dump(2) << "\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  return n_invalid == 0 && n_refused == 0 ? 0 : 1;
}
