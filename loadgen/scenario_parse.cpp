// The YAML walk: each value is type-checked, its location recorded under its key path, and every
// problem collected (not thrown) so one run of `servelab validate` shows them all.
#include "loadgen/scenario_parse.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "loadgen/yaml_reader.h"

namespace servelab {

namespace fs = std::filesystem;

std::string resolve_input_path(const std::string& path, const std::string& scenario_file) {
  if (path.empty()) return path;
  const fs::path p(path);
  if (p.is_absolute()) return path;
  const fs::path base = fs::path(scenario_file).parent_path();
  const fs::path beside = base / p;
  std::error_code ec;
  if (!base.empty() && fs::exists(beside, ec)) return beside.lexically_normal().string();
  if (fs::exists(p, ec)) return path;
  return base.empty() ? path : beside.lexically_normal().string();
}

namespace {

using namespace scenario_yaml;

const std::vector<std::string> kStaticKnobs = {"batch_size", "max_wait_ms"};
const std::vector<std::string> kDynamicKnobs = {"max_batch_size", "max_queue_delay_ms"};
const std::vector<std::string> kContinuousKnobs = {"max_num_seqs", "max_num_batched_tokens", "chunked_prefill",
                                                   "preemption"};

class Walker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void root(const YAML::Node& r);

