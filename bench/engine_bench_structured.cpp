// engine_bench --structured: structured output on the cuda backend against the same engine
// unconstrained (see engine_bench_structured.h for the figures). One backend (random bf16 weights
// of the preset drawn on the GPU) serves every run through a borrowing wrapper; each run is a
// fresh Engine (its own arena: init_kv drops the graphs, and the first decode steps, which
// capture them, are left out of the timed steps).
#include "bench/engine_bench_structured.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/grammar/grammar_constraint.h"
#include "engine/grammar/request_constraint.h"
#include "engine/grammar/schema_corpus.h"
#include "engine/model/config.h"
#include "engine/model/tokenizer.h"
#include "engine/splitmix64.h"

namespace servelab::bench {
namespace structured_bench {  // named: engine_bench.cpp has helpers of its own

/// The engine's backend for one run, borrowed (every run shares the one with the weights).
class Borrowed final : public Backend {
 public:
  explicit Borrowed(Backend& b) : b_(b) {}
  std::string name() const override { return b_.name(); }
  const ModelConfig& config() const override { return b_.config(); }
  BackendCaps caps() const override { return b_.caps(); }
  std::string device_description() const override { return b_.device_description(); }
  KvCacheSpec kv_cache_spec() const override { return b_.kv_cache_spec(); }
  void init_kv(int64_t n_slots) override { b_.init_kv(n_slots); }
  void reserve_steps(const StepLimits& limits) override { b_.reserve_steps(limits); }
  std::vector<int> decode_row_buckets() const override { return b_.decode_row_buckets(); }
  StepOutput execute(const Step& step) override { return b_.execute(step); }
  void copy_slots(std::span<const KvCopy> copies) override { b_.copy_slots(copies); }
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override { return b_.make_host_pool(n_slots); }
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override { b_.swap_out(runs, pool); }
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override { b_.swap_in(runs, pool); }

 private:
  Backend& b_;
};

enum class Mode { unconstrained, before, overlapped, jump_forward };
constexpr Mode kModes[] = {Mode::unconstrained, Mode::before, Mode::overlapped, Mode::jump_forward};

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::unconstrained: return "unconstrained";
    case Mode::before: return "masks before the step";
    case Mode::overlapped: return "masks overlapped";
    case Mode::jump_forward: return "overlapped + jump-forward";
  }
  return "?";
}

const char* mode_key(Mode m) {
  switch (m) {
    case Mode::unconstrained: return "unconstrained";
    case Mode::before: return "before";
    case Mode::overlapped: return "overlapped";
    case Mode::jump_forward: return "jump_forward";
  }
  return "?";
}

struct RunStats {
  double decode_tok_s = 0;    // tokens / seconds over the timed full-batch decode steps
  double decode_step_ms = 0;  // their mean step
  double run_tok_s = 0;       // every output token / every step's seconds
  int steps = 0, decode_steps = 0, jumped = 0;
  std::vector<double> mask_ms;  // per timed decode step
  int complete = 0;             // constrained outputs whose JSON was finished
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

RunStats run_once(Backend& backend, Mode mode, const StructuredBenchOptions& o, grammar::ConstraintCompiler& compiler,
                  const std::vector<grammar::ConstraintSpec>& specs) {
  EngineConfig c;
  c.sched.kind = BatchingKind::continuous;
  c.sched.max_num_seqs = o.batch;
  c.sched.max_num_batched_tokens = 8192;
  c.sched.chunked_prefill = true;
  c.kv.max_model_len = 1024;
  c.swap_space_bytes = 0;  // no host swap pool (pinned GiBs per run): nothing is preempted here
  c.kv_cache_bytes = int64_t(o.batch) * (o.prompt_tokens + o.output_tokens + 64) * backend.kv_bytes_per_slot();
  c.structured_output.overlap_masks = mode != Mode::before;
  c.structured_output.jump_forward = mode == Mode::jump_forward;
  Engine engine(c, std::make_unique<Borrowed>(backend));
  std::vector<std::shared_ptr<TokenConstraint>> constraints;
  for (int i = 0; i < o.batch; ++i) {
    Request r;
    r.id = uint64_t(i);
    for (int p = 0; p < o.prompt_tokens; ++p)
      r.prompt.push_back(TokenId(splitmix64(o.seed * 1000003 + uint64_t(i) * 4099 + uint64_t(p)) % 150000));
    r.sampling.temperature = 1.0f;
    r.sampling.seed = uint64_t(i) + 1;
    r.sampling.max_tokens = o.output_tokens;
    r.sampling.ignore_eos = true;
    if (mode != Mode::unconstrained) {
      r.constraint = compiler.make(specs[size_t(i) % specs.size()]);
      constraints.push_back(r.constraint);
    }
    if (auto f = engine.add(r, 0.0)) throw std::runtime_error("engine_bench --structured: request refused: " + f->error);
  }
  RunStats st;
  double t = 0, decode_s = 0;
  int64_t decode_tokens = 0, out_tokens = 0, full_batch_steps = 0;
  while (engine.has_work()) {
    const StepOutcome out = engine.step(t);
    t += out.duration_s;
    ++st.steps;
    out_tokens += int64_t(out.tokens.size());
    st.jumped += out.n_jump_forward_tokens;
    // Decode at full batch; the first three such steps capture the CUDA graphs (eager, capture).
    if (out.batch_size == o.batch && out.n_tokens == o.batch && ++full_batch_steps > 3) {
      decode_s += out.duration_s;
      decode_tokens += int64_t(out.tokens.size());
      st.mask_ms.push_back(out.mask_s * 1e3);
      ++st.decode_steps;
    }
  }
  st.decode_tok_s = decode_s > 0 ? double(decode_tokens) / decode_s : 0;
  st.decode_step_ms = st.decode_steps ? decode_s / st.decode_steps * 1e3 : 0;
  st.run_tok_s = t > 0 ? double(out_tokens) / t : 0;
  for (const auto& c : constraints)
    if (const auto* g = dynamic_cast<const grammar::GrammarConstraint*>(c.get()); g && g->matcher().is_terminated())
      ++st.complete;
  return st;
}

}  // namespace structured_bench

