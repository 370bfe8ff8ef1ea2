// The `slo:` and `report:` sections of a scenario (issue 12: per-request and percentile SLOs,
// extra percentiles, the steady-state window, the CDF plots' rate). Range checks are
// Scenario::validate's (scenario_validate.cpp).
#include <cmath>

#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class SloReportWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void slo(const YAML::Node& n) {
    if (!section(n, "slo", {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "attainment", "percentiles"})) return;
    if (defined(n["ttft_ms"])) read_double(n["ttft_ms"], "slo.ttft_ms", s_.slo.ttft_ms);
    if (defined(n["tpot_ms"])) read_double(n["tpot_ms"], "slo.tpot_ms", s_.slo.tpot_ms);
    if (defined(n["itl_ms"])) read_double(n["itl_ms"], "slo.itl_ms", s_.slo.itl_ms);
    if (defined(n["e2e_ms"])) read_double(n["e2e_ms"], "slo.e2e_ms", s_.slo.e2e_ms);
    if (defined(n["attainment"])) read_double(n["attainment"], "slo.attainment", s_.slo.attainment);
    if (!defined(n["percentiles"])) return;
    const YAML::Node& ps = n["percentiles"];
    note(ps, "slo.percentiles");
    if (!ps.IsSequence()) {
      d_.error("slo.percentiles", std::string("must be a list of {metric, percentile, max_ms} (got ") + type_name(ps) + ")");
      return;
    }
    for (size_t i = 0; i < ps.size(); ++i) {
      const std::string p = index("slo.percentiles", i);
      PercentileSloSpec e;
      if (section(ps[i], p, {"metric", "percentile", "max_ms"})) {
        for (const char* k : {"metric", "percentile", "max_ms"})
          if (!defined(ps[i][k])) d_.error_at(p, p + " needs " + k + ": (e.g. {metric: ttft, percentile: 99, max_ms: 2000})");
        if (defined(ps[i]["metric"])) read_string(ps[i]["metric"], p + ".metric", e.metric);
        if (defined(ps[i]["percentile"])) read_double(ps[i]["percentile"], p + ".percentile", e.percentile);
        if (defined(ps[i]["max_ms"])) read_double(ps[i]["max_ms"], p + ".max_ms", e.max_ms);
      }
      s_.slo.percentiles.push_back(e);
    }
  }

  void report(const YAML::Node& n) {
    if (!section(n, "report", {"percentiles", "window", "cdf_rate", "accuracy_positions"})) return;
    auto& r = s_.report;
    if (defined(n["cdf_rate"])) read_double(n["cdf_rate"], "report.cdf_rate", r.cdf_rate);
    if (defined(n["accuracy_positions"])) read_int(n["accuracy_positions"], "report.accuracy_positions", r.accuracy_positions);
    if (defined(n["percentiles"])) {
      const YAML::Node& ps = n["percentiles"];
      note(ps, "report.percentiles");
      if (!ps.IsSequence()) {
        d_.error("report.percentiles", std::string("must be a list of numbers in [0, 100] (got ") + type_name(ps) + ")");
      } else {
        for (size_t i = 0; i < ps.size(); ++i) {
          double q = 0;
          if (read_double(ps[i], index("report.percentiles", i), q)) r.percentiles.push_back(q);
        }
      }
    }
    if (defined(n["window"]) &&
        section(n["window"], "report.window", {"skip_first_s", "skip_last_s", "skip_first_requests", "skip_last_requests"})) {
      const YAML::Node& w = n["window"];
      if (defined(w["skip_first_s"])) read_double(w["skip_first_s"], "report.window.skip_first_s", r.skip_first_s);
      if (defined(w["skip_last_s"])) read_double(w["skip_last_s"], "report.window.skip_last_s", r.skip_last_s);
      if (defined(w["skip_first_requests"]))
        read_int(w["skip_first_requests"], "report.window.skip_first_requests", r.skip_first_requests);
      if (defined(w["skip_last_requests"]))
        read_int(w["skip_last_requests"], "report.window.skip_last_requests", r.skip_last_requests);
    }
  }
};

}  // namespace

void parse_slo_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                       Diagnostics& diag) {
  SloReportWalker(overrides, scenario, diag).slo(node);
}

void parse_report_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                          Diagnostics& diag) {
  SloReportWalker(overrides, scenario, diag).report(node);
}

}  // namespace servelab
