#include "loadgen/capacity_config.h"

#include <string>

#include "loadgen/yaml_reader.h"

namespace servelab {

namespace {

using namespace scenario_yaml;

class CapacityWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void walk(const YAML::Node& n) {
    CapacitySpec c;
    if (!section(n, "capacity",
                 {"rate_lo", "rate_hi", "precision", "precision_pct", "max_probes", "n_requests", "target_rate",
                  "gpu_hour_usd", "tensor_parallel", "gpu_memory_utilization", "decide", "step_cost_margin"})) {
      s_.capacity = c;
      return;
    }
    auto number = [&](const char* key, double& out, double lo, bool lo_open, double hi, const char* range) {
      const std::string path = std::string("capacity.") + key;
      if (!defined(n[key]) || !read_double(n[key], path, out)) return;
      if (out < lo || (lo_open && out == lo) || out > hi)
        d_.error(path, std::string("must be ") + range + " (got " + fmt_double(out) + ")");
    };
    auto integer = [&](const char* key, int& out, int lo, int hi) {
      const std::string path = std::string("capacity.") + key;
      if (!defined(n[key]) || !read_int(n[key], path, out)) return;
      if (out < lo || out > hi)
        d_.error(path, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " +
                           std::to_string(out) + ")");
    };
    constexpr double kBig = 1e12;
    number("rate_lo", c.rate_lo, 0, false, kBig, ">= 0");
    number("rate_hi", c.rate_hi, 0, false, kBig, ">= 0");
    number("precision", c.precision, 0, false, kBig, ">= 0");
    number("precision_pct", c.precision_pct, 0, false, 99, "in [0, 99]");
    integer("max_probes", c.max_probes, 2, 1000);
    integer("n_requests", c.n_requests, 0, 10'000'000);
    number("target_rate", c.target_rate, 0, false, kBig, ">= 0");
    number("gpu_hour_usd", c.gpu_hour_usd, 0, false, kBig, ">= 0");
    integer("tensor_parallel", c.tensor_parallel, 1, 64);
    if (defined(n["gpu_memory_utilization"])) {
      double u = 0.0;
      number("gpu_memory_utilization", u, 0, true, 1, "in (0, 1]");
      c.gpu_memory_utilization = u;
    }
    if (defined(n["step_cost_margin"])) {
      if (s_.backend.kind != BackendKind::sim) {
        note(n["step_cost_margin"], "capacity.step_cost_margin");
        d_.error_at("capacity.step_cost_margin",
                    std::string("capacity.step_cost_margin applies to backend kind: sim (it prices every step that much "
                                "slower), not ") + to_string(s_.backend.kind));
      } else {
        number("step_cost_margin", c.step_cost_margin, 0, false, 1, "in [0, 1]");
      }
    }
    if (defined(n["decide"]))
      read_enum(n["decide"], "capacity.decide", c.decide,
                Options<CapacityDecide>{{"mean", CapacityDecide::mean}, {"ci95_lo", CapacityDecide::ci95_lo}});
    if (c.rate_hi > 0 && c.rate_hi <= c.rate_lo && !d_.failed("capacity.rate_hi"))
      d_.error("capacity.rate_hi", "must be above capacity.rate_lo (got " + fmt_double(c.rate_hi) + " <= " +
                                       fmt_double(c.rate_lo) + ")");
    if (c.precision == 0 && c.precision_pct == 0 && !d_.failed("capacity.precision_pct"))
      d_.error("capacity.precision_pct", "and capacity.precision cannot both be 0 (the search would never stop)");
    s_.capacity = c;
  }
};

}  // namespace

void parse_capacity_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                            Diagnostics& diag) {
  CapacityWalker(overrides, scenario, diag).walk(node);
}

}  // namespace servelab
