// Scenario::resolve (derived fields) and Scenario::validate (every range, conflict and file).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/backend/sim_backend.h"
#include "engine/model/hf_config.h"
#include "loadgen/records/rate.h"
#include "loadgen/records/record.h"
#include "loadgen/scenario.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

std::string got(double v) { return " (got " + num(v) + ")"; }

bool safe_name(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == '+')) return false;
  return true;
}

}  // namespace

std::vector<double> Scenario::sweep_rates() const {
  if (workload.mode == LoadMode::open_loop) return workload.rates;
  return {0.0};
}

int Scenario::planned_requests() const {
  return workload.n_requests > 0 ? workload.n_requests + workload.warmup_requests : -1;
}

void Scenario::resolve(Diagnostics& diag) {
  if (name.empty()) name = source_file.empty() ? "scenario" : fs::path(source_file).stem().string();
  if (output_dir.empty()) output_dir = "results/runs/" + name;

  if (!model.path.empty()) {
    if (fs::is_directory(model.path)) {
      try {
        const ModelConfig c = read_hf_config((fs::path(model.path) / "config.json").string());
        model.vocab_size = c.vocab_size;
        model.max_position = c.max_position;
      } catch (const std::exception& e) {
        diag.error("model.path", std::string("is not a usable model folder: ") + e.what());
      }
    } else diag.error("model.path", "must be a folder with config.json and *.safetensors (no such folder: " + model.path + ")");
  } else if (!diag.failed("model.preset")) {
    try {
      const ModelConfig c = preset(model.preset);
      model.vocab_size = c.vocab_size;
      model.max_position = c.max_position;
    } catch (const std::invalid_argument&) {
      std::string msg = "must be one of ";
      for (const auto& p : preset_names()) msg += p + (p == preset_names().back() ? "" : ", ");
      msg += ", or use model.path: DIR for a Hugging Face folder (got '" + model.preset + "')";
      if (auto d = did_you_mean(model.preset, preset_names()); !d.empty()) msg += "; did you mean '" + d + "'?";
      diag.error("model.preset", msg);
    }
  }
  if (engine.max_model_len == 0) engine.max_model_len = model.max_position;

  for (auto& st : strategies) {
    if (st.label.empty()) st.label = std::string(to_string(st.sched.kind)) + "-" + to_string(st.kv.kind);
    st.kv.max_model_len = engine.max_model_len;
  }
}

void Scenario::validate() const {
  Diagnostics diag(source);
  validate(diag);
  if (!diag.empty()) throw ScenarioError(diag.messages());
}

