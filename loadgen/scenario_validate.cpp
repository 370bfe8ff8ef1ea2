// Scenario::resolve (derived fields) and Scenario::validate (every range, conflict and file).
#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/backend/cuda/tp_plan.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/engine.h"
#include "engine/model/hf_config.h"
#include "engine/model/memory_check.h"
#include "loadgen/records/rate.h"
#include "loadgen/records/record.h"
#include "loadgen/scenario.h"
#include "loadgen/scenario_parse.h"
#include "loadgen/records/gate_metrics.h"
#include "loadgen/sources.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

std::string got(double v) { return " (got " + num(v) + ")"; }

/// The shortest decimal that reads back as v ("4", "1.0000000001").
std::string shortest(double v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

bool safe_name(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == '+')) return false;
  return true;
}

/// Reports the first repeated rate (a range's repeats all point at the range).
void check_distinct_rates(const std::vector<double>& rates, Diagnostics& diag) {
  for (size_t i = 1; i < rates.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (!same_rate(rates[i], rates[j])) continue;
      const std::string p = "workload.rates[" + std::to_string(i) + "]";
      if (diag.failed(p)) return;
      const std::string value = shortest(rates[j]) + (rates[i] == rates[j] ? "" : " ≈ " + shortest(rates[i]));
      diag.error(p, "repeats workload.rates[" + std::to_string(j) + "] (" + value +
                        "): each rate is one sweep point; list it once, or use fewer steps for a range");
      return;
    }
}

/// The engine's own arena check for every strategy: a KV cache too small fails before any run.
void check_kv_arenas(const Scenario& sc, Diagnostics& diag) {
  for (const char* p : {"model", "backend", "engine", "strategies"})
    if (diag.failed(p)) return;
  if (sc.engine.gpu_memory_utilization > 0) {  // the arena is sized on the GPU at run time
    if (sc.backend.kind != BackendKind::cuda)
      diag.error_at("engine.gpu_memory_utilization",
                    std::string("engine.gpu_memory_utilization applies to backend cuda, not ") + to_string(sc.backend.kind) +
                        "; give kv_cache_bytes or kv_cache_mb");
    return;
  }
  try {
    BackendSpec spec;
    spec.kind = sc.backend.kind;
    spec.model = sc.model.path.empty() ? sc.model.preset : sc.model.path;
    if (!sc.backend.sim_device.empty()) spec.sim_device = SimDevice::preset(sc.backend.sim_device);
    spec.sim_profile = sc.backend.sim_profile;
    spec.tensor_parallel = sc.backend.tensor_parallel;  // cuda, sim: one GPU's share of the KV heads
    const ModelConfig model = resolve_model_config(spec.model);
    if (spec.kind == BackendKind::cpu) {  // a model the machine cannot hold: say so, not "arena too small"
      try {
        check_weights_fit(model, "model");
      } catch (const std::runtime_error& e) {
        diag.error_at("model", e.what());
        return;
      }
    }
    for (const StrategySpec& st : sc.strategies) {
      if (spec.kind != BackendKind::cuda) spec.kv_cache_dtype = st.kv_cache_dtype.value_or(sc.backend.kv_cache_dtype);
      check_kv_arena(engine_config(sc, st), model, kv_bytes_per_slot(spec));
    }
  } catch (const std::invalid_argument& e) {
    diag.error_at("engine.kv_cache_bytes", e.what());
  } catch (const std::exception&) {
    // A model or profile file problem: reported by its own check, or by the run that reads it.
  }
}

}  // namespace

