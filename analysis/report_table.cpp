#include "analysis/report_table.h"

#include <algorithm>
#include <cmath>

#include "analysis/plots.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {

std::string cell(CellKind kind, double v) {
  switch (kind) {
    case CellKind::count:
      return std::isnan(v) ? "-" : std::to_string(static_cast<long long>(v));
    case CellKind::number:
      return format_number(v);
    case CellKind::share:
      return format_share(v);
  }
  return "";
}

}  // namespace

const std::vector<RunColumn>& run_columns() {
  static const std::vector<RunColumn> cols = {
      {"n", "n", "n_requests", CellKind::count,
       [](const RunSummary& r) { return static_cast<double>(r.metrics.n_requests); }},
      {"failed", "fail", "n_failed", CellKind::count,
       [](const RunSummary& r) { return static_cast<double>(r.metrics.n_failed); }},
      {"TTFT p50 (ms)", "TTFT p50", "ttft_p50_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.ttft_ms.p50; }},
      {"TTFT p99 (ms)", "p99", "ttft_p99_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.ttft_ms.p99; }},
      {"queue p50 (ms)", "queue", "queue_p50_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.queue_ms.p50; }},
      {"prefill p50 (ms)", "prefill", "prefill_p50_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.prefill_ms.p50; }},
      {"TPOT p50 (ms)", "TPOT p50", "tpot_p50_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.tpot_ms.p50; }},
      {"TPOT p99 (ms)", "p99", "tpot_p99_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.tpot_ms.p99; }},
      {"ITL p50 (ms)", "ITL p50", "itl_p50_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.itl_ms.p50; }},
      {"ITL p99 (ms)", "p99", "itl_p99_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.itl_ms.p99; }},
      {"E2E p50 (ms)", "E2E p50", "e2e_p50_ms", CellKind::number,
       [](const RunSummary& r) { return r.metrics.e2e_ms.p50; }},
      {"out tok/s", "out tok/s", "output_throughput_tok_s", CellKind::number,
       [](const RunSummary& r) { return r.metrics.output_throughput; }},
      {"goodput tok/s", "goodput", "goodput_tok_s", CellKind::number,
       [](const RunSummary& r) { return r.metrics.goodput; }},
      {"SLO attain", "attain", "slo_attainment", CellKind::share,
       [](const RunSummary& r) { return r.metrics.slo_attainment; }},
      {"KV util", "KV util", "kv_utilization_mean", CellKind::share,
       [](const RunSummary& r) { return r.metrics.kv.utilization_mean; }},
  };
  return cols;
}

std::vector<const RunSummary*> table_order(const Summary& s) {
  const auto strategies = s.strategies();
  auto rank = [&](const RunSummary* r) {
    return std::find(strategies.begin(), strategies.end(), r->info.strategy_name()) - strategies.begin();
  };
  auto rate_key = [](const RunSummary* r) {
    return std::isnan(r->info.rate) ? HUGE_VAL : r->info.rate;  // unknown rates last
  };
  std::vector<const RunSummary*> out;
  for (const auto& r : s.runs) out.push_back(&r);
  std::stable_sort(out.begin(), out.end(), [&](const RunSummary* a, const RunSummary* b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return rate_key(a) < rate_key(b);
  });
  return out;
}

std::vector<std::string> run_table_header(bool compact) {
  std::vector<std::string> h = {"strategy", compact ? "rate" : "rate (req/s)"};
  for (const auto& c : run_columns()) h.push_back(compact ? c.short_header : c.header);
  return h;
}

std::vector<std::string> run_table_cells(const RunSummary& r) {
  std::vector<std::string> cells = {r.info.strategy_name(), format_run_rate(r.info)};
  for (const auto& c : run_columns()) cells.push_back(cell(c.kind, c.value(r)));
  return cells;
}

std::vector<std::string> kv_table_header() {
  return {"strategy",      "rate (req/s)",  "KV util mean", "KV util max", "stored", "reserved",
          "internal frag", "external frag", "free",         "peak use",    "steps"};
}

std::vector<std::string> kv_table_cells(const RunSummary& r) {
  const auto& kv = r.metrics.kv;
  return {r.info.strategy_name(),
          format_run_rate(r.info),
          format_share(kv.utilization_mean),
          format_share(kv.utilization_max),
          format_share(kv.breakdown.stored),
          format_share(kv.breakdown.reserved),
          format_share(kv.breakdown.internal_frag),
          format_share(kv.breakdown.external_frag),
          format_share(kv.breakdown.free),
          format_share(kv.peak_use),
          std::to_string(kv.n_steps)};
}

TextRows repeats_table(const Summary& s) {
  TextRows t;
  const std::vector<std::pair<std::string, std::string>> cols = {
      {"ttft_ms.p50", "TTFT p50 (ms)"},          {"ttft_ms.p99", "TTFT p99 (ms)"},
      {"tpot_ms.p99", "TPOT p99 (ms)"},          {"output_throughput_tok_s", "out tok/s"},
      {"goodput_tok_s", "goodput tok/s"},        {"slo_attainment", "SLO attain"}};
  t.header = {"strategy", "rate (req/s)", "repeats"};
  for (const auto& [_, h] : cols) t.header.push_back(h + " mean ± 95% CI (sd, min)");
  for (const RunSummary* r : table_order(s)) {
    if (r->repetitions.empty()) continue;
    std::vector<std::string> row = {r->info.strategy_name(), format_run_rate(r->info), std::to_string(r->repetitions.size())};
    for (const auto& [path, _] : cols) {
      const MetricStats* st = r->stat(path);
      if (!st || st->n == 0) {
        row.push_back("-");
        continue;
      }
      std::string c = format_number(st->mean);
      if (std::isfinite(st->ci95_hi)) c += " ± " + format_number(st->ci95_hi - st->mean);
      c += " (sd " + format_number(st->std) + ", min " + format_number(st->min) + ")";
      row.push_back(c);
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextRows percentiles_table(const Summary& s) {
  TextRows t;
  if (s.options.percentiles.empty()) return t;
  t.header = {"strategy", "rate (req/s)"};
  const std::pair<const char*, Distribution RunMetrics::*> ds[] = {
      {"TTFT", &RunMetrics::ttft_ms}, {"TPOT", &RunMetrics::tpot_ms}, {"ITL", &RunMetrics::itl_ms}, {"E2E", &RunMetrics::e2e_ms}};
  for (const auto& [name, _] : ds)
    for (double q : s.options.percentiles) t.header.push_back(std::string(name) + " " + percentile_key(q) + " (ms)");
  for (const RunSummary* r : table_order(s)) {
    std::vector<std::string> row = {r->info.strategy_name(), format_run_rate(r->info)};
    for (const auto& [_, d] : ds)
      for (double q : s.options.percentiles) row.push_back(format_number((r->metrics.*d).at(q)));
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextRows slo_objectives_table(const Summary& s) {
  TextRows t;
  if (s.slo.percentiles.empty()) return t;
  t.header = {"strategy", "rate (req/s)"};
  for (const auto& p : s.slo.percentiles) t.header.push_back(p.name());
  t.header.push_back("meets SLO");
  for (const RunSummary* r : table_order(s)) {
    std::vector<std::string> row = {r->info.strategy_name(), format_run_rate(r->info)};
    for (std::size_t i = 0; i < s.slo.percentiles.size(); ++i) {
      if (i >= r->metrics.slo_percentiles.size()) {
        row.push_back("-");
        continue;
      }
      const auto& p = r->metrics.slo_percentiles[i];
      row.push_back(format_number(p.value_ms) + (p.met ? " ok" : " MISSED"));
    }
    row.push_back(r->metrics.meets_slo(s.slo) ? "yes" : "no");
    t.rows.push_back(std::move(row));
  }
  return t;
}

TextRows structured_output_table(const Summary& s) {
  TextRows t;
  t.header = {"strategy", "rate (req/s)", "constrained", "valid", "validity", "TTFT p50 (ms) constrained / not",
              "TPOT p50 (ms) constrained / not", "TPOT cost", "decode tok/s constrained / not", "most frequent invalid"};
  auto pair = [](double a, double b) { return format_number(a) + " / " + format_number(b); };
  for (const RunSummary* r : table_order(s)) {
    if (!r->structured) continue;
    const StructuredStats& st = *r->structured;
    t.rows.push_back({r->info.strategy_name(), format_run_rate(r->info), std::to_string(st.n_constrained),
                      std::to_string(st.n_valid), format_share(st.validity_rate),
                      pair(st.constrained.ttft_p50_ms, st.unconstrained.ttft_p50_ms),
                      pair(st.constrained.tpot_p50_ms, st.unconstrained.tpot_p50_ms), format_change_pct(st.tpot_cost_pct),
                      pair(st.constrained.decode_tok_s_mean, st.unconstrained.decode_tok_s_mean),
                      st.invalid_reasons.empty() ? "-"
                                                 : st.invalid_reasons.front().first + " (" +
                                                       std::to_string(st.invalid_reasons.front().second) + ")"});
  }
  return t;
}

TextRows lora_table(const Summary& s, size_t max_adapters) {
  TextRows t;
  t.header = {"strategy", "rate (req/s)", "adapter", "requests", "failed", "TTFT p50 (ms)", "TTFT p99 (ms)",
              "queue p50 (ms)", "TPOT p50 (ms)", "E2E p50 (ms)", "output tok/s", "SLO attainment"};
  for (const RunSummary* r : table_order(s)) {
    if (r->by_lora.empty()) continue;
    std::vector<const std::pair<std::string, RunMetrics>*> order;
    for (const auto& a : r->by_lora) order.push_back(&a);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto* a, const auto* b) { return a->second.n_requests > b->second.n_requests; });
    for (size_t i = 0; i < order.size() && i < max_adapters; ++i) {
      const auto& [name, m] = *order[i];
      t.rows.push_back({r->info.strategy_name(), format_run_rate(r->info), name.empty() ? "(base)" : name,
                        std::to_string(m.n_requests), std::to_string(m.n_failed), format_number(m.ttft_ms.p50),
                        format_number(m.ttft_ms.p99), format_number(m.queue_ms.p50), format_number(m.tpot_ms.p50),
                        format_number(m.e2e_ms.p50), format_number(m.output_throughput), format_share(m.slo_attainment)});
    }
    if (order.size() > max_adapters) {
      size_t n = 0;
      for (size_t i = max_adapters; i < order.size(); ++i) n += order[i]->second.n_requests;
      t.rows.push_back({r->info.strategy_name(), format_run_rate(r->info),
                        std::to_string(order.size() - max_adapters) + " more adapters (summary.json)", std::to_string(n),
                        "", "", "", "", "", "", "", ""});
    }
  }
  return t;
}

TextRows lora_loads_table(const Summary& s) {
  TextRows t;
  t.header = {"strategy",          "rate (req/s)",   "adapters loaded", "steps with a load", "their p50 (ms)",
              "their time (s)", "steps a request waited for its adapter's packing", "their time (s)"};
  for (const RunSummary* r : table_order(s))
    if (r->lora_loads)
      t.rows.push_back({r->info.strategy_name(), format_run_rate(r->info), std::to_string(r->lora_loads->n_loads),
                        std::to_string(r->lora_loads->n_steps), format_number(r->lora_loads->step_p50_ms),
                        format_number(r->lora_loads->step_s), std::to_string(r->lora_loads->wait_steps),
                        format_number(r->lora_loads->wait_s)});
  return t;
}

TextRows spec_decode_table(const Summary& s) {
  TextRows t;
  t.header = {"strategy", "rate (req/s)", "drafts", "drafted", "accepted", "acceptance", "mean acceptance length",
              "accepted by position", "counted by"};
  for (const RunSummary* r : table_order(s)) {
    const KvMetrics& kv = r->metrics.kv;
    if (kv.spec_num_drafts <= 0) continue;
    std::string per_pos;  // each position's share of the drafts that reached it: "0.91 0.80 0.62"
    for (size_t p = 0; p < kv.spec_num_accepted_tokens_per_pos.size(); ++p)
      per_pos += (p ? " " : "") + format_number(double(kv.spec_num_accepted_tokens_per_pos[p]) / double(kv.spec_num_drafts));
    t.rows.push_back({r->info.strategy_name(), format_run_rate(r->info), std::to_string(kv.spec_num_drafts),
                      std::to_string(kv.spec_num_draft_tokens), std::to_string(kv.spec_num_accepted_tokens),
                      format_share(kv.spec_num_draft_tokens > 0
                                       ? double(kv.spec_num_accepted_tokens) / double(kv.spec_num_draft_tokens)
                                       : NAN),
                      format_number(1.0 + double(kv.spec_num_accepted_tokens) / double(kv.spec_num_drafts)),
                      per_pos.empty() ? "-" : per_pos, kv.spec_from_server ? "server /metrics" : "engine steps"});
  }
  return t;
}

TextRows roofline_table(const Summary& s) {
  TextRows t;
  bool any = false;
  for (const auto& r : s.runs) any = any || r.roofline.has_value();
  if (!any) return t;
  t.header = {"strategy", "rate (req/s)", "efficiency", "prefill", "decode", "mixed", "roofline (s)", "measured (s)",
              "host pauses (s)"};
  auto share = [](const RooflineShare& c) {
    if (c.n_steps == 0) return std::string("-");
    return format_number(c.efficiency()) + " (" + std::to_string(c.n_steps) + " steps)";
  };
  for (const RunSummary* r : table_order(s)) {
    std::vector<std::string> row = {r->info.strategy_name(), format_run_rate(r->info),
                                    format_efficiency(r->roofline, r->info.backend)};
    if (r->roofline) {
      for (const RooflineShare* c : {&r->roofline->prefill, &r->roofline->decode, &r->roofline->mixed}) row.push_back(share(*c));
      row.push_back(format_number(r->roofline->overall.roofline_s));
      row.push_back(format_number(r->roofline->overall.measured_s));
      row.push_back(format_host_pauses(r->roofline->host_pauses));
    } else {
      row.insert(row.end(), 6, "-");
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::vector<std::string> method_lines(const Summary& s) {
  std::vector<std::string> out;
  out.push_back("SLO: " + s.slo.describe() + "; target attainment " + format_share(s.slo.attainment) +
                " (goodput_tok_s and request_goodput_rps count the requests meeting the per-request SLO)");
  out.push_back("measurement window: " + s.options.window.describe() + ", applied to every metric");
  for (const auto& r : s.runs)
    if (r.info.config.is_object() && r.info.config.contains("imported_from"))
      out.push_back("run " + r.info.label + " imported from " + r.info.config["imported_from"].get<std::string>() +
                    " (" + r.info.config.value("tool", std::string("?")) +
                    "): only the figures that tool reported; its TPOT is its per-request mean gap after the first "
                    "token (docs/importing-results.md)");
  int n_rep = 1;
  for (const auto& r : s.runs) n_rep = std::max(n_rep, r.info.repeats);
  if (n_rep > 1)
    out.push_back("each point run " + std::to_string(n_rep) +
                  " times with derived seeds; tables show the mean, summary.json each repetition and 95% "
                  "Student-t intervals");
  std::string caps;
  for (const auto& [name, cap] : strategy_capacities(s)) {
    bool measured = false;  // another tool's runs have no per-request SLO figures: no capacity
    for (const auto& r : s.runs)
      measured = measured || (r.info.strategy_name() == name &&
                              !(r.info.config.is_object() && r.info.config.contains("imported_from")));
    if (!measured) continue;
    caps += (caps.empty() ? "" : ", ") + name + " " + (std::isnan(cap) ? std::string("none") : format_rate(cap) + " req/s");
  }
  if (!caps.empty()) out.push_back("capacity (highest rate meeting the SLO): " + caps);
  std::vector<std::string> ceilings;  // one line per distinct set (a merged report may hold several)
  for (const auto& r : s.runs) {
    if (!r.roofline || !r.roofline->ceilings) continue;
    const RooflineCeilings& c = *r.roofline->ceilings;
    const std::string line = "roofline efficiency = sum of each step's max(bytes / copy bandwidth, FLOPs / GEMM peak) over "
                             "the sum of measured step times; ceilings " + format_ceilings(c) +
                             (c.detail.empty() ? "" : ", " + c.detail);
    if (std::find(ceilings.begin(), ceilings.end(), line) == ceilings.end()) ceilings.push_back(line);
  }
  out.insert(out.end(), ceilings.begin(), ceilings.end());
  return out;
}

}  // namespace servelab::analysis
