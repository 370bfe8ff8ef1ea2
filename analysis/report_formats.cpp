// The storage formats table of report.md and report.html: each strategy's weight and KV formats
// beside what they bought (capacity, peak goodput) and what they cost in accuracy.
#include <algorithm>
#include <cmath>

#include "analysis/plots.h"
#include "analysis/report_table.h"
#include "analysis/text_format.h"
#include "loadgen/records/rate.h"

namespace servelab::analysis {

TextRows formats_table(const Summary& s) {
  TextRows t;
  bool any = false;
  for (const auto& r : s.runs) any = any || r.info.accuracy.has_value();
  if (!any) return t;
  t.header = {"strategy", "weights", "KV cache", "capacity (req/s)", "peak goodput (tok/s)", "Linear bytes/weight",
              "positions", "top-1 agreement", "mean KL (nats)", "max KL", "max |Δ logit|", "rel. logit error"};
  const auto capacities = strategy_capacities(s);
  for (const std::string& name : s.strategies()) {
    const FormatAccuracy* a = nullptr;
    double peak_goodput = kNaN;
    for (const auto& r : s.runs) {
      if (r.info.strategy_name() != name) continue;
      if (!a && r.info.accuracy) a = &*r.info.accuracy;
      if (!std::isnan(r.metrics.goodput)) peak_goodput = std::isnan(peak_goodput) ? r.metrics.goodput : std::max(peak_goodput, r.metrics.goodput);
    }
    double cap = kNaN;
    for (const auto& [n, c] : capacities)
      if (n == name) cap = c;
    std::vector<std::string> row = {name};
    if (!a) {
      row.insert(row.end(), {"the model's", "the model's"});
    } else {
      row.insert(row.end(), {a->weights, a->kv_cache_dtype});
    }
    row.push_back(std::isnan(cap) ? std::string("none") : format_rate(cap));
    row.push_back(format_number(peak_goodput));
    if (!a) {
      row.insert(row.end(), {"-", "-", "reference", "-", "-", "-", "-"});
    } else if (!a->measured()) {
      row.insert(row.end(), {format_number(a->linear_bytes_per_weight), "-", "not measured: " + a->note, "-", "-", "-", "-"});
    } else {
      row.insert(row.end(), {format_number(a->linear_bytes_per_weight), std::to_string(a->positions),
                             format_share(a->top1_agreement), format_plain(a->mean_kl), format_plain(a->max_kl),
                             format_plain(a->max_logit_error), format_plain(a->rel_logit_error)});
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace servelab::analysis