void Scenario::resolve(Diagnostics& diag) {
  if (name.empty()) name = source_file.empty() ? "scenario" : fs::path(source_file).stem().string();
  if (output_dir.empty()) output_dir = "results/runs/" + name;

  if (!model.path.empty()) {
    if (fs::is_directory(model.path)) {
      try {
        const ModelConfig c = read_hf_config((fs::path(model.path) / "config.json").string());
        model.vocab_size = c.vocab_size;
        model.max_position = c.max_position;
        model.n_layers = c.n_layers;
      } catch (const std::exception& e) {
        diag.error("model.path", std::string("is not a usable model folder: ") + e.what());
      }
    } else diag.error("model.path", "must be a folder with config.json and *.safetensors (no such folder: " + model.path + ")");
  } else if (!diag.failed("model.preset")) {
    try {
      const ModelConfig c = preset(model.preset);
      model.vocab_size = c.vocab_size;
      model.max_position = c.max_position;
      model.n_layers = c.n_layers;
    } catch (const std::invalid_argument&) {
      std::string msg = "must be one of ";
      for (const auto& p : preset_names()) msg += p + (p == preset_names().back() ? "" : ", ");
      msg += ", or use model.path: DIR for a Hugging Face folder (got '" + model.preset + "')";
      if (auto d = did_you_mean(model.preset, preset_names()); !d.empty()) msg += "; did you mean '" + d + "'?";
      diag.error("model.preset", msg);
    }
  }
  if (engine.max_model_len == 0) engine.max_model_len = model.max_position;
  if (model.residual_scale && model.n_layers > 0 && model.residual_scale->from_layer > model.n_layers)
    diag.error("model.residual_scale.from_layer", "must be at most the model's " + std::to_string(model.n_layers) +
                                                     " layers (got " + std::to_string(model.residual_scale->from_layer) + ")");
  if (model.residual_scale && backend.kind == BackendKind::cuda && backend.tensor_parallel > 1)
    diag.error("model.residual_scale", "runs on one GPU so far (got backend.tensor_parallel " +
                                           std::to_string(backend.tensor_parallel) + ")");

  for (auto& st : strategies) {
    if (st.label.empty()) {
      st.label = std::string(to_string(st.sched.kind)) + "-" + to_string(st.kv.kind);
      if (st.quantization && *st.quantization != Quantization::none) st.label += std::string("-") + to_string(*st.quantization);
      if (st.kv_cache_dtype == KvCacheDType::fp8) st.label += "-kvfp8";
      if (st.lora) st.label += st.lora->enabled() ? "-lora" + std::to_string(st.lora->adapters.size()) : "-base";
    }
    st.kv.max_model_len = engine.max_model_len;
  }
  if (!target) check_lora_batching(*this, diag);  // scenario_parse_lora.cpp
  const auto not_continuous = std::find_if(strategies.begin(), strategies.end(), [](const StrategySpec& st) {
    return st.sched.kind != BatchingKind::continuous;
  });
  if (engine.structured_output.jump_forward && not_continuous != strategies.end())
    diag.error("engine.structured_output.jump_forward", "needs continuous batching in every strategy (" +
                                                             not_continuous->label + " is " + to_string(not_continuous->sched.kind) + ")");
}

void Scenario::validate() const {
  Diagnostics diag(source);
  validate(diag);
  if (!diag.empty()) throw ScenarioError(diag.messages());
}

namespace {

/// What every section of Scenario::validate shares: where errors go, and the two checks they all
/// make. An error is not repeated at a path that already has one (above, at or below it).
struct Checker {
  Diagnostics& diag;

