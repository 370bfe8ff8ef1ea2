// The `workload.lora:` section of a scenario, and a strategy's own `lora:`: which LoRA adapters
// requests name and how popular each is (loadgen/lora_workload.h). Errors name the key at its
// file:line:col.
#include <cmath>

#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class LoraWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  /// A strategy's `lora:`: `none` (out stays without adapters) or the keys of workload.lora.
  void lora_or_none(const YAML::Node& n, const std::string& path, LoraWorkloadSpec& out) {
    if (!n.IsScalar()) return lora(n, path, out);
    std::string word;
    if (read_string(n, path, word) && word != "none")
      d_.error(path, "must be none or a map of workload.lora's keys (got '" + word + "')");
  }

  void lora(const YAML::Node& n, const std::string& path, LoraWorkloadSpec& out) {
    if (!section(n, path, {"adapters", "count", "distribution", "zipf_s", "base_fraction", "rank", "max_loras",
                           "max_cpu_loras", "group_prompts", "admit_when_packed", "admit_wait_s"}))
      return;
    const bool listed = defined(n["adapters"]), counted = defined(n["count"]);
    if (listed == counted) {
      d_.error_at(path, path + " needs adapters: [names] or count: N (one of them)");
      return;
    }
    if (listed) {
      const YAML::Node& a = n["adapters"];
      note(a, path + ".adapters");
      if (!a.IsSequence() || a.size() == 0) {
        d_.error(path + ".adapters", "must be a non-empty list of adapter names");
        return;
      }
      for (size_t i = 0; i < a.size(); ++i) {
        std::string name;
        if (!read_string(a[i], index(path + ".adapters", i), name)) continue;
        if (name.empty()) d_.error(index(path + ".adapters", i), "must not be empty");
        for (const std::string& seen : out.adapters)
          if (seen == name) d_.error(index(path + ".adapters", i), "names '" + name + "' twice");
        out.adapters.push_back(name);
      }
    } else {
      int count = 0;
      if (read_int(n["count"], path + ".count", count)) {
        if (count < 1 || count > 100000) d_.error(path + ".count", "must be in [1, 100000] (got " + std::to_string(count) + ")");
        else out.adapters = LoraWorkloadSpec::numbered(count);
      }
    }
    if (defined(n["distribution"]))
      read_enum(n["distribution"], path + ".distribution", out.distribution,
                Options<LoraPopularity>{{"uniform", LoraPopularity::uniform}, {"zipf", LoraPopularity::zipf}});
    if (defined(n["zipf_s"])) {
      if (out.distribution != LoraPopularity::zipf) {
        note(n["zipf_s"], path + ".zipf_s");
        d_.error_at(path + ".zipf_s", path + ".zipf_s applies to distribution: zipf");
      } else if (read_double(n["zipf_s"], path + ".zipf_s", out.zipf_s) && !(out.zipf_s > 0 && out.zipf_s <= 10)) {
        d_.error(path + ".zipf_s", "must be in (0, 10] (got " + fmt_double(out.zipf_s) + ")");
      }
    }
    if (defined(n["base_fraction"]) && read_double(n["base_fraction"], path + ".base_fraction", out.base_fraction) &&
        !(out.base_fraction >= 0 && out.base_fraction < 1))
      d_.error(path + ".base_fraction", "must be in [0, 1) (got " + fmt_double(out.base_fraction) + ")");
    auto in_range = [&](const char* key, int& v, int lo, int hi) {
      if (!defined(n[key])) return;
      const std::string p = path + "." + key;
      if (read_int(n[key], p, v) && (v < lo || v > hi))
        d_.error(p, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + std::to_string(v) + ")");
    };
    in_range("rank", out.rank, 1, 1024);
    in_range("max_loras", out.max_loras, 1, 4096);
    in_range("max_cpu_loras", out.max_cpu_loras, 0, 100000);
    if (out.max_cpu_loras > 0 && out.max_cpu_loras < out.max_loras)
      d_.error(path + ".max_cpu_loras", "must be 0 or >= max_loras (" + std::to_string(out.max_loras) + ")");
    if (defined(n["group_prompts"])) read_bool(n["group_prompts"], path + ".group_prompts", out.group_prompts);
    if (defined(n["admit_when_packed"]))
      read_bool(n["admit_when_packed"], path + ".admit_when_packed", out.admit_when_packed);
    if (defined(n["admit_wait_s"]) && read_double(n["admit_wait_s"], path + ".admit_wait_s", out.admit_wait_s) &&
        !(out.admit_wait_s >= 0 && out.admit_wait_s <= 3600))
      d_.error(path + ".admit_wait_s", "must be in [0, 3600] seconds (got " + fmt_double(out.admit_wait_s) + ")");
  }
};

}  // namespace

void parse_lora_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                        Diagnostics& diag) {
  LoraWalker(overrides, scenario, diag).lora(node, "workload.lora", scenario.workload.lora);
}

void check_lora_batching(const Scenario& s, Diagnostics& diag) {
  for (size_t i = 0; i < s.strategies.size(); ++i) {
    const StrategySpec& st = s.strategies[i];
    const bool own = st.lora && st.lora->enabled(), inherited = !st.lora && s.workload.lora.enabled();
    if ((own || inherited) && st.sched.kind != BatchingKind::continuous)
      diag.error(own ? "strategies[" + std::to_string(i) + "].lora" : "workload.lora",
                 std::string(own ? "needs" : "needs, in every strategy that runs its adapters,") +
                     " continuous batching (strategy " + st.label + " is " + to_string(st.sched.kind) +
                     (own ? ")" : "; give it lora: none to run it on the base model)"));
  }
}

void parse_strategy_lora(const YAML::Node& node, const std::string& path, const std::vector<AppliedOverride>& overrides,
                         Scenario& scenario, StrategySpec& strategy, Diagnostics& diag) {
  strategy.lora.emplace();  // `lora: none`: no adapters (the base model for every request)
  LoraWalker(overrides, scenario, diag).lora_or_none(node, path, *strategy.lora);
}

}  // namespace servelab
