// report.html: one self-contained page (inline CSS, the tables, the SVG figures inlined).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "analysis/report.h"
#include "analysis/report_table.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {


void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

/// The <svg> element of a gnuplot SVG file ready to inline: the XML prolog and DOCTYPE dropped,
/// every id prefixed so several figures on one page do not share ids ("gpPt0" → "fig2_gpPt0").
std::string inline_svg(const std::string& text, const std::string& prefix) {
  const auto start = text.find("<svg");
  if (start == std::string::npos) return "";
  std::string svg = text.substr(start);
  std::set<std::string> ids;
  for (const char quote : {'"', '\''}) {
    const std::string key = std::string(" id=") + quote;
    for (auto p = svg.find(key); p != std::string::npos; p = svg.find(key, p + 1)) {
      const auto b = p + key.size();
      const auto e = svg.find(quote, b);
      if (e != std::string::npos) ids.insert(svg.substr(b, e - b));
    }
  }
  for (const auto& id : ids) {
    for (const char* q : {"\"", "'"}) {
      replace_all(svg, std::string(" id=") + q + id + q, std::string(" id=") + q + prefix + id + q);
      replace_all(svg, std::string("=") + q + "#" + id + q, std::string("=") + q + "#" + prefix + id + q);
    }
    replace_all(svg, "url(#" + id + ")", "url(#" + prefix + id + ")");
  }
  return svg;
}

void html_table(std::ostringstream& h, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows, std::size_t n_text_cols) {
  h << "<table>\n<thead><tr>";
  for (const auto& c : header) h << "<th>" << xml_escape(c) << "</th>";
  h << "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    h << "<tr>";
    for (std::size_t c = 0; c < row.size(); ++c)
      h << (c < n_text_cols ? "<td>" : "<td class=\"num\">") << xml_escape(row[c]) << "</td>";
    h << "</tr>\n";
  }
  h << "</tbody></table>\n";
}

constexpr const char* kCss = R"css(
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #1a1a1a; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
ul.meta { color: #444; padding-left: 1.2em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #d0d0d0; padding: 0.3em 0.6em; }
th { background: #f3f3f3; text-align: center; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
.pass { color: #1b7a1b; font-weight: 600; }
.fail { color: #b00020; font-weight: 700; }
.warn { color: #8a5a00; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-weight: 600; margin-bottom: 0.3em; }
)css";

}  // namespace

std::string report_html(const std::string& dir, const Summary& s, const std::vector<GateResult>& gates,
                        const std::vector<std::string>& warnings, const std::vector<PlotFile>& plots) {
  std::ostringstream h;
  const std::string name = s.scenario.name.empty() ? "(unnamed scenario)" : s.scenario.name;
  const auto& e = s.environment;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>servelab report: " << xml_escape(name) << "</title>\n<style>" << kCss
    << "</style>\n</head>\n<body>\n";
  h << "<h1>servelab report: " << xml_escape(name) << "</h1>\n<ul class=\"meta\">\n";
  h << "<li>scenario <code>" << xml_escape(s.scenario.file) << "</code>, seed " << s.scenario.seed
    << "</li>\n";
  h << "<li>" << xml_escape(e.device.empty() ? "unknown device" : e.device);
  if (!e.cpu_model.empty()) h << " · " << xml_escape(e.cpu_model) << " (" << e.n_cores << " threads)";
  h << " · commit <code>" << xml_escape(e.commit.empty() ? "unknown" : e.commit.substr(0, 12))
    << "</code> · servelab " << xml_escape(e.servelab_version) << " · measured " << xml_escape(e.date)
    << "</li>\n";
  for (const auto& line : method_lines(s)) h << "<li>" << xml_escape(line) << "</li>\n";
  h << "<li>latencies count from each request's intended send time; throughput over first arrival → "
       "last finish, warm-up excluded</li>\n"
       "<li>TTFT = queue (arrival → first admitted to a batch) + prefill (admitted → first token)</li>\n</ul>\n";

  const auto order = table_order(s);
  std::vector<std::vector<std::string>> rows;
  for (const RunSummary* r : order) rows.push_back(run_table_cells(*r));
  h << "<h2>Runs</h2>\n";
  html_table(h, run_table_header(), rows, 1);
  for (const auto& [title, t] : {std::pair{"Repeats", repeats_table(s)}, std::pair{"Latency percentiles", percentiles_table(s)},
                                 std::pair{"SLO objectives per run", slo_objectives_table(s)},
                                 std::pair{"Structured output", structured_output_table(s)},
                                 std::pair{"Speculative decoding", spec_decode_table(s)},
                                 std::pair{"Multi-LoRA, per adapter", lora_table(s)},
                                 std::pair{"Multi-LoRA, adapter loads", lora_loads_table(s)},
                                 std::pair{"Roofline efficiency", roofline_table(s)},
                                 std::pair{"Storage formats: what they buy and what they cost in accuracy", formats_table(s)}}) {
    if (t.empty()) continue;
    h << "<h2>" << title << "</h2>\n";
    html_table(h, t.header, t.rows, 2);
  }
  rows.clear();
  for (const RunSummary* r : order) rows.push_back(kv_table_cells(*r));
  h << "<h2>KV cache</h2>\n<p>Shares of the KV arena, mean over steps where requests hold memory; "
       "utilization = stored / (stored + reserved + internal fragmentation).</p>\n";
  html_table(h, kv_table_header(), rows, 1);

  h << "<h2>Gates</h2>\n";
  if (gates.empty()) {
    h << "<p>No gates configured.</p>\n";
  } else {
    h << "<table>\n<thead><tr><th>result</th><th>gate</th><th>detail</th></tr></thead>\n<tbody>\n";
    for (const auto& g : gates)
      h << "<tr><td class=\"" << (g.passed ? "pass\">PASS" : "fail\">FAIL") << "</td><td>"
        << xml_escape(g.name) << "</td><td>" << xml_escape(g.message) << "</td></tr>\n";
    h << "</tbody></table>\n";
  }
  if (!warnings.empty()) {
    h << "<h2>Warnings</h2>\n<ul>\n";
    for (const auto& w : warnings) h << "<li class=\"warn\">" << xml_escape(w) << "</li>\n";
    h << "</ul>\n";
  }
  if (!plots.empty()) {
    h << "<h2>Plots</h2>\n";
    int n = 0;
    for (const auto& p : plots) {
      std::ifstream in(std::filesystem::path(dir) / p.svg, std::ios::binary);
      if (!in) continue;
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::string svg = inline_svg(text, "fig" + std::to_string(++n) + "_");
      if (svg.empty()) continue;
      h << "<figure>\n<figcaption>" << xml_escape(p.title) << "</figcaption>\n" << svg << "\n</figure>\n";
    }
  }
  h << "</body>\n</html>\n";
  return h.str();
}

}  // namespace servelab::analysis
