// `workload.rates:` — one rate, a list, or a range {from, to, steps | step} — into
// scenario.workload.rates (requests/s; .inf = everything at t = 0).
#include <cmath>
#include <string>

#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class RatesWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;
  void rates(const YAML::Node& n);
};

void RatesWalker::rates(const YAML::Node& n) {
  auto& out = s_.workload.rates;
  const std::string path = "workload.rates";
  note(n, path);
  auto positive = [&](const std::string& p, double v) {
    if (v > 0) return true;
    d_.error(p, "must be > 0 requests/s (got " + fmt_double(v) + ")");
    return false;
  };
  if (n.IsScalar()) {  // `rates: 4`
    double r = 0;
    if (read_double(n, path, r) && positive(path, r)) out = {r};
    return;
  }
  if (n.IsSequence()) {
    if (n.size() == 0) d_.error(path, "must list at least one rate");
    for (size_t i = 0; i < n.size(); ++i) {
      double r = 0;
      if (read_double(n[i], index(path, i), r) && positive(index(path, i), r)) out.push_back(r);
    }
    return;
  }
  if (!check_map(n, path, {"from", "to", "steps", "step"})) return;
  double from = 0, to = 0, step = 0;
  int steps = 0;
  bool ok = true;
  for (const char* k : {"from", "to"})
    if (!defined(n[k])) {
      d_.error_at(path, std::string(path) + " range needs from: and to: (and steps: N or step: S)");
      return;
    }
  ok &= read_double(n["from"], path + ".from", from) && positive(path + ".from", from);
  ok &= read_double(n["to"], path + ".to", to) && positive(path + ".to", to);
  if (ok && (std::isinf(from) || std::isinf(to))) {
    d_.error(path, "range ends must be finite (list .inf explicitly: rates: [1, 2, .inf])");
    return;
  }
  if (ok && to < from) {
    d_.error(path + ".to", "must be >= from (" + fmt_double(from) + ") (got " + fmt_double(to) + ")");
    ok = false;
  }
  const bool has_steps = defined(n["steps"]), has_step = defined(n["step"]);
  if (has_steps == has_step) {
    d_.error_at(path, path + " range needs exactly one of steps: N (points, ends included) or step: S (increment)");
    return;
  }
  if (has_steps && read_int(n["steps"], path + ".steps", steps) && (steps < 1 || steps > 1000)) {
    d_.error(path + ".steps", "must be in [1, 1000] (got " + std::to_string(steps) + ")");
    ok = false;
  }
  if (has_step && read_double(n["step"], path + ".step", step) && !(step > 0 && std::isfinite(step))) {
    d_.error(path + ".step", "must be > 0 (got " + fmt_double(step) + ")");
    ok = false;
  }
  if (!ok || (has_steps && steps < 1) || (has_step && !(step > 0))) return;
  // Rounded to 12 digits so 0.1-steps give 0.3, not 0.30000000000000004.
  auto tidy = [](double v) { return std::stod(fmt_double(v)); };
  if (has_steps) {
    for (int i = 0; i < steps; ++i) out.push_back(tidy(steps == 1 ? from : from + (to - from) * i / (steps - 1)));
  } else {
    const double count = std::floor((to - from) / step * (1 + 1e-9) + 1e-9) + 1;
    if (count > 1000) {
      d_.error(path + ".step", "gives " + fmt_double(count) + " rates; at most 1000");
      return;
    }
    for (int i = 0; i < static_cast<int>(count); ++i) out.push_back(tidy(from + step * i));
  }
}

}  // namespace

void parse_rates_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                         Diagnostics& diag) {
  RatesWalker(overrides, scenario, diag).rates(node);
}

}  // namespace servelab
