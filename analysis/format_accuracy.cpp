#include "analysis/format_accuracy.h"

#include <stdexcept>

#include "analysis/json_format.h"

namespace servelab::analysis {

void to_json(nlohmann::ordered_json& j, const FormatAccuracy& a) {
  j = nlohmann::ordered_json::object();
  j["weights"] = a.weights;
  j["kv_cache_dtype"] = a.kv_cache_dtype;
  j["linear_bytes_per_weight"] = exact_number(a.linear_bytes_per_weight);
  if (!a.measured()) {
    j["note"] = a.note;
    return;
  }
  j["reference"] = a.reference;
  j["positions"] = a.positions;
  j["top1_agreement"] = exact_number(a.top1_agreement);
  j["mean_kl"] = exact_number(a.mean_kl);
  j["max_kl"] = exact_number(a.max_kl);
  j["max_logit_error"] = exact_number(a.max_logit_error);
  j["rel_logit_error"] = exact_number(a.rel_logit_error);
}

void from_json(const nlohmann::ordered_json& j, FormatAccuracy& a) {
  if (!j.is_object()) throw std::invalid_argument("accuracy must be an object");
  try {
    a = FormatAccuracy{};
    a.weights = j.at("weights").get<std::string>();
    a.kv_cache_dtype = j.at("kv_cache_dtype").get<std::string>();
    a.linear_bytes_per_weight = j.at("linear_bytes_per_weight").get<double>();
    if (auto n = j.find("note"); n != j.end()) {
      a.note = n->get<std::string>();
      if (a.note.empty()) throw std::invalid_argument("\"note\" must not be empty");
      return;
    }
    a.reference = j.at("reference").get<std::string>();
    a.positions = j.at("positions").get<int64_t>();
    a.top1_agreement = j.at("top1_agreement").get<double>();
    a.mean_kl = j.at("mean_kl").get<double>();
    a.max_kl = j.at("max_kl").get<double>();
    a.max_logit_error = j.at("max_logit_error").get<double>();
    a.rel_logit_error = j.at("rel_logit_error").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("accuracy: ") + e.what());
  }
}

}  // namespace servelab::analysis
