#include "engine/backend/step_shape_json.h"

#include <stdexcept>

namespace servelab {

nlohmann::ordered_json step_shape_json(const StepShape& h) {
  nlohmann::ordered_json j = {{"n_seqs", h.n_seqs},
                              {"n_tokens", h.n_tokens},
                              {"n_padding_tokens", h.n_padding_tokens},
                              {"n_sampled", h.n_sampled},
                              {"sum_context", h.sum_context},
                              {"max_context", h.max_context},
                              {"prefill_pairs", h.prefill_pairs},
                              {"decode_context", h.decode_context},
                              {"attention_pairs", h.attention_pairs}};
  if (h.verify_rows > 0) {
    j["verify_rows"] = h.verify_rows;
    j["verify_pairs"] = h.verify_pairs;
  }
  return j;
}

StepShape step_shape_from_json(const nlohmann::json& o, const std::string& where) {
  auto number = [&](const char* key) -> double {
    if (o.contains(key) && o[key].is_number()) return o[key].get<double>();
    throw std::runtime_error(where + ": missing number '" + key + "'");
  };
  auto number_or = [&](const char* key, double fallback) {
    return o.contains(key) && o[key].is_number() ? o[key].get<double>() : fallback;
  };
  StepShape s;
  s.n_tokens = static_cast<int64_t>(number("n_tokens"));
  s.sum_context = static_cast<int64_t>(number("sum_context"));
  s.n_padding_tokens = static_cast<int64_t>(number_or("n_padding_tokens", 0));
  s.n_sampled = static_cast<int64_t>(number("n_sampled"));
  s.n_seqs = static_cast<int64_t>(number("n_seqs"));
  s.max_context = static_cast<int64_t>(number("max_context"));
  s.prefill_pairs = number("prefill_pairs");
  s.decode_context = number("decode_context");
  s.attention_pairs = number_or("attention_pairs", s.prefill_pairs + s.decode_context);
  s.verify_rows = static_cast<int64_t>(number_or("verify_rows", 0));  // verification points only
  s.verify_pairs = number_or("verify_pairs", 0.0);
  if (s.verify_rows < 0 || s.verify_rows > s.n_tokens || s.verify_pairs < 0 || s.verify_pairs > s.prefill_pairs)
    throw std::runtime_error(where + ": verify_rows must be in [0, n_tokens] and verify_pairs in [0, prefill_pairs]");
  return s;
}

}  // namespace servelab
