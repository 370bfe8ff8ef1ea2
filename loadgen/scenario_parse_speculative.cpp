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

  /// `sim_acceptance: {per_position: [p1, ...]}` or `{summary: FILE, strategy: LABEL}` (a real
  /// run's summary.json; strategy defaults to this strategy's label), either with `requests: FILE`
  /// (request_acceptance.py's per-request counts: requests differ as they did there).
  void read_acceptance(const YAML::Node& n, const std::string& path, const StrategySpec& st, SpeculativeConfig& out) {
    if (!check_map(n, path, {"per_position", "summary", "strategy", "requests"})) return;
    if (s_.backend.kind != BackendKind::sim) {
      d_.error_at(path, path + " applies to backend kind: sim (got " + to_string(s_.backend.kind) +
                            "; a real backend measures its acceptance)");
      return;
    }
    const bool listed = defined(n["per_position"]), summary = defined(n["summary"]);
    if (listed == summary) {
      d_.error_at(path, path + " needs exactly one of per_position (a list) or summary (a summary.json)");
      return;
    }
    SimAcceptance a;
    if (listed) {
      const std::string lp = join(path, "per_position");
      note(n["per_position"], lp);
      if (!n["per_position"].IsSequence()) {
        d_.error_at(lp, lp + " must be a list of probabilities, e.g. [0.9, 0.8, 0.8] (got " + type_name(n["per_position"]) + ")");
        return;
      }
      for (size_t j = 0; j < n["per_position"].size(); ++j) {
        double p = 0.0;
        const std::string ep = lp + "[" + std::to_string(j) + "]";
        if (!read_double(n["per_position"][j], ep, p)) return;
        if (!(p >= 0.0 && p <= 1.0)) {
          d_.error_at(ep, ep + " must be in [0, 1] (got " + shown(n["per_position"][j]) + ")");
          return;
        }
        a.per_position.push_back(p);
      }
      if (a.per_position.size() < size_t(out.num_speculative_tokens) || a.per_position.size() > 16) {
        d_.error_at(lp, lp + " needs one entry per draft position: num_speculative_tokens (" +
                            std::to_string(out.num_speculative_tokens) + ") to 16 (got " +
                            std::to_string(a.per_position.size()) + ")");
        return;
      }
      a.source = "scenario";
    } else {
      std::string file, label = st.label;
      if (!read_path(n["summary"], join(path, "summary"), file)) return;
      if (defined(n["strategy"]) && !read_string(n["strategy"], join(path, "strategy"), label)) return;
      try {
        a = SimAcceptance::from_summary(file, label);
      } catch (const std::exception& e) {
        note(n["summary"], join(path, "summary"));
        d_.error_at(join(path, "summary"), join(path, "summary") + ": " + e.what());
        return;
      }
    }
    if (defined(n["requests"])) {
      const std::string rp = join(path, "requests");
      std::string file;
      if (!read_path(n["requests"], rp, file)) return;
      try {
        a.add_request_spread(file, out.adaptive);
      } catch (const std::exception& e) {
        note(n["requests"], rp);
        d_.error_at(rp, rp + ": " + e.what());
        return;
      }
    }
    out.sim_acceptance = std::move(a);
  }

  void walk(const YAML::Node& n, const std::string& path, const StrategySpec& st, SpeculativeConfig& out) {
    if (!section(n, path, {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "num_layers",
                           "model", "adaptive", "sim_acceptance"}))
      return;
    if (st.sched.kind != BatchingKind::continuous) {
      note(n, path);
      d_.error_at(path, path + " needs batching: continuous (got " + to_string(st.sched.kind) + ")");
    }
    if (defined(n["method"])) {
      read_enum(n["method"], join(path, "method"), out.method,
                Options<SpecMethod>{{"ngram", SpecMethod::ngram}, {"self", SpecMethod::self},
                                    {"draft_model", SpecMethod::draft_model}});
      if (out.method != SpecMethod::ngram && s_.backend.kind == BackendKind::sim && !defined(n["sim_acceptance"])) {
        note(n["method"], join(path, "method"));
        d_.error_at(join(path, "method"), join(path, "method") + ": " + to_string(out.method) +
                                              " on backend sim needs " + join(path, "sim_acceptance") +
                                              " ({per_position: [p1, p2, ...]} or {summary: FILE}): the sim runs no "
                                              "draft model, it accepts drafts at the rates given");
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
    if (defined(n["sim_acceptance"])) read_acceptance(n["sim_acceptance"], join(path, "sim_acceptance"), st, out);
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