  void check(bool ok, const std::string& path, const std::string& what) const {
    if (!ok && !diag.failed(path)) diag.error(path, what);
  }
  void file_exists(const std::string& file, const std::string& path) const {
    std::error_code ec;
    if (!file.empty() && !diag.failed(path) && !fs::is_regular_file(file, ec))
      diag.error(path, "names no readable file: " + file +
                           " (relative paths are looked up beside the scenario, then in the current directory)");
  }
};

/// "must be one of a, b, c (got 'x'); did you mean 'y'?"
std::string one_of(const std::vector<std::string>& allowed, const std::string& value) {
  std::string msg = "must be one of ";
  for (const auto& a : allowed) msg += a + (a == allowed.back() ? "" : ", ");
  msg += " (got '" + value + "')";
  if (auto d = did_you_mean(value, allowed); !d.empty()) msg += "; did you mean '" + d + "'?";
  return msg;
}

void validate_backend_and_engine(const Scenario& s, const Checker& c) {
  const int max_pos = s.model.max_position;
  c.check(s.backend.threads >= 0, "backend.threads", "must be >= 0 (0 = all cores)" + got(s.backend.threads));
  if (!s.backend.sim_device.empty() && !c.diag.failed("backend.sim_device")) {
    const auto devices = SimDevice::preset_names();
    if (std::find(devices.begin(), devices.end(), s.backend.sim_device) == devices.end())
      c.diag.error("backend.sim_device", one_of(devices, s.backend.sim_device));
  }
  c.file_exists(s.backend.sim_profile, "backend.sim_profile");
  c.file_exists(s.backend.ceilings, "backend.ceilings");
  if (s.backend.tensor_parallel > 1 && !c.diag.failed("backend.tensor_parallel")) {
    if (s.capacity && s.capacity->tensor_parallel != 1 && s.capacity->tensor_parallel != s.backend.tensor_parallel)
      c.diag.error("backend.tensor_parallel", "conflicts with capacity.tensor_parallel (" +
                                                  std::to_string(s.capacity->tensor_parallel) + "); give one" +
                                                  got(s.backend.tensor_parallel));
    else if (s.backend.kind == BackendKind::cuda && !c.diag.failed("model"))
      try {  // the shards: N must divide the heads, KV heads, FFN and vocabulary
        cuda::TpPlan::make(resolve_model_config(s.model.path.empty() ? s.model.preset : s.model.path),
                           s.backend.tensor_parallel);
      } catch (const std::invalid_argument& e) {
        c.diag.error("backend.tensor_parallel", e.what());
      } catch (const std::exception&) {
        // a model file problem: reported by the model check
      }
  }
  c.check(s.engine.kv_cache_bytes > 0, "engine.kv_cache_bytes",
          "must be > 0" + got(static_cast<double>(s.engine.kv_cache_bytes)));
  c.check(s.engine.max_model_len >= 1 || max_pos == 0, "engine.max_model_len", "must be >= 1" + got(s.engine.max_model_len));
  if (max_pos > 0)
    c.check(s.engine.max_model_len <= max_pos, "engine.max_model_len",
            "must be <= the model's max_position (" + std::to_string(max_pos) + ")" + got(s.engine.max_model_len));
}

/// The longest sequence (prompt + output) the workload can make, capped at engine.max_model_len;
/// datasets and traces can reach the cap.
int64_t longest_sequence(const Scenario& s) {
  const WorkloadSpec& w = s.workload;
  if (w.mode == LoadMode::trace || w.prompt.from_dataset() || w.output.from_dataset()) return s.engine.max_model_len;
  return std::min<int64_t>(s.engine.max_model_len,
                           int64_t{w.shared_prefix_tokens} + w.prompt.dist.upper() + w.output.dist.upper());
}

/// The engine's own SchedulerConfig / KvConfig checks, reported at the strategy's field (their
/// messages start with the field name).
void validate_engine_configs(const StrategySpec& st, const std::string& p, const Checker& c) {
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0) st.sched.validate();
      else st.kv.validate();
    } catch (const std::invalid_argument& e) {
      std::string msg = e.what();
      std::string field = msg.substr(0, msg.find(' '));
      if (which == 0 || field.rfind("kv.", 0) != 0) field = (which == 0 ? "" : "kv.") + field;
      if (field.rfind("kv.max_model_len", 0) == 0) continue;  // reported as engine.max_model_len
      const std::string fp = p + "." + field;
      if (!c.diag.failed(fp)) c.diag.error_at(fp, p + "." + msg);
    }
  }
}

