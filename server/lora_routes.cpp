#include "server/lora_routes.h"

#include <stdexcept>

#include "server/api_error.h"

namespace servelab::server {
namespace {

nlohmann::json parse_body(LoraRegistry* loras, const std::string& body) {
  if (!loras)
    throw ApiError(400, "invalid_request_error", "", "lora_disabled", "LoRA is not enabled on this server (serve --enable-lora)");
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw bad_field("", "the body must be a JSON object", "invalid_json");
  return j;
}

std::string string_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
    throw bad_field(key, "a non-empty string is required", "missing_field");
  return it->get<std::string>();
}

}  // namespace

nlohmann::json lora_model_cards(const LoraRegistry& loras, const std::string& base_model, int max_model_len) {
  nlohmann::json cards = nlohmann::json::array();
  for (const LoraRegistry::Entry& e : loras.list())
    cards.push_back({{"id", e.name}, {"object", "model"}, {"created", 0}, {"owned_by", "servelab"}, {"root", e.path},
                     {"parent", base_model}, {"max_model_len", max_model_len}});
  return cards;
}

std::string load_lora_adapter(LoraRegistry* loras, const std::string& base_model, const std::string& body) {
  const nlohmann::json j = parse_body(loras, body);
  const std::string name = string_field(j, "lora_name"), path = string_field(j, "lora_path");
  if (name == base_model) throw bad_field("lora_name", "'" + name + "' is the base model's name");
  if (loras->contains(name))
    throw ApiError(400, "invalid_request_error", "lora_name", "lora_exists",
                   "The lora adapter '" + name + "' has already been loaded.");
  try {
    loras->add(name, path);
  } catch (const std::exception& e) {  // unreadable folder, rank, shapes, targets: the reader's message
    throw ApiError(400, "invalid_request_error", "lora_path", "invalid_lora_adapter", e.what());
  }
  return "Success: LoRA adapter '" + name + "' added successfully.";
}

std::string unload_lora_adapter(LoraRegistry* loras, const std::string& body) {
  const nlohmann::json j = parse_body(loras, body);
  const std::string name = string_field(j, "lora_name");
  if (!loras->remove(name))
    throw ApiError(404, "invalid_request_error", "lora_name", "lora_not_found",
                   "The lora adapter '" + name + "' cannot be found.");
  return "Success: LoRA adapter '" + name + "' removed successfully.";
}

}  // namespace servelab::server
