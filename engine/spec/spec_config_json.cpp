// `servelab serve --speculative-config JSON`: vLLM's flag, read into the same SpeculativeConfig a
// scenario's `speculative:` block gives.
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/spec/spec_config.h"

namespace servelab {

SpeculativeConfig speculative_config_from_json(const std::string& text) {
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
    } else {
      throw std::invalid_argument("--speculative-config: unknown key " + key +
                                  " (method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, num_layers, model, adaptive)");
    }
  }
  // vLLM infers the method from `model` when it is left out; so do we.
  if (!method_given && !c.model.empty()) c.method = SpecMethod::draft_model;
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--speculative-config: ") + e.what());
  }
  return c;
}

}  // namespace servelab