void validate_strategies(const Scenario& s, const Checker& c) {
  c.check(!s.strategies.empty(), "strategies", "must list at least one strategy");
  const int64_t longest_seq = longest_sequence(s);
  for (size_t i = 0; i < s.strategies.size(); ++i) {
    const StrategySpec& st = s.strategies[i];
    const std::string p = "strategies[" + std::to_string(i) + "]";
    if (c.diag.failed(p + ".batching")) continue;
    c.check(safe_name(st.label), p + ".label", "must use only letters, digits and . _ - + (got '" + st.label + "')");
    for (size_t j = 0; j < i; ++j)
      if (s.strategies[j].label == st.label && !c.diag.failed(p + ".label"))
        c.diag.error_at(p + ".label", p + " has the label '" + st.label + "' of strategies[" + std::to_string(j) +
                                          "]; give each strategy a distinct label:");
    validate_engine_configs(st, p, c);
    if (s.backend.kind == BackendKind::cuda && !s.target) {  // formats the cuda backend does not run yet
      if (st.quantization && *st.quantization != Quantization::none && s.backend.tensor_parallel > 1)
        c.check(false, p + ".quantization",
                std::string("runs on backend cuda with tensor_parallel 1 only so far (got ") + to_string(*st.quantization) +
                    " with tensor_parallel " + std::to_string(s.backend.tensor_parallel) + ")");
      if (st.quantization && *st.quantization != Quantization::none && s.backend.dtype != DType::bf16)
        c.check(false, p + ".quantization",
                std::string("runs on backend cuda with dtype bf16 only (got ") + to_string(*st.quantization) +
                    " with dtype " + to_string(s.backend.dtype) + ")");
      if (st.kv_cache_dtype == KvCacheDType::fp8 && s.backend.tensor_parallel > 1)
        c.check(false, p + ".kv_cache_dtype",
                "fp8 runs on backend cuda with tensor_parallel 1 only so far (got tensor_parallel " +
                    std::to_string(s.backend.tensor_parallel) + ")");
    }
    if (st.sched.kind == BatchingKind::continuous && !st.sched.chunked_prefill && st.sched.max_num_batched_tokens >= 1 &&
        st.sched.max_num_batched_tokens < longest_seq)
      c.check(false, p + ".max_num_batched_tokens",
              "(" + std::to_string(st.sched.max_num_batched_tokens) +
                  ") must be >= the longest sequence the workload can make (" + std::to_string(longest_seq) +
                  ", capped at engine.max_model_len) unless chunked_prefill is on: a longer prompt could never be scheduled");
  }
}