std::vector<BenchFigure> run_structured_bench(const StructuredBenchOptions& o) {
  using namespace structured_bench;
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer_from_dir(o.tokenizer_dir);
  ModelConfig model = preset(o.preset);
  model.dtype = DType::bf16;
  model.vocab_size = std::max(151936, tokenizer->vocab_size());  // Qwen3's logits row
  if (auto eos = tokenizer->eos_id()) model.eos_token = *eos;
  std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, CudaBackendOptions{});
  std::printf("engine_bench --structured: %s (vocabulary %d, Qwen3 tokenizer) on %s\n", model.name.c_str(),
              model.vocab_size, backend->device_description().c_str());
  std::printf("  batch %d, prompt %d, output %d tokens per request (ignore_eos), temperature 1, %d repeats\n", o.batch,
              o.prompt_tokens, o.output_tokens, o.repeats);

  // The builtin corpus (the load generator's set), compiled once here so the cold compiles of
  // the shared building blocks stay out of the runs (each run compiles its requests again, warm).
  grammar::ConstraintCompiler compiler(*tokenizer, model.vocab_size);
  std::vector<grammar::ConstraintSpec> specs;
  for (const nlohmann::ordered_json& schema : grammar::make_schema_corpus(o.batch, o.seed)) {
    grammar::ConstraintSpec spec;
    spec.kind = grammar::ConstraintKind::json_schema;
    spec.source = schema.dump();
    try {
      compiler.make(spec);
      specs.push_back(spec);
    } catch (const std::exception& e) {
      std::printf("  schema skipped: %s\n", e.what());
    }
  }
  if (specs.empty()) throw std::runtime_error("engine_bench --structured: no schema compiled");
  std::printf("  %zu schemas of the builtin corpus (seed %llu) compiled\n", specs.size(), (unsigned long long)o.seed);

  std::map<Mode, std::vector<RunStats>> runs;
  for (int rep = 0; rep < o.repeats; ++rep)
    for (Mode m : kModes) {
      RunStats s = run_once(*backend, m, o, compiler, specs);
      std::printf("  run %d %-27s decode %8.1f tok/s (%6.3f ms/step over %3d steps)  whole run %8.1f tok/s  "
                  "mask/step mean %.3f p50 %.3f p99 %.3f ms  jumped %d  complete JSON %d/%d\n",
                  rep, mode_name(m), s.decode_tok_s, s.decode_step_ms, s.decode_steps, s.run_tok_s, mean(s.mask_ms),
                  percentile(s.mask_ms, 0.5), percentile(s.mask_ms, 0.99), s.jumped, s.complete,
                  m == Mode::unconstrained ? 0 : o.batch);
      runs[m].push_back(std::move(s));
    }

  auto median_of = [&](Mode m, double RunStats::*field) {
    std::vector<double> v;
    for (const RunStats& s : runs[m]) v.push_back(s.*field);
    return percentile(v, 0.5);
  };
  std::vector<BenchFigure> figs;
  const std::string shape = model.name + " vocab " + std::to_string(model.vocab_size) + " b" + std::to_string(o.batch) +
                            " prompt " + std::to_string(o.prompt_tokens) + " out " + std::to_string(o.output_tokens);
  const double base_decode = median_of(Mode::unconstrained, &RunStats::decode_tok_s);
  const double base_run = median_of(Mode::unconstrained, &RunStats::run_tok_s);
  std::printf("\n%-27s %12s %8s %12s %8s %10s %10s %10s\n", "mode (median of repeats)", "decode tok/s", "ratio",
              "run tok/s", "ratio", "mask mean", "mask p50", "mask p99");
  for (Mode m : kModes) {
    const double d = median_of(m, &RunStats::decode_tok_s), r = median_of(m, &RunStats::run_tok_s);
    std::vector<double> masks;
    for (const RunStats& s : runs[m]) masks.insert(masks.end(), s.mask_ms.begin(), s.mask_ms.end());
    std::printf("%-27s %12.1f %8.3f %12.1f %8.3f %8.3f ms %7.3f ms %7.3f ms\n", mode_name(m), d, d / base_decode, r,
                r / base_run, mean(masks), percentile(masks, 0.5), percentile(masks, 0.99));
    const std::string key = mode_key(m);
    figs.push_back({"structured_decode_" + key, shape, "tok/s", "unconstrained", d, d / base_decode});
    figs.push_back({"structured_run_" + key, shape, "tok/s", "unconstrained", r, r / base_run});
    if (m != Mode::unconstrained) {
      figs.push_back({"structured_mask_mean_" + key, shape, "ms/step", "", mean(masks), std::nullopt});
      figs.push_back({"structured_mask_p99_" + key, shape, "ms/step", "", percentile(masks, 0.99), std::nullopt});
    }
  }
  return figs;
}

}  // namespace servelab::bench
