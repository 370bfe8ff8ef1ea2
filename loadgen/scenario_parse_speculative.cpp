// A strategy's `speculative:` (speculative decoding: engine/spec/spec_config.h): the method, its
// knobs and what it needs (continuous batching; self and draft_model on backend cpu or cuda), each
// error at its file:line:col.
#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class SpeculativeWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void walk(const YAML::Node& n, const std::string& path, const StrategySpec& st, SpeculativeConfig& out) {
    if (!section(n, path, {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "num_layers",
                           "model", "adaptive"}))
      return;
    if (st.sched.kind != BatchingKind::continuous) {
      note(n, path);
      d_.error_at(path, path + " needs batching: continuous (got " + to_string(st.sched.kind) + ")");
    }
    if (defined(n["method"])) {
      read_enum(n["method"], join(path, "method"), out.method,
                Options<SpecMethod>{{"ngram", SpecMethod::ngram}, {"self", SpecMethod::self},
                                    {"draft_model", SpecMethod::draft_model}});
      if (out.method != SpecMethod::ngram && s_.backend.kind == BackendKind::sim) {
        note(n["method"], join(path, "method"));
        d_.error_at(join(path, "method"), join(path, "method") + ": " + to_string(out.method) +
                                              " runs a draft model on backend cpu or cuda (got backend sim; ngram "
                                              "runs anywhere)");
      } else if (out.method != SpecMethod::ngram && s_.backend.kind == BackendKind::cuda &&
                 s_.backend.tensor_parallel > 1) {
        note(n["method"], join(path, "method"));
        d_.error_at(join(path, "method"), join(path, "method") + ": " + to_string(out.method) +
                                              " runs its draft model beside a one-GPU target so far (got "
                                              "tensor_parallel " + std::to_string(s_.backend.tensor_parallel) +
                                              "; ngram runs there)");
      }
    }
    if (defined(n["model"])) read_string(n["model"], join(path, "model"), out.model);
    if (defined(n["adaptive"])) read_bool(n["adaptive"], join(path, "adaptive"), out.adaptive);
    const std::pair<const char*, int*> ints[] = {{"num_speculative_tokens", &out.num_speculative_tokens},
                                                 {"prompt_lookup_min", &out.prompt_lookup_min},
                                                 {"prompt_lookup_max", &out.prompt_lookup_max},
                                                 {"num_layers", &out.num_layers}};
    for (const auto& [k, v] : ints)
      if (defined(n[k])) read_int(n[k], join(path, k), *v);
    try {
      out.validate();
    } catch (const std::invalid_argument& e) {
      note(n, path);
      d_.error_at(path, path + ": " + e.what());
    }
  }
};

}  // namespace

void parse_speculative_section(const YAML::Node& node, const std::string& path, StrategySpec& strategy,
                               const std::vector<AppliedOverride>& overrides, Scenario& scenario, Diagnostics& diag) {
  SpeculativeWalker(overrides, scenario, diag).walk(node, path, strategy, *strategy.speculative);
}

}  // namespace servelab
