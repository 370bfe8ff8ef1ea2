// `servelab serve --speculative-config JSON`: vLLM's flag, read into the same SpeculativeConfig a
// scenario's `speculative:` block gives.
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/spec/spec_config.h"

namespace servelab {

namespace spec_config_json_detail {

/// `"sim_acceptance": {"per_position": [p1, ...]}` or `{"summary": FILE, "strategy": LABEL}` (a
/// real run's summary.json; strategy empty: every run that speculated), either with `"requests":
/// FILE` (request_acceptance.py's per-request counts, read by the caller once `adaptive` is known),
/// as a scenario's block.
SimAcceptance sim_acceptance_from_json(const nlohmann::json& v, std::string& requests) {
  const std::string where = "--speculative-config: sim_acceptance";
  if (!v.is_object() || v.contains("per_position") == v.contains("summary"))
    throw std::invalid_argument(where + " must be {\"per_position\": [p1, ...]} or {\"summary\": FILE, \"strategy\": LABEL} (got " +
                                v.dump() + ")");
  for (const auto& [key, x] : v.items())
    if (key != "per_position" && key != "summary" && key != "strategy" && key != "requests")
      throw std::invalid_argument(where + ": unknown key " + key + " (per_position, or summary and strategy; requests)");
  if (v.contains("requests")) {
    if (!v["requests"].is_string())
      throw std::invalid_argument(where + ".requests must be a path to request_acceptance.py's JSON (got " +
                                  v["requests"].dump() + ")");
    requests = v["requests"].get<std::string>();
  }
  SimAcceptance a;
  if (v.contains("per_position")) {
    const nlohmann::json& list = v["per_position"];
    if (!list.is_array()) throw std::invalid_argument(where + ".per_position must be a list of probabilities (got " + list.dump() + ")");
    for (const nlohmann::json& p : list) {
      if (!p.is_number()) throw std::invalid_argument(where + ".per_position entries must be numbers (got " + p.dump() + ")");
      a.per_position.push_back(p.get<double>());
    }
    a.source = "--speculative-config";
    try {
      a.validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ".per_position: " + e.what());
    }
    return a;
  }
  if (!v["summary"].is_string()) throw std::invalid_argument(where + ".summary must be a path (got " + v["summary"].dump() + ")");
  if (v.contains("strategy") && !v["strategy"].is_string())
    throw std::invalid_argument(where + ".strategy must be a string (got " + v["strategy"].dump() + ")");
  try {
    return SimAcceptance::from_summary(v["summary"].get<std::string>(), v.value("strategy", std::string()));
  } catch (const std::exception& e) {
    throw std::invalid_argument(where + ".summary: " + e.what());
  }
}

}  // namespace spec_config_json_detail

SpeculativeConfig speculative_config_from_json(const std::string& text) {
  using spec_config_json_detail::sim_acceptance_from_json;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(std::string("--speculative-config is not JSON: ") + e.what());
  }
  if (!j.is_object())
    throw std::invalid_argument("--speculative-config must be a JSON object, e.g. {\"method\": \"ngram\", \"num_speculative_tokens\": 3}");
  SpeculativeConfig c;
  auto need_int = [&](const std::string& key, const nlohmann::json& v) {
    if (!v.is_number_integer()) throw std::invalid_argument("--speculative-config: " + key + " must be an integer (got " + v.dump() + ")");
    return v.get<int>();
  };
  bool method_given = false;
  std::string requests;  // sim_acceptance.requests: its spread follows adaptive k, read after every key
  for (const auto& [key, v] : j.items()) {
    if (key == "method") {
      const std::string m = v.is_string() ? v.get<std::string>() : v.dump();
      method_given = true;
      if (m == "ngram") c.method = SpecMethod::ngram;
      else if (m == "self") c.method = SpecMethod::self;
      else if (m == "draft_model") c.method = SpecMethod::draft_model;
      else
        throw std::invalid_argument("--speculative-config: method " + m +
                                    " is not supported (ngram, self or draft_model; EAGLE and Medusa heads are not built)");
    } else if (key == "num_speculative_tokens") {
      c.num_speculative_tokens = need_int(key, v);
    } else if (key == "prompt_lookup_min") {
      c.prompt_lookup_min = need_int(key, v);
    } else if (key == "prompt_lookup_max") {
      c.prompt_lookup_max = need_int(key, v);
    } else if (key == "num_layers") {
      c.num_layers = need_int(key, v);
    } else if (key == "model") {
      if (!v.is_string()) throw std::invalid_argument("--speculative-config: model must be a string (got " + v.dump() + ")");
      c.model = v.get<std::string>();
    } else if (key == "adaptive") {
      if (!v.is_boolean()) throw std::invalid_argument("--speculative-config: adaptive must be true or false (got " + v.dump() + ")");
      c.adaptive = v.get<bool>();
    } else if (key == "sim_acceptance") {
      c.sim_acceptance = sim_acceptance_from_json(v, requests);
    } else {
      throw std::invalid_argument("--speculative-config: unknown key " + key +
                                  " (method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, num_layers, model, "
                                  "adaptive, sim_acceptance)");
    }
  }
  // vLLM infers the method from `model` when it is left out; so do we.
  if (!method_given && !c.model.empty()) c.method = SpecMethod::draft_model;
  if (c.sim_acceptance && c.sim_acceptance->source == "--speculative-config" &&
      c.sim_acceptance->per_position.size() < size_t(c.num_speculative_tokens))
    throw std::invalid_argument("--speculative-config: sim_acceptance.per_position needs one entry per draft position, " +
                                std::to_string(c.num_speculative_tokens) + " (num_speculative_tokens; got " +
                                std::to_string(c.sim_acceptance->per_position.size()) + ")");
  if (!requests.empty()) {
    try {
      c.sim_acceptance->add_request_spread(requests, c.adaptive);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--speculative-config: sim_acceptance.requests: ") + e.what());
    }
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--speculative-config: ") + e.what());
  }
  return c;
}

}  // namespace servelab