 private:
  void model(const YAML::Node& n);
  void engine(const YAML::Node& n);
  void strategy(const YAML::Node& n, const std::string& path, StrategySpec& out);
  void kv(const YAML::Node& n, const std::string& path, KvConfig& out);
  void workload(const YAML::Node& n);
  void arrival(const YAML::Node& n, bool& rate_given);
  void prefix_groups(const YAML::Node& n);
  void length(const YAML::Node& n, const std::string& path, LengthRole role, LengthSpec& out);
};

void Walker::root(const YAML::Node& r) {
  if (!r.IsDefined() || r.IsNull()) {
    d_.error_at("", "empty scenario: expected a map with at least strategies: and workload:");
    d_.mark_failed("");  // nothing else is worth saying
    return;
  }
  if (!check_map(r, "", {"name", "description", "seed", "output_dir", "model", "backend", "engine", "strategies",
                         "workload", "slo", "report", "gates", "baseline", "target", "capacity"}))
    return;
  if (defined(r["name"])) read_string(r["name"], "name", s_.name);
  if (defined(r["description"])) read_string(r["description"], "description", s_.description);
  if (defined(r["seed"])) read_int(r["seed"], "seed", s_.seed);
  if (defined(r["output_dir"])) read_string(r["output_dir"], "output_dir", s_.output_dir);
  if (defined(r["model"])) model(r["model"]);
  if (defined(r["backend"])) parse_backend_section(r["backend"], ov_, s_, d_);  // scenario_parse_backend.cpp
  if (defined(r["engine"])) engine(r["engine"]);
  if (defined(r["strategies"])) {
    const YAML::Node& n = r["strategies"];
    note(n, "strategies");
    if (!n.IsSequence()) {
      d_.error("strategies", std::string("must be a list of {batching: ..., kv: ...} entries (got ") + type_name(n) + ")");
    } else {
      s_.strategies.resize(n.size());
      for (size_t i = 0; i < n.size(); ++i) strategy(n[i], index("strategies", i), s_.strategies[i]);
    }
  } else if (!defined(r["target"])) {  // a target (HTTP runs) needs no engine strategy
    d_.error_at("strategies", "missing strategies: list at least one {batching: static|dynamic|continuous, kv: {kind: naive|paged}}");
  }
  if (defined(r["workload"])) workload(r["workload"]);
  if (defined(r["slo"])) parse_slo_section(r["slo"], ov_, s_, d_);  // scenario_parse_slo.cpp
  if (defined(r["report"])) parse_report_section(r["report"], ov_, s_, d_);
  if (defined(r["gates"])) parse_gates_section(r["gates"], ov_, s_, d_);  // scenario_parse_gates.cpp
  if (defined(r["baseline"])) parse_baseline_section(r["baseline"], ov_, s_, d_);
  if (defined(r["target"])) read_target(r["target"], s_, d_);  // loadgen/target.cpp
  if (defined(r["capacity"])) parse_capacity_section(r["capacity"], ov_, s_, d_);
}

void Walker::model(const YAML::Node& n) {
  if (!section(n, "model", {"preset", "path", "dtype", "residual_scale"})) return;
  const bool has_preset = defined(n["preset"]), has_path = defined(n["path"]);
  if (has_preset && has_path) {
    note(n["path"], "model.path");
    d_.error_at("model.path", "model: give preset or path, not both");
  }
  if (has_path && read_path(n["path"], "model.path", s_.model.path)) s_.model.preset.clear();
  if (has_preset) read_string(n["preset"], "model.preset", s_.model.preset);
  if (defined(n["dtype"])) {
    DType dt{};
    if (read_enum(n["dtype"], "model.dtype", dt,
                  Options<DType>{{"f32", DType::f32}, {"f16", DType::f16}, {"bf16", DType::bf16},
                                 {"float32", DType::f32}, {"float16", DType::f16}, {"bfloat16", DType::bf16}}))
      s_.model.dtype = dt;
  }
  if (defined(n["residual_scale"]) && section(n["residual_scale"], "model.residual_scale", {"from_layer", "scale"})) {
    const YAML::Node& r = n["residual_scale"];
    ResidualScale rs;
    double scale = 1.0;
    bool ok = true;
    if (!defined(r["from_layer"]) || !defined(r["scale"])) {
      note(r, "model.residual_scale");
      d_.error_at("model.residual_scale", "model.residual_scale needs from_layer and scale");
      ok = false;
    } else {
      ok = read_int(r["from_layer"], "model.residual_scale.from_layer", rs.from_layer) &&
           read_double(r["scale"], "model.residual_scale.scale", scale);
    }
    rs.scale = static_cast<float>(scale);
    if (ok) {
      try {
        rs.validate("model.residual_scale");
        s_.model.residual_scale = rs;
      } catch (const std::invalid_argument& e) {
        note(r, "model.residual_scale");
        d_.error_at("model.residual_scale", e.what());
      }
    }
  }
}

void Walker::engine(const YAML::Node& n) {
  if (!section(n, "engine",
               {"kv_cache_bytes", "kv_cache_mb", "gpu_memory_utilization", "max_model_len", "swap_space", "structured_output"}))
    return;
  if (defined(n["structured_output"]) &&
      section(n["structured_output"], "engine.structured_output", {"overlap_masks", "jump_forward"})) {
    const YAML::Node& so = n["structured_output"];
    if (defined(so["overlap_masks"]))
      read_bool(so["overlap_masks"], "engine.structured_output.overlap_masks", s_.engine.structured_output.overlap_masks);
    if (defined(so["jump_forward"]))
      read_bool(so["jump_forward"], "engine.structured_output.jump_forward", s_.engine.structured_output.jump_forward);
  }
  const bool bytes = defined(n["kv_cache_bytes"]), mb = defined(n["kv_cache_mb"]);
  const bool util = defined(n["gpu_memory_utilization"]);
  if (bytes && mb) {
    note(n["kv_cache_mb"], "engine.kv_cache_mb");
    d_.error_at("engine.kv_cache_mb", "engine: give kv_cache_bytes or kv_cache_mb, not both");
  } else if ((bytes || mb) && util) {
    note(n["gpu_memory_utilization"], "engine.gpu_memory_utilization");
    d_.error_at("engine.gpu_memory_utilization",
                "engine: give gpu_memory_utilization or a fixed kv_cache_bytes / kv_cache_mb, not both");
  } else if (bytes) {
    read_int(n["kv_cache_bytes"], "engine.kv_cache_bytes", s_.engine.kv_cache_bytes);
  } else if (mb) {
    double v = 0;
    if (read_double(n["kv_cache_mb"], "engine.kv_cache_mb", v)) {
      if (!(v > 0) || v > 1e9) d_.error("engine.kv_cache_mb", "must be > 0 MiB (got " + fmt_double(v) + ")");
      else s_.engine.kv_cache_bytes = static_cast<int64_t>(std::llround(v * 1048576.0));
    }
  } else if (util) {
    double v = 0;
    if (read_double(n["gpu_memory_utilization"], "engine.gpu_memory_utilization", v)) {
      if (!(v > 0 && v <= 1))
        d_.error("engine.gpu_memory_utilization", "must be in (0, 1] (got " + fmt_double(v) + ")");
      else s_.engine.gpu_memory_utilization = v;
    }
  }
  if (defined(n["max_model_len"])) read_int(n["max_model_len"], "engine.max_model_len", s_.engine.max_model_len);
  if (defined(n["swap_space"])) {
    double gib = 0;
    if (read_double(n["swap_space"], "engine.swap_space", gib)) {
      if (!(gib >= 0 && gib <= 1024))
        d_.error("engine.swap_space", "must be in [0, 1024] GiB (got " + fmt_double(gib) + ")");
      else
        s_.engine.swap_space_bytes = static_cast<int64_t>(std::llround(gib * 1073741824.0));
    }
  }
}

void Walker::strategy(const YAML::Node& n, const std::string& path, StrategySpec& out) {
  std::vector<std::string> allowed = {"label", "batching", "kv", "speculative", "quantization", "kv_cache_dtype", "lora"};
  for (const auto* knobs : {&kStaticKnobs, &kDynamicKnobs, &kContinuousKnobs})
    allowed.insert(allowed.end(), knobs->begin(), knobs->end());
  if (!check_map(n, path, allowed)) return;
  if (defined(n["label"])) read_string(n["label"], join(path, "label"), out.label);
  bool kind_ok = false;
  if (defined(n["batching"])) {
    kind_ok = read_enum(n["batching"], join(path, "batching"), out.sched.kind,
                        Options<BatchingKind>{{"static", BatchingKind::static_batch},
                                              {"dynamic", BatchingKind::dynamic_batch},
                                              {"continuous", BatchingKind::continuous}});
  } else {
    d_.error_at(path, path + ".batching is required (static, dynamic or continuous)");
  }
  if (kind_ok) {
    // A knob of another policy would be silently ignored: say which policy it belongs to.
    const std::vector<std::string>* mine = out.sched.kind == BatchingKind::static_batch    ? &kStaticKnobs
                                           : out.sched.kind == BatchingKind::dynamic_batch ? &kDynamicKnobs
                                                                                           : &kContinuousKnobs;
    const std::pair<const std::vector<std::string>*, const char*> owners[] = {
        {&kStaticKnobs, "static"}, {&kDynamicKnobs, "dynamic"}, {&kContinuousKnobs, "continuous"}};
    for (const auto& [knobs, owner] : owners) {
      if (knobs == mine) continue;
      for (const auto& k : *knobs)
        if (defined(n[k])) {
          note(n[k], join(path, k));
          d_.error_at(join(path, k), join(path, k) + " is a knob of " + owner + " batching, not " +
                                         to_string(out.sched.kind) + " (its knobs: " + list_names(*mine) + ")");
        }
    }
  }
  auto& c = out.sched;
  if (defined(n["batch_size"])) read_int(n["batch_size"], join(path, "batch_size"), c.batch_size);
  if (defined(n["max_wait_ms"])) read_double(n["max_wait_ms"], join(path, "max_wait_ms"), c.max_wait_ms);
  if (defined(n["max_batch_size"])) read_int(n["max_batch_size"], join(path, "max_batch_size"), c.max_batch_size);
  if (defined(n["max_queue_delay_ms"]))
    read_double(n["max_queue_delay_ms"], join(path, "max_queue_delay_ms"), c.max_queue_delay_ms);
  if (defined(n["max_num_seqs"])) read_int(n["max_num_seqs"], join(path, "max_num_seqs"), c.max_num_seqs);
  if (defined(n["max_num_batched_tokens"]))
    read_int(n["max_num_batched_tokens"], join(path, "max_num_batched_tokens"), c.max_num_batched_tokens);
  if (defined(n["chunked_prefill"])) read_bool(n["chunked_prefill"], join(path, "chunked_prefill"), c.chunked_prefill);
  if (defined(n["preemption"]))
    read_enum(n["preemption"], join(path, "preemption"), c.preempt,
              Options<PreemptMode>{{"recompute", PreemptMode::recompute}, {"swap", PreemptMode::swap}});
  if (defined(n["kv"])) kv(n["kv"], join(path, "kv"), out.kv);
  if (defined(n["speculative"])) {
    out.speculative.emplace();
    parse_speculative_section(n["speculative"], join(path, "speculative"), out, ov_, s_, d_);  // scenario_parse_speculative.cpp
  }
  if (defined(n["quantization"])) {
    Quantization q = Quantization::none;
    if (read_enum(n["quantization"], join(path, "quantization"), q,
                  Options<Quantization>{{"none", Quantization::none},
                                        {"fp8", Quantization::fp8},
                                        {"int4_awq", Quantization::int4_awq},
                                        {"int4_gptq", Quantization::int4_gptq}}))
      out.quantization = q;
  }
  if (defined(n["lora"])) parse_strategy_lora(n["lora"], join(path, "lora"), ov_, s_, out, d_);  // scenario_parse_lora.cpp
  if (defined(n["kv_cache_dtype"])) {
    KvCacheDType d = KvCacheDType::auto_dtype;
    if (read_enum(n["kv_cache_dtype"], join(path, "kv_cache_dtype"), d,
                  Options<KvCacheDType>{{"auto", KvCacheDType::auto_dtype}, {"fp8", KvCacheDType::fp8}}))
      out.kv_cache_dtype = d;
  }
}

void Walker::kv(const YAML::Node& n, const std::string& path, KvConfig& out) {
  if (!section(n, path, {"kind", "block_size", "reserve", "prefix_caching"})) return;
  bool kind_ok = true;
  if (defined(n["kind"]))
    kind_ok = read_enum(n["kind"], join(path, "kind"), out.kind,
                        Options<KvKind>{{"naive", KvKind::naive}, {"paged", KvKind::paged}});
  if (kind_ok) {
    const std::vector<std::string> paged = {"block_size", "prefix_caching"}, naive = {"reserve"};
    const auto& other = out.kind == KvKind::paged ? naive : paged;
    for (const auto& k : other)
      if (defined(n[k])) {
        note(n[k], join(path, k));
        d_.error_at(join(path, k), join(path, k) + " applies to kind: " + (out.kind == KvKind::paged ? "naive" : "paged") +
                                       ", not " + to_string(out.kind) + " (its keys: " +
                                       list_names(out.kind == KvKind::paged ? paged : naive) + ")");
      }
  }
  if (defined(n["block_size"])) read_int(n["block_size"], join(path, "block_size"), out.block_size);
  if (defined(n["prefix_caching"])) read_bool(n["prefix_caching"], join(path, "prefix_caching"), out.prefix_caching);
  if (defined(n["reserve"]))
    read_enum(n["reserve"], join(path, "reserve"), out.reserve,
              Options<NaiveReserve>{{"max", NaiveReserve::max}, {"pow2", NaiveReserve::pow2}, {"oracle", NaiveReserve::oracle}});
}

void Walker::workload(const YAML::Node& n) {
  if (!check_map(n, "workload", {"arrival", "concurrency", "trace", "rates", "n_requests", "duration_s",
                                 "warmup_requests", "prompt_tokens", "output_tokens", "shared_prefix_tokens",
                                 "prefix_groups", "sessions", "trace_speed", "tokenizer", "repeat", "lora",
                                 "structured_output", "copied_spans"}))
    return;
  auto& w = s_.workload;
  std::vector<std::string> modes;
  for (const char* k : {"arrival", "concurrency", "trace"})
    if (defined(n[k])) modes.push_back(k);
  if (modes.size() > 1) {
    const std::string second = "workload." + modes[1];
    note(n[modes[1]], second);
    d_.error_at(second, "workload: give one of arrival, concurrency or trace (got " + modes[0] + " and " + modes[1] + ")");
    d_.mark_failed("workload.rates");  // which keys belong is unclear until the mode is
  }
  // With two modes given, the first one (in the order above) is read and the other reported.
  const std::string mode = modes.empty() ? "arrival" : modes[0];
  bool rate_given = false;
  if (mode == "concurrency") {
    w.mode = LoadMode::closed_loop;
    const YAML::Node& c = n["concurrency"];
    if (c.IsSequence()) {  // `concurrency: [1, 4, 16]`: one run per entry
      note(c, "workload.concurrency");
      if (c.size() == 0) d_.error("workload.concurrency", "must list at least one concurrency");
      for (size_t i = 0; i < c.size(); ++i) {
        int v = 0;
        if (read_int(c[i], index("workload.concurrency", i), v)) w.concurrencies.push_back(v);
      }
      if (!w.concurrencies.empty()) w.concurrency = w.concurrencies.front();
    } else {
      read_int(c, "workload.concurrency", w.concurrency);
    }
  } else if (mode == "trace") {
    w.mode = LoadMode::trace;
    read_path(n["trace"], "workload.trace", w.trace);
  } else if (defined(n["arrival"])) {
    arrival(n["arrival"], rate_given);
  }
  if (defined(n["trace_speed"])) {
    if (w.mode != LoadMode::trace) {
      note(n["trace_speed"], "workload.trace_speed");
      d_.error_at("workload.trace_speed", "workload.trace_speed applies to a trace replay (workload.trace)");
    } else {
      read_double(n["trace_speed"], "workload.trace_speed", w.trace_speed);
    }
  }
  if (defined(n["tokenizer"])) read_path(n["tokenizer"], "workload.tokenizer", w.tokenizer);
  if (defined(n["repeat"])) read_int(n["repeat"], "workload.repeat", w.repeat);
  if (defined(n["prefix_groups"])) prefix_groups(n["prefix_groups"]);
  if (defined(n["lora"])) parse_lora_section(n["lora"], ov_, s_, d_);  // scenario_parse_lora.cpp
  if (defined(n["structured_output"]))  // scenario_parse_structured.cpp
    parse_structured_output_section(n["structured_output"], ov_, s_, d_);
  if (defined(n["copied_spans"]) &&
      section(n["copied_spans"], "workload.copied_spans", {"fraction", "span_tokens", "edit_rate"})) {
    const YAML::Node& cs = n["copied_spans"];
    if (defined(cs["fraction"])) read_double(cs["fraction"], "workload.copied_spans.fraction", w.copied_spans.fraction);
    else d_.error_at("workload.copied_spans", "workload.copied_spans needs fraction: F (the share of requests, in (0, 1])");
    if (defined(cs["span_tokens"]))
      read_int(cs["span_tokens"], "workload.copied_spans.span_tokens", w.copied_spans.span_tokens);
    if (defined(cs["edit_rate"])) read_double(cs["edit_rate"], "workload.copied_spans.edit_rate", w.copied_spans.edit_rate);
  }
  if (defined(n["sessions"]) && section(n["sessions"], "workload.sessions", {"turns", "think_time_s"})) {
    const YAML::Node& ss = n["sessions"];
    if (defined(ss["turns"])) read_int(ss["turns"], "workload.sessions.turns", w.sessions.turns);
    else d_.error_at("workload.sessions", "workload.sessions needs turns: N (turns per session)");
    if (defined(ss["think_time_s"])) read_double(ss["think_time_s"], "workload.sessions.think_time_s", w.sessions.think_time_s);
  }
  if (defined(n["rates"])) {
    if (w.mode != LoadMode::open_loop) {
      note(n["rates"], "workload.rates");
      d_.error_at("workload.rates", std::string("workload.rates is for open-loop arrivals; with ") +
                                        (w.mode == LoadMode::trace ? "a trace the timestamps" : "concurrency the users") +
                                        " set the load");
    } else if (rate_given) {
      note(n["rates"], "workload.rates");
      d_.error_at("workload.rates", "workload: give arrival.rate (one rate) or rates (a sweep), not both");
    } else {
      parse_rates_section(n["rates"], ov_, s_, d_);  // scenario_parse_rates.cpp
    }
  }
  const bool has_n = defined(n["n_requests"]), has_d = defined(n["duration_s"]);
  if (has_n && has_d) {
    note(n["duration_s"], "workload.duration_s");
    d_.error_at("workload.duration_s", "workload: give n_requests or duration_s, not both");
  }
  if (has_n) read_int(n["n_requests"], "workload.n_requests", w.n_requests);
  else if (has_d) read_double(n["duration_s"], "workload.duration_s", w.duration_s);
  else if (w.mode != LoadMode::trace) w.n_requests = 100;
  if (defined(n["warmup_requests"])) read_int(n["warmup_requests"], "workload.warmup_requests", w.warmup_requests);
  if (defined(n["shared_prefix_tokens"]))
    read_int(n["shared_prefix_tokens"], "workload.shared_prefix_tokens", w.shared_prefix_tokens);
  w.prompt.dist = sharegpt_like(LengthRole::prompt);
  w.output.dist = sharegpt_like(LengthRole::output);
  for (const auto& [key, role, spec] : {std::tuple{"prompt_tokens", LengthRole::prompt, &w.prompt},
                                        std::tuple{"output_tokens", LengthRole::output, &w.output}}) {
    if (!defined(n[key])) continue;
    const std::string p = std::string("workload.") + key;
    if (w.mode == LoadMode::trace) {
      note(n[key], p);
      d_.error_at(p, p + " comes from the trace file; remove it or drop workload.trace");
    } else {
      length(n[key], p, role, *spec);
    }
  }
}

void Walker::arrival(const YAML::Node& n, bool& rate_given) {
  auto& a = s_.workload.arrival;
  const Options<ArrivalProcess> procs = {
      {"poisson", ArrivalProcess::poisson}, {"gamma", ArrivalProcess::gamma}, {"constant", ArrivalProcess::constant}};
  if (n.IsScalar()) {  // `arrival: poisson`
    read_enum(n, "workload.arrival.process", a.process, procs);
    return;
  }
  if (!section(n, "workload.arrival", {"process", "cv", "rate", "ramp_to", "max_concurrency"})) return;
  if (defined(n["ramp_to"])) read_double(n["ramp_to"], "workload.arrival.ramp_to", a.ramp_to);
  if (defined(n["max_concurrency"]))
    read_int(n["max_concurrency"], "workload.arrival.max_concurrency", a.max_concurrency);
  bool proc_ok = true;
  if (defined(n["process"])) proc_ok = read_enum(n["process"], "workload.arrival.process", a.process, procs);
  if (defined(n["cv"])) {
    if (proc_ok && a.process != ArrivalProcess::gamma) {
      note(n["cv"], "workload.arrival.cv");
      d_.error_at("workload.arrival.cv", std::string("workload.arrival.cv applies to process: gamma, not ") +
                                             to_string(a.process) +
                                             (a.process == ArrivalProcess::poisson ? " (its gaps have CV 1)" : " (CV 0)"));
    } else {
      read_double(n["cv"], "workload.arrival.cv", a.cv);
    }
  }
  if (defined(n["rate"])) {
    rate_given = true;
    double r = 0;
    if (read_double(n["rate"], "workload.arrival.rate", r)) {
      if (!(r > 0)) d_.error("workload.arrival.rate", "must be > 0 requests/s (got " + fmt_double(r) + ")");
      else s_.workload.rates = {r};
    }
  }
}

void Walker::prefix_groups(const YAML::Node& n) {
  const std::string path = "workload.prefix_groups";
  note(n, path);
  if (!n.IsSequence()) {
    d_.error(path, std::string("must be a list of {tokens: N, fraction: F} entries (got ") + type_name(n) + ")");
    return;
  }
  auto& out = s_.workload.prefix_groups;
  out.resize(n.size());
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = index(path, i);
    if (!section(n[i], p, {"tokens", "fraction"})) continue;
    for (const char* k : {"tokens", "fraction"})
      if (!defined(n[i][k])) d_.error_at(p, p + " needs " + k + ":");
    if (defined(n[i]["tokens"])) read_int(n[i]["tokens"], p + ".tokens", out[i].tokens);
    if (defined(n[i]["fraction"])) read_double(n[i]["fraction"], p + ".fraction", out[i].fraction);
  }
}