void Scenario::validate(Diagnostics& diag) const {
  auto check = [&](bool ok, const std::string& path, const std::string& what) {
    if (!ok && !diag.failed(path)) diag.error(path, what);
  };
  auto file_exists = [&](const std::string& file, const std::string& path) {
    std::error_code ec;
    if (!file.empty() && !diag.failed(path) && !fs::is_regular_file(file, ec))
      diag.error(path, "names no readable file: " + file +
                           " (relative paths are looked up beside the scenario, then in the current directory)");
  };

  check(safe_name(name), "name", "must use only letters, digits and . _ - + (got '" + name + "')");

  // model / backend / engine
  const int max_pos = model.max_position;
  check(backend.threads >= 0, "backend.threads", "must be >= 0 (0 = all cores)" + got(backend.threads));
  if (!backend.sim_device.empty() && !diag.failed("backend.sim_device")) {
    const auto devices = SimDevice::preset_names();
    if (std::find(devices.begin(), devices.end(), backend.sim_device) == devices.end()) {
      std::string msg = "must be one of ";
      for (const auto& d : devices) msg += d + (d == devices.back() ? "" : ", ");
      msg += " (got '" + backend.sim_device + "')";
      if (auto d = did_you_mean(backend.sim_device, devices); !d.empty()) msg += "; did you mean '" + d + "'?";
      diag.error("backend.sim_device", msg);
    }
  }
  file_exists(backend.sim_profile, "backend.sim_profile");
  check(engine.kv_cache_bytes > 0, "engine.kv_cache_bytes", "must be > 0" + got(static_cast<double>(engine.kv_cache_bytes)));
  check(engine.max_model_len >= 1 || max_pos == 0, "engine.max_model_len", "must be >= 1" + got(engine.max_model_len));
  if (max_pos > 0)
    check(engine.max_model_len <= max_pos, "engine.max_model_len",
          "must be <= the model's max_position (" + std::to_string(max_pos) + ")" + got(engine.max_model_len));

  // strategies
  check(!strategies.empty(), "strategies", "must list at least one strategy");
  const auto& w = workload;
  const int64_t longest_seq = [&]() -> int64_t {
    if (w.mode == LoadMode::trace || w.prompt.from_dataset() || w.output.from_dataset()) return engine.max_model_len;
    return std::min<int64_t>(engine.max_model_len, int64_t{w.shared_prefix_tokens} + w.prompt.dist.upper() + w.output.dist.upper());
  }();
  for (size_t i = 0; i < strategies.size(); ++i) {
    const StrategySpec& st = strategies[i];
    const std::string p = "strategies[" + std::to_string(i) + "]";
    if (diag.failed(p + ".batching")) continue;
    check(safe_name(st.label), p + ".label", "must use only letters, digits and . _ - + (got '" + st.label + "')");
    for (size_t j = 0; j < i; ++j)
      if (strategies[j].label == st.label && !diag.failed(p + ".label"))
        diag.error_at(p + ".label", p + " has the label '" + st.label + "' of strategies[" + std::to_string(j) +
                                        "]; give each strategy a distinct label:");
    // The engine's own config checks; their messages start with the field name.
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
        if (!diag.failed(fp)) diag.error_at(fp, p + "." + msg);
      }
    }
    if (st.sched.kind == BatchingKind::continuous && !st.sched.chunked_prefill && st.sched.max_num_batched_tokens >= 1 &&
        st.sched.max_num_batched_tokens < longest_seq)
      check(false, p + ".max_num_batched_tokens",
            "(" + std::to_string(st.sched.max_num_batched_tokens) + ") must be >= the longest sequence the workload can make (" +
                std::to_string(longest_seq) +
                ", capped at engine.max_model_len) unless chunked_prefill is on: a longer prompt could never be scheduled");
  }

  // workload
  switch (w.mode) {
    case LoadMode::open_loop:
      if (!diag.failed("workload.rates") && !diag.failed("workload.arrival.rate")) {
        check(!w.rates.empty(), "workload.rates",
              "is required for open-loop arrivals: a list [1, 2, 4], a range {from: 1, to: 8, steps: 4}, or "
              "arrival.rate: R");
        for (size_t i = 0; i < w.rates.size(); ++i)
          check(w.rates[i] > 0, "workload.rates[" + std::to_string(i) + "]", "must be > 0 requests/s" + got(w.rates[i]));
      }
      if (w.arrival.process == ArrivalProcess::gamma)
        check(w.arrival.cv > 0 && w.arrival.cv <= 100, "workload.arrival.cv", "must be in (0, 100]" + got(w.arrival.cv));
      for (double r : w.rates)
        if (std::isinf(r) && w.n_requests == 0 && w.duration_s > 0)
          check(false, "workload.duration_s", "cannot bound an infinite rate (all at t=0); use n_requests");
      break;
    case LoadMode::closed_loop:
      check(w.concurrency >= 1, "workload.concurrency", "must be >= 1 concurrent users" + got(w.concurrency));
      check(w.duration_s == 0, "workload.duration_s", "needs planned arrivals; with concurrency give n_requests");
      break;
    case LoadMode::trace: file_exists(w.trace, "workload.trace"); break;
  }
  if (w.mode != LoadMode::trace) {
    if (w.duration_s != 0)
      check(w.duration_s > 0 && std::isfinite(w.duration_s), "workload.duration_s", "must be > 0 seconds" + got(w.duration_s));
    else
      check(w.n_requests >= 1, "workload.n_requests", "must be >= 1" + got(w.n_requests));
  } else {
    check(w.n_requests >= 0, "workload.n_requests", "must be >= 0 (0 = the whole trace)" + got(w.n_requests));
    check(w.duration_s >= 0, "workload.duration_s", "must be >= 0 (0 = the whole trace)" + got(w.duration_s));
  }
  check(w.warmup_requests >= 0, "workload.warmup_requests", "must be >= 0" + got(w.warmup_requests));
  check(int64_t{w.n_requests} + w.warmup_requests <= kMaxRequestsPerRun, "workload.n_requests",
        "plus warmup_requests must be <= " + std::to_string(kMaxRequestsPerRun) + got(w.n_requests));
  check(w.shared_prefix_tokens >= 0, "workload.shared_prefix_tokens", "must be >= 0" + got(w.shared_prefix_tokens));
  if (w.prompt.from_dataset() && w.output.from_dataset() &&
      (w.prompt.dataset != w.output.dataset || w.prompt.dataset_format != w.output.dataset_format))
    check(false, "workload.output_tokens.dataset",
          "names a different dataset than prompt_tokens (" + w.prompt.dataset + "); lengths are drawn in pairs from one dataset");
  for (const auto& [key, spec] : {std::pair{"prompt_tokens", &w.prompt}, std::pair{"output_tokens", &w.output}}) {
    if (w.mode == LoadMode::trace) break;
    const std::string p = std::string("workload.") + key;
    if (spec->from_dataset()) {
      file_exists(spec->dataset, p + ".dataset");
      continue;
    }
    const LengthDist& d = spec->dist;
    switch (d.kind) {
      case LengthDistKind::fixed:
        check(d.value >= 1, p + ".value", "must be >= 1 token" + got(d.value));
        break;
      case LengthDistKind::normal:
        check(d.std >= 0, p + ".std", "must be >= 0" + got(d.std));
        check(d.mean > 0, p + ".mean", "must be > 0" + got(d.mean));
        break;
      case LengthDistKind::lognormal:
        check(d.mean > 0, p + ".mean", "must be > 0" + got(d.mean));
        if (d.sigma != 0) check(d.sigma > 0 && d.sigma <= 10, p + ".sigma", "must be in (0, 10]" + got(d.sigma));
        else check(d.std > 0, p + ".std", "must be > 0" + got(d.std));
        break;
      default: break;
    }
    if (d.kind != LengthDistKind::fixed) {
      check(d.min >= 1, p + ".min", "must be >= 1 token" + got(d.min));
      check(d.max >= d.min, p + ".max", "must be >= min (" + std::to_string(d.min) + ")" + got(d.max));
    }
  }
  // The rule for lengths that do not fit (documented in scenarios/README.md): the prompt is cut
  // first, down to 1 token, then the output. A workload whose shortest request cannot fit is an error.
  if (w.mode != LoadMode::trace && engine.max_model_len >= 1 && !w.prompt.from_dataset() && !w.output.from_dataset() &&
      !diag.failed("workload")) {
    const int64_t shortest = int64_t{w.shared_prefix_tokens} + 1 + w.output.dist.lower();
    if (shortest > engine.max_model_len)
      diag.error_at("workload.output_tokens",
                    "workload: shared_prefix_tokens (" + std::to_string(w.shared_prefix_tokens) + ") + 1 prompt token + " +
                        "the smallest output_tokens (" + std::to_string(w.output.dist.lower()) + ") = " +
                        std::to_string(shortest) + " exceeds engine.max_model_len (" +
                        std::to_string(engine.max_model_len) + ")");
  }

  // slo
  check(slo.ttft_ms > 0 && std::isfinite(slo.ttft_ms), "slo.ttft_ms", "must be > 0 ms" + got(slo.ttft_ms));
  check(slo.tpot_ms > 0 && std::isfinite(slo.tpot_ms), "slo.tpot_ms", "must be > 0 ms" + got(slo.tpot_ms));
  check(slo.attainment > 0 && slo.attainment <= 1, "slo.attainment", "must be in (0, 1]" + got(slo.attainment));

  // gates
  const auto& names = gate_metric_names();
  const std::vector<double> rates = sweep_rates();
  for (size_t i = 0; i < gates.size(); ++i) {
    const GateSpec& g = gates[i];
    const std::string p = "gates[" + std::to_string(i) + "]";
    if (!g.metric.empty() && std::find(names.begin(), names.end(), g.metric) == names.end() && !diag.failed(p + ".metric")) {
      std::string msg = "must be a summary metric such as goodput, request_goodput, output_throughput, slo_attainment, "
                        "ttft_p99_ms, tpot_p99_ms, e2e_p99_ms (got '" + g.metric + "')";
      if (auto d = did_you_mean(g.metric, names); !d.empty()) msg += "; did you mean '" + d + "'?";
      diag.error(p + ".metric", msg);
    }
    if (!g.min && !g.max && !diag.failed(p)) diag.error_at(p, p + " needs min: or max: (or both)");
    if (g.min && g.max) check(*g.min <= *g.max, p + ".max", "must be >= min (" + num(*g.min) + ")" + got(*g.max));
    if (!g.strategy.empty()) {
      bool found = false;
      std::string labels;
      for (const auto& st : strategies) {
        found |= st.label == g.strategy;
        labels += (labels.empty() ? "" : ", ") + st.label;
      }
      check(found, p + ".strategy", "must be one of the strategy labels: " + labels + " (got '" + g.strategy + "')");
    }
    if (g.rate && w.mode != LoadMode::open_loop) {
      check(false, p + ".rate", std::string("selects a rate of an open-loop sweep; a ") +
                                    (w.mode == LoadMode::trace ? "trace" : "closed-loop") + " workload has one run: remove it");
    } else if (g.rate && !diag.failed("workload.rates")) {
      bool found = false;
      for (double r : rates) found |= same_rate(r, *g.rate);
      std::string list;
      for (double r : rates) list += (list.empty() ? "" : ", ") + num(r);
      check(found, p + ".rate", "must be one of the sweep's rates: " + list + got(*g.rate));
    }
  }
  if (baseline) {
    file_exists(baseline->file, "baseline.file");
    check(baseline->max_regression_pct >= 0, "baseline.max_regression_pct", "must be >= 0" + got(baseline->max_regression_pct));
    for (size_t i = 0; i < baseline->metrics.size(); ++i)
      if (std::find(names.begin(), names.end(), baseline->metrics[i]) == names.end()) {
        std::string msg = "is not a summary metric (got '" + baseline->metrics[i] + "')";
        if (auto d = did_you_mean(baseline->metrics[i], names); !d.empty()) msg += "; did you mean '" + d + "'?";
        check(false, "baseline.metrics[" + std::to_string(i) + "]", msg);
      }
  }
}

}  // namespace servelab