/// How requests are issued: rates (open loop), users (closed loop) or a trace; how many.
void validate_load(const Scenario& s, const Checker& c) {
  const WorkloadSpec& w = s.workload;
  switch (w.mode) {
    case LoadMode::open_loop:
      if (!c.diag.failed("workload.rates") && !c.diag.failed("workload.arrival.rate")) {
        c.check(!w.rates.empty(), "workload.rates",
                "is required for open-loop arrivals: a list [1, 2, 4], a range {from: 1, to: 8, steps: 4}, or "
                "arrival.rate: R");
        for (size_t i = 0; i < w.rates.size(); ++i)
          c.check(w.rates[i] > 0, "workload.rates[" + std::to_string(i) + "]", "must be > 0 requests/s" + got(w.rates[i]));
        check_distinct_rates(w.rates, c.diag);
      }
      if (w.arrival.process == ArrivalProcess::gamma)
        c.check(w.arrival.cv > 0 && w.arrival.cv <= 100, "workload.arrival.cv", "must be in (0, 100]" + got(w.arrival.cv));
      for (double r : w.rates)
        if (std::isinf(r) && w.n_requests == 0 && w.duration_s > 0)
          c.check(false, "workload.duration_s", "cannot bound an infinite rate (all at t=0); use n_requests");
      if (w.arrival.ramp_to != 0) {
        c.check(w.arrival.ramp_to > 0 && std::isfinite(w.arrival.ramp_to), "workload.arrival.ramp_to",
                "must be > 0 requests/s" + got(w.arrival.ramp_to));
        for (double r : w.rates)
          if (std::isinf(r)) c.check(false, "workload.arrival.ramp_to", "cannot ramp from an infinite rate");
      }
      c.check(w.arrival.max_concurrency >= 0, "workload.arrival.max_concurrency",
              "must be >= 1 requests in flight (0 = no cap)" + got(w.arrival.max_concurrency));
      break;
    case LoadMode::closed_loop:
      if (w.concurrencies.empty()) {
        c.check(w.concurrency >= 1, "workload.concurrency", "must be >= 1 concurrent users" + got(w.concurrency));
      } else {
        for (size_t i = 0; i < w.concurrencies.size(); ++i) {
          const std::string p = "workload.concurrency[" + std::to_string(i) + "]";
          c.check(w.concurrencies[i] >= 1, p, "must be >= 1 concurrent users" + got(w.concurrencies[i]));
          for (size_t j = 0; j < i; ++j)
            if (w.concurrencies[j] == w.concurrencies[i])
              c.check(false, p, "repeats workload.concurrency[" + std::to_string(j) + "] (" +
                                    std::to_string(w.concurrencies[i]) + "); each concurrency is one run");
        }
      }
      c.check(w.duration_s == 0, "workload.duration_s", "needs planned arrivals; with concurrency give n_requests");
      break;
    case LoadMode::trace:
      c.file_exists(w.trace, "workload.trace");
      c.check(w.trace_speed > 0 && std::isfinite(w.trace_speed), "workload.trace_speed",
              "must be > 0 (2 = twice as fast)" + got(w.trace_speed));
      break;
  }
  double fractions = 0;
  for (size_t i = 0; i < w.prefix_groups.size(); ++i) {
    const std::string p = "workload.prefix_groups[" + std::to_string(i) + "]";
    const PrefixGroupSpec& g = w.prefix_groups[i];
    c.check(g.tokens >= 1, p + ".tokens", "must be >= 1 token" + got(g.tokens));
    c.check(g.fraction > 0 && g.fraction <= 1, p + ".fraction", "must be in (0, 1]" + got(g.fraction));
    fractions += g.fraction;
  }
  if (fractions > 1 + 1e-9)
    c.check(false, "workload.prefix_groups", "fractions must sum to at most 1" + got(fractions));
  if (w.copied_spans.enabled() || w.copied_spans.fraction != 0) {
    const CopiedSpansSpec& cs = w.copied_spans;
    c.check(cs.fraction > 0 && cs.fraction <= 1, "workload.copied_spans.fraction", "must be in (0, 1]" + got(cs.fraction));
    c.check(cs.span_tokens >= 8, "workload.copied_spans.span_tokens", "must be >= 8 tokens" + got(cs.span_tokens));
    c.check(cs.edit_rate >= 0 && cs.edit_rate <= 0.5, "workload.copied_spans.edit_rate",
            "must be in [0, 0.5]" + got(cs.edit_rate));
  }
  if (w.sessions.enabled() || w.sessions.think_time_s != 0) {
    c.check(w.sessions.turns >= 1, "workload.sessions.turns", "must be >= 1" + got(w.sessions.turns));
    c.check(w.sessions.think_time_s >= 0 && std::isfinite(w.sessions.think_time_s), "workload.sessions.think_time_s",
            "must be >= 0 seconds" + got(w.sessions.think_time_s));
    c.check(w.mode == LoadMode::open_loop, "workload.sessions",
            "needs open-loop arrivals (sessions arrive by workload.arrival; turns follow replies)");
  }
  if (w.mode != LoadMode::trace) {
    if (w.duration_s != 0)
      c.check(w.duration_s > 0 && std::isfinite(w.duration_s), "workload.duration_s", "must be > 0 seconds" + got(w.duration_s));
    else
      c.check(w.n_requests >= 1, "workload.n_requests", "must be >= 1" + got(w.n_requests));
  } else {
    c.check(w.n_requests >= 0, "workload.n_requests", "must be >= 0 (0 = the whole trace)" + got(w.n_requests));
    c.check(w.duration_s >= 0, "workload.duration_s", "must be >= 0 (0 = the whole trace)" + got(w.duration_s));
  }
  if (!w.tokenizer.empty()) c.file_exists(w.tokenizer, "workload.tokenizer");
  c.check(w.warmup_requests >= 0, "workload.warmup_requests", "must be >= 0" + got(w.warmup_requests));
  c.check(int64_t{w.n_requests} + w.warmup_requests <= kMaxRequestsPerRun, "workload.n_requests",
          "plus warmup_requests must be <= " + std::to_string(kMaxRequestsPerRun) + got(w.n_requests));
  c.check(w.shared_prefix_tokens >= 0, "workload.shared_prefix_tokens", "must be >= 0" + got(w.shared_prefix_tokens));
}

void validate_length_dist(const LengthDist& d, const std::string& p, const Checker& c) {
  switch (d.kind) {
    case LengthDistKind::fixed: c.check(d.value >= 1, p + ".value", "must be >= 1 token" + got(d.value)); break;
    case LengthDistKind::normal:
      c.check(d.std >= 0, p + ".std", "must be >= 0" + got(d.std));
      c.check(d.mean > 0, p + ".mean", "must be > 0" + got(d.mean));
      break;
    case LengthDistKind::lognormal:
      c.check(d.mean > 0, p + ".mean", "must be > 0" + got(d.mean));
      if (d.sigma != 0) c.check(d.sigma > 0 && d.sigma <= 10, p + ".sigma", "must be in (0, 10]" + got(d.sigma));
      else c.check(d.std > 0, p + ".std", "must be > 0" + got(d.std));
      break;
    default: break;
  }
  if (d.kind != LengthDistKind::fixed) {
    c.check(d.min >= 1, p + ".min", "must be >= 1 token" + got(d.min));
    c.check(d.max >= d.min, p + ".max", "must be >= min (" + std::to_string(d.min) + ")" + got(d.max));
  }
}