void Walker::length(const YAML::Node& n, const std::string& path, LengthRole role, LengthSpec& out) {
  LengthDist& d = out.dist;
  if (n.IsScalar()) {  // `output_tokens: 64` = fixed 64
    d = LengthDist{};
    d.role = role;
    read_int(n, path, d.value);
    return;
  }
  note(n, path);
  if (n.IsMap() && defined(n["dataset"])) {
    if (!check_map(n, path, {"dataset", "format"})) return;
    if (!read_path(n["dataset"], path + ".dataset", out.dataset)) return;
    const bool jsonl_ext = out.dataset.size() > 6 && out.dataset.compare(out.dataset.size() - 6, 6, ".jsonl") == 0;
    out.dataset_format = jsonl_ext ? DatasetFormat::jsonl : DatasetFormat::sharegpt;
    if (defined(n["format"]))
      read_enum(n["format"], path + ".format", out.dataset_format,
                Options<DatasetFormat>{{"sharegpt", DatasetFormat::sharegpt}, {"jsonl", DatasetFormat::jsonl}});
    return;
  }
  if (!n.IsMap() || !defined(n["dist"])) {
    d_.error_at(path, path + " must be a number (fixed length), {dist: fixed|uniform|normal|lognormal|sharegpt, ...} "
                             "or {dataset: FILE, format: sharegpt|jsonl} (got " + type_name(n) + ")");
    return;
  }
  LengthDistKind kind{};
  const std::vector<std::string> all = {"dist", "value", "min", "max", "mean", "std", "sigma"};
  if (!read_enum(n["dist"], path + ".dist", kind,
                 Options<LengthDistKind>{{"fixed", LengthDistKind::fixed},
                                         {"uniform", LengthDistKind::uniform},
                                         {"normal", LengthDistKind::normal},
                                         {"lognormal", LengthDistKind::lognormal},
                                         {"sharegpt", LengthDistKind::sharegpt}})) {
    check_map(n, path, all);
    return;
  }
  std::vector<std::string> keys, required;
  switch (kind) {
    case LengthDistKind::fixed: keys = {"dist", "value"}, required = {"value"}; break;
    case LengthDistKind::uniform: keys = {"dist", "min", "max"}, required = {"min", "max"}; break;
    case LengthDistKind::normal: keys = {"dist", "mean", "std", "min", "max"}, required = {"mean", "std"}; break;
    case LengthDistKind::lognormal: keys = {"dist", "mean", "std", "sigma", "min", "max"}, required = {"mean"}; break;
    case LengthDistKind::sharegpt: keys = {"dist", "min", "max"}; break;
  }
  d = kind == LengthDistKind::sharegpt ? sharegpt_like(role) : LengthDist{};
  d.kind = kind;
  d.role = role;
  if (!check_map(n, path, keys)) return;
  for (const auto& k : required)
    if (!defined(n[k])) d_.error_at(path, path + " with dist: " + to_string(kind) + " needs " + k + ":");
  if (kind == LengthDistKind::lognormal && defined(n["std"]) == defined(n["sigma"]))
    d_.error_at(path, path + " with dist: lognormal needs exactly one of std: (of the lengths) or sigma: (log-space)");
  if (defined(n["value"])) read_int(n["value"], path + ".value", d.value);
  if (defined(n["min"])) read_int(n["min"], path + ".min", d.min);
  if (defined(n["max"])) read_int(n["max"], path + ".max", d.max);
  if (defined(n["mean"])) read_double(n["mean"], path + ".mean", d.mean);
  if (defined(n["std"])) read_double(n["std"], path + ".std", d.std);
  if (defined(n["sigma"])) read_double(n["sigma"], path + ".sigma", d.sigma);
}

}  // namespace

void parse_scenario(const YAML::Node& root, const std::vector<AppliedOverride>& overrides, Scenario& out,
                    Diagnostics& diag) {
  Walker(overrides, out, diag).root(root);
}

}  // namespace servelab
