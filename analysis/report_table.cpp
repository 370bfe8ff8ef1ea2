#include "analysis/report_table.h"

#include <algorithm>
#include <cmath>

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

}  // namespace servelab::analysis
