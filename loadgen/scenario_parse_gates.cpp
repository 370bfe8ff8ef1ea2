// The `gates:` (CI pass/fail thresholds) and `baseline:` (regression against an earlier
// summary.json) sections of a scenario. Range and metric-name checks are Scenario::validate's
// (scenario_validate.cpp).
#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class GatesWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void gates(const YAML::Node& n) {
    note(n, "gates");
    if (n.IsNull()) return;
    if (!n.IsSequence()) {
      d_.error("gates", std::string("must be a list of {metric, min|max, strategy, rate} (got ") + type_name(n) + ")");
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string path = index("gates", i);
      GateSpec g;
      if (check_map(n[i], path, {"metric", "min", "max", "strategy", "rate", "allow_missing"})) {
        const YAML::Node& e = n[i];
        if (defined(e["metric"])) read_string(e["metric"], path + ".metric", g.metric);
        else d_.error_at(path, path + ".metric is required (e.g. goodput, ttft_p99_ms)");
        double v = 0;
        if (defined(e["min"]) && read_double(e["min"], path + ".min", v)) g.min = v;
        if (defined(e["max"]) && read_double(e["max"], path + ".max", v)) g.max = v;
        if (defined(e["strategy"])) read_string(e["strategy"], path + ".strategy", g.strategy);
        if (defined(e["rate"]) && read_double(e["rate"], path + ".rate", v)) g.rate = v;
        if (defined(e["allow_missing"])) read_bool(e["allow_missing"], path + ".allow_missing", g.allow_missing);
      }
      s_.gates.push_back(g);
    }
  }

  void baseline(const YAML::Node& n) {
    BaselineSpec b;
    if (n.IsScalar()) {  // `baseline: FILE`
      if (read_path(n, "baseline.file", b.file)) s_.baseline = b;
      return;
    }
    if (!check_map(n, "baseline", {"file", "max_regression_pct", "metrics", "allow_missing"})) return;
    if (defined(n["allow_missing"])) read_bool(n["allow_missing"], "baseline.allow_missing", b.allow_missing);
    if (defined(n["file"])) read_path(n["file"], "baseline.file", b.file);
    else d_.error_at("baseline", "baseline.file is required (a summary.json from an earlier run)");
    if (defined(n["max_regression_pct"])) read_double(n["max_regression_pct"], "baseline.max_regression_pct", b.max_regression_pct);
    if (defined(n["metrics"])) {
      const YAML::Node& m = n["metrics"];
      note(m, "baseline.metrics");
      if (!m.IsSequence()) {
        d_.error("baseline.metrics", std::string("must be a list of metric names (got ") + type_name(m) + ")");
      } else {
        b.metrics.clear();
        for (size_t i = 0; i < m.size(); ++i) {
          std::string name;
          if (read_string(m[i], index("baseline.metrics", i), name)) b.metrics.push_back(name);
        }
      }
    }
    s_.baseline = b;
  }
};

}  // namespace

void parse_gates_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                         Diagnostics& diag) {
  GatesWalker(overrides, scenario, diag).gates(node);
}

void parse_baseline_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                            Diagnostics& diag) {
  GatesWalker(overrides, scenario, diag).baseline(node);
}

}  // namespace servelab