/// Prompt and output lengths: one dataset for both, or distributions whose shortest request fits.
void validate_lengths(const Scenario& s, const Checker& c) {
  const WorkloadSpec& w = s.workload;
  if (w.prompt.from_dataset() && w.output.from_dataset() &&
      (w.prompt.dataset != w.output.dataset || w.prompt.dataset_format != w.output.dataset_format))
    c.check(false, "workload.output_tokens.dataset",
            "names a different dataset than prompt_tokens (" + w.prompt.dataset +
                "); lengths are drawn in pairs from one dataset");
  if (w.mode == LoadMode::trace) return;  // lengths come from the trace
  for (const auto& [key, spec] : {std::pair{"prompt_tokens", &w.prompt}, std::pair{"output_tokens", &w.output}}) {
    const std::string p = std::string("workload.") + key;
    if (spec->from_dataset()) c.file_exists(spec->dataset, p + ".dataset");
    else validate_length_dist(spec->dist, p, c);
  }
  // The rule for lengths that do not fit (documented in scenarios/README.md): the prompt is cut
  // first, down to 1 token, then the output. A workload whose shortest request cannot fit is an error.
  if (s.engine.max_model_len >= 1 && !w.prompt.from_dataset() && !w.output.from_dataset() && !c.diag.failed("workload")) {
    const int64_t shortest = int64_t{w.max_prefix_tokens()} + 1 + w.output.dist.lower();
    if (shortest > s.engine.max_model_len)
      c.diag.error_at("workload.output_tokens",
                      std::string(w.prefix_groups.empty() ? "workload: shared_prefix_tokens ("
                                                          : "workload: shared_prefix_tokens + the longest prefix group (") +
                          std::to_string(w.max_prefix_tokens()) + ") + 1 prompt token + " +
                          "the smallest output_tokens (" + std::to_string(w.output.dist.lower()) + ") = " +
                          std::to_string(shortest) + " exceeds engine.max_model_len (" +
                          std::to_string(s.engine.max_model_len) + ")");
  }
}

void validate_slo(const SloSpec& slo, const Checker& c) {
  for (const auto& [key, v] : {std::pair{"slo.ttft_ms", slo.ttft_ms}, std::pair{"slo.tpot_ms", slo.tpot_ms},
                               std::pair{"slo.itl_ms", slo.itl_ms}, std::pair{"slo.e2e_ms", slo.e2e_ms}})
    c.check(v > 0, key, "must be > 0 ms (.inf = no bound)" + got(v));
  c.check(slo.attainment > 0 && slo.attainment <= 1, "slo.attainment", "must be in (0, 1]" + got(slo.attainment));
  for (size_t i = 0; i < slo.percentiles.size(); ++i) {
    const auto& p = slo.percentiles[i];
    const std::string at = "slo.percentiles[" + std::to_string(i) + "]";
    if (!p.metric.empty())
      c.check(p.metric == "ttft" || p.metric == "tpot" || p.metric == "itl" || p.metric == "e2e", at + ".metric",
              "must be ttft, tpot, itl or e2e (got '" + p.metric + "')");
    c.check(p.percentile > 0 && p.percentile <= 100, at + ".percentile", "must be in (0, 100]" + got(p.percentile));
    c.check(p.max_ms > 0 && std::isfinite(p.max_ms), at + ".max_ms", "must be finite and > 0 ms" + got(p.max_ms));
  }
}

