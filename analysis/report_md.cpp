// report.md and results.csv.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "analysis/json_format.h"
#include "analysis/report.h"
#include "analysis/report_table.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

void md_table(std::ostringstream& md, const std::vector<std::string>& header,
              const std::vector<std::vector<std::string>>& rows, std::size_t n_text_cols) {
  md << "|";
  for (const auto& h : header) md << " " << md_escape(h) << " |";
  md << "\n|";
  for (std::size_t c = 0; c < header.size(); ++c) md << (c < n_text_cols ? "---|" : "---:|");
  md << "\n";
  for (const auto& row : rows) {
    md << "|";
    for (const auto& cell : row) md << " " << md_escape(cell) << " |";
    md << "\n";
  }
}

/// A CSV number: summary.json's rounding, printed without trailing zeros; empty when missing.
std::string csv_number(double x) {
  if (!std::isfinite(x)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", round6(x));
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string report_markdown(const Summary& s, const std::vector<GateResult>& gates,
                            const std::vector<std::string>& warnings, const std::vector<PlotFile>& plots) {
  std::ostringstream md;
  const auto& e = s.environment;
  md << "# servelab report: " << md_escape(s.scenario.name.empty() ? "(unnamed scenario)" : s.scenario.name)
     << "\n\n";
  md << "- scenario: `" << s.scenario.file << "` (seed " << s.scenario.seed << ")\n";
  md << "- environment: " << md_escape(e.device.empty() ? "unknown device" : e.device);
  if (!e.cpu_model.empty()) md << " · " << md_escape(e.cpu_model) << " (" << e.n_cores << " threads)";
  md << " · commit `" << (e.commit.empty() ? "unknown" : e.commit.substr(0, 12)) << "`";
  md << " · servelab " << (e.servelab_version.empty() ? "?" : e.servelab_version);
  md << " · measured " << (e.date.empty() ? "?" : e.date) << "\n";
  for (const auto& line : method_lines(s)) md << "- " << md_escape(line) << "\n";
  md << "- latencies count from each request's intended send time; throughput over first arrival → "
        "last finish, warm-up excluded\n";
  md << "- TTFT = queue (arrival → first admitted to a batch) + prefill (admitted → first token)\n\n";

  md << "## Runs\n\n";
  std::vector<std::vector<std::string>> rows;
  const auto order = table_order(s);
  for (const RunSummary* r : order) rows.push_back(run_table_cells(*r));
  md_table(md, run_table_header(), rows, 1);

  for (const auto& [title, t] : {std::pair{"Repeats", repeats_table(s)}, std::pair{"Latency percentiles", percentiles_table(s)},
                                 std::pair{"SLO objectives per run", slo_objectives_table(s)},
                                 std::pair{"Structured output", structured_output_table(s)},
                                 std::pair{"Speculative decoding", spec_decode_table(s)},
                                 std::pair{"Multi-LoRA, per adapter", lora_table(s)},
                                 std::pair{"Multi-LoRA, adapter loads", lora_loads_table(s)},
                                 std::pair{"Roofline efficiency", roofline_table(s)},
                                 std::pair{"Storage formats: what they buy and what they cost in accuracy", formats_table(s)}}) {
    if (t.empty()) continue;
    md << "\n## " << title << "\n\n";
    md_table(md, t.header, t.rows, 2);
  }

  md << "\n## KV cache\n\nShares of the KV arena, mean over steps where requests hold memory; "
        "utilization = stored / (stored + reserved + internal fragmentation).\n\n";
  rows.clear();
  for (const RunSummary* r : order) rows.push_back(kv_table_cells(*r));
  md_table(md, kv_table_header(), rows, 1);

  md << "\n## Gates\n\n";
  if (gates.empty()) {
    md << "No gates configured.\n";
  } else {
    rows.clear();
    std::size_t n_failed = 0;
    for (const auto& g : gates) {
      rows.push_back({g.passed ? "PASS" : "**FAIL**", g.name, g.message});
      n_failed += g.passed ? 0 : 1;
    }
    md_table(md, {"result", "gate", "detail"}, rows, 3);
    md << "\n"
       << (n_failed
               ? "**" + std::to_string(n_failed) + " of " + std::to_string(gates.size()) + " gates failed.**"
               : "All " + std::to_string(gates.size()) + " gates passed.")
       << "\n";
  }
  if (!warnings.empty()) {
    md << "\n## Warnings\n\n";
    for (const auto& w : warnings) md << "- " << md_escape(w) << "\n";
  }
  if (!plots.empty()) {
    md << "\n## Plots\n\n";
    for (const auto& p : plots) md << "![" << md_escape(p.title) << "](" << p.svg << ")\n\n";
  }
  return md.str();
}

std::string results_csv(const Summary& s) {
  std::ostringstream csv;
  csv << "label,strategy,batching,kv,backend,rate";
  for (const auto& c : run_columns()) csv << "," << c.csv_key;
  csv << ",request_throughput_rps,request_goodput_rps,kv_utilization_max,kv_peak_use,mode,concurrency\n";
  for (const RunSummary* r : table_order(s)) {
    csv << csv_text(r->info.label) << "," << csv_text(r->info.strategy_name()) << ","
        << csv_text(r->info.batching) << "," << csv_text(r->info.kv) << "," << csv_text(r->info.backend)
        << "," << (std::isinf(r->info.rate) ? std::string("inf") : csv_number(r->info.rate));
    for (const auto& c : run_columns()) csv << "," << csv_number(c.value(*r));
    csv << "," << csv_number(r->metrics.request_throughput) << "," << csv_number(r->metrics.request_goodput) << ","
        << csv_number(r->metrics.kv.utilization_max) << "," << csv_number(r->metrics.kv.peak_use) << ","
        << to_string(r->info.mode) << ","
        << (r->info.mode == RunMode::closed ? std::to_string(r->info.concurrency) : std::string()) << "\n";
  }
  return csv.str();
}

}  // namespace servelab::analysis
