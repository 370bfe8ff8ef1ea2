#pragma once
// The multi-LoRA routes, as vLLM offers them: adapters listed by /v1/models with their parent,
// and loaded or unloaded at run time with POST /v1/load_lora_adapter {"lora_name", "lora_path"}
// and POST /v1/unload_lora_adapter {"lora_name"}. A bad adapter is an ApiError (400: unreadable
// folder, rank too big, wrong shapes, name taken; 404: unknown name), never a crash.
#include <string>

#include <nlohmann/json.hpp>

#include "engine/lora/lora_registry.h"

namespace servelab::server {

/// One /v1/models card per registered adapter: {"id": name, "object": "model", "owned_by",
/// "root": its folder, "parent": base_model, "max_model_len"}.
nlohmann::json lora_model_cards(const LoraRegistry& loras, const std::string& base_model, int max_model_len);

/// Handles the body of POST /v1/load_lora_adapter; returns the success text vLLM returns.
/// `loras` null: 400, LoRA is off. Throws ApiError.
std::string load_lora_adapter(LoraRegistry* loras, const std::string& base_model, const std::string& body);
/// Handles the body of POST /v1/unload_lora_adapter; returns the success text. Throws ApiError.
std::string unload_lora_adapter(LoraRegistry* loras, const std::string& body);

}  // namespace servelab::server