void validate_report(const Scenario& s, const Checker& c) {
  const ReportSpec& r = s.report;
  for (size_t i = 0; i < r.percentiles.size(); ++i)
    c.check(r.percentiles[i] >= 0 && r.percentiles[i] <= 100, "report.percentiles[" + std::to_string(i) + "]",
            "must be in [0, 100]" + got(r.percentiles[i]));
  for (const auto& [key, v] : {std::pair{"report.window.skip_first_s", r.skip_first_s},
                               std::pair{"report.window.skip_last_s", r.skip_last_s}})
    c.check(v >= 0 && std::isfinite(v), key, "must be finite and >= 0 s" + got(v));
  c.check(r.skip_first_requests >= 0, "report.window.skip_first_requests", "must be >= 0" + got(r.skip_first_requests));
  c.check(r.skip_last_requests >= 0, "report.window.skip_last_requests", "must be >= 0" + got(r.skip_last_requests));
  if ((r.skip_first_s > 0 || r.skip_last_s > 0) && (r.skip_first_requests > 0 || r.skip_last_requests > 0))
    c.diag.error_at("report.window", "report.window: give seconds (skip_first_s, skip_last_s) or requests "
                                     "(skip_first_requests, skip_last_requests), not both");
  if (s.workload.n_requests > 0 && r.skip_first_requests + int64_t{r.skip_last_requests} >= s.workload.n_requests)
    c.check(false, "report.window.skip_first_requests",
            "plus skip_last_requests must leave some of workload.n_requests (" + std::to_string(s.workload.n_requests) +
                ")" + got(r.skip_first_requests));
  c.check(r.accuracy_positions >= 0 && r.accuracy_positions <= 1'000'000, "report.accuracy_positions",
          "must be in [0, 1000000] (0: not measured)" + got(r.accuracy_positions));
  if (!std::isnan(r.cdf_rate)) {
    if (s.workload.mode != LoadMode::open_loop) {
      c.check(false, "report.cdf_rate", "selects a rate of an open-loop sweep: remove it");
    } else if (!c.diag.failed("workload.rates")) {
      bool found = false;
      std::string list;
      for (double x : s.sweep_rates()) {
        found |= same_rate(x, r.cdf_rate);
        list += (list.empty() ? "" : ", ") + num(x);
      }
      c.check(found, "report.cdf_rate", "must be one of the sweep's rates: " + list + got(r.cdf_rate));
    }
  }
}

/// A registry name, or an older unit-less one ("goodput" for goodput_tok_s).
bool is_gate_metric(const std::string& metric) { return find_gate_metric(metric) != nullptr; }

/// Names a "did you mean" may suggest: the registry's and the older aliases.
std::vector<std::string> gate_metric_candidates() {
  std::vector<std::string> v = gate_metric_names();
  for (const auto& m : gate_metrics())
    if (!m.alias.empty()) v.push_back(m.alias);
  return v;
}

/// Gates name a summary metric, min and/or max, an existing strategy and a rate of the sweep.
void validate_gate(const Scenario& s, const GateSpec& g, const std::string& p, const Checker& c) {
  if (!g.metric.empty() && !is_gate_metric(g.metric) && !c.diag.failed(p + ".metric")) {
    std::string msg = "must be a summary metric such as goodput_tok_s, request_goodput_rps, output_throughput_tok_s, slo_attainment, "
                      "ttft_p99_ms, tpot_p99_ms, e2e_p99_ms (got '" + g.metric + "')";
    if (auto d = did_you_mean(g.metric, gate_metric_candidates()); !d.empty()) msg += "; did you mean '" + d + "'?";
    c.diag.error(p + ".metric", msg);
  }
  if (!g.min && !g.max && !c.diag.failed(p)) c.diag.error_at(p, p + " needs min: or max: (or both)");
  if (g.min && g.max) c.check(*g.min <= *g.max, p + ".max", "must be >= min (" + num(*g.min) + ")" + got(*g.max));
  if (!g.strategy.empty()) {
    bool found = false;
    std::string labels;
    for (const auto& st : s.strategies) {
      found |= st.label == g.strategy;
      labels += (labels.empty() ? "" : ", ") + st.label;
    }
    c.check(found, p + ".strategy", "must be one of the strategy labels: " + labels + " (got '" + g.strategy + "')");
  }
  const LoadMode mode = s.workload.mode;
  if (g.rate && mode != LoadMode::open_loop) {
    c.check(false, p + ".rate", std::string("selects a rate of an open-loop sweep; a ") +
                                    (mode == LoadMode::trace ? "trace workload has one run"
                                     : s.workload.concurrencies.size() > 1 ? "closed-loop workload's runs are told apart by concurrency, not rate"
                                                                           : "closed-loop workload has one run") +
                                    ": remove it");
  } else if (g.rate && !c.diag.failed("workload.rates")) {
    bool found = false;
    std::string list;
    for (double r : s.sweep_rates()) {
      found |= same_rate(r, *g.rate);
      list += (list.empty() ? "" : ", ") + num(r);
    }
    c.check(found, p + ".rate", "must be one of the sweep's rates: " + list + got(*g.rate));
  }
}

void validate_baseline(const BaselineSpec& b, const Checker& c) {
  c.file_exists(b.file, "baseline.file");
  c.check(b.max_regression_pct >= 0, "baseline.max_regression_pct", "must be >= 0" + got(b.max_regression_pct));
  for (size_t i = 0; i < b.metrics.size(); ++i)
    if (!is_gate_metric(b.metrics[i])) {
      std::string msg = "is not a summary metric (got '" + b.metrics[i] + "')";
      if (auto d = did_you_mean(b.metrics[i], gate_metric_candidates()); !d.empty()) msg += "; did you mean '" + d + "'?";
      c.check(false, "baseline.metrics[" + std::to_string(i) + "]", msg);
    }
}

}  // namespace

uint64_t repeat_seed(uint64_t seed, int k) {
  if (k <= 1) return seed;
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(k);  // SplitMix64 of (seed, k)
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A model proposer's draft against the scenario's target: self must skip some layers, a draft
/// model must resolve and share the target's vocabulary.
void validate_speculative(const Scenario& s, const Checker& c) {
  if (c.diag.failed("model")) return;
  for (size_t i = 0; i < s.strategies.size(); ++i) {
    const auto& spec = s.strategies[i].speculative;
    const std::string path = "strategies[" + std::to_string(i) + "].speculative";
    if (!spec || spec->method == SpecMethod::ngram || c.diag.failed(path)) continue;
    try {
      const ModelConfig target = resolve_model_config(s.model.path.empty() ? s.model.preset : s.model.path);
      if (spec->method == SpecMethod::self) {
        c.check(spec->num_layers < target.n_layers, path + ".num_layers",
                "must be below the target's " + std::to_string(target.n_layers) + " layers" + got(spec->num_layers));
        continue;
      }
      ModelConfig draft;
      try {
        draft = resolve_model_config(spec->model);
      } catch (const std::exception& e) {
        c.check(false, path + ".model", std::string("names no preset or model folder: ") + e.what());
        continue;
      }
      c.check(draft.vocab_size == target.vocab_size, path + ".model",
              "names a draft (" + draft.name + ") of " + std::to_string(draft.vocab_size) +
                  " tokens; it must share the target's vocabulary of " + std::to_string(target.vocab_size));
    } catch (const std::exception&) {
      // a model file problem: reported by the model check
    }
  }
}

void Scenario::validate(Diagnostics& diag) const {
  const Checker c{diag};
  validate_speculative(*this, c);
  c.check(safe_name(name), "name", "must use only letters, digits and . _ - + (got '" + name + "')");
  validate_backend_and_engine(*this, c);
  validate_strategies(*this, c);
  validate_load(*this, c);
  validate_lengths(*this, c);
  validate_slo(slo, c);
  validate_report(*this, c);
  c.check(workload.repeat >= 1 && workload.repeat <= 100, "workload.repeat", "must be in [1, 100]" + got(workload.repeat));
  if (capacity && capacity->decide == CapacityDecide::ci95_lo)
    c.check(workload.repeat >= 2, "capacity.decide",
            "ci95_lo needs workload.repeat >= 2: one run's attainment has no interval" + got(workload.repeat));
  for (size_t i = 0; i < gates.size(); ++i) validate_gate(*this, gates[i], "gates[" + std::to_string(i) + "]", c);
  if (baseline) validate_baseline(*baseline, c);
  // With `target:` nothing is loaded here: the model only bounds the planned lengths (its
  // max_position), so neither its weights nor a KV arena have to fit this machine.
  if (!target) check_kv_arenas(*this, diag);
}

}  // namespace servelab
