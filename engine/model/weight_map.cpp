#include "engine/model/weight_map.h"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace servelab {

std::map<std::string, std::string> read_weight_map(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw std::runtime_error(path + ": missing object \"weight_map\" (tensor name -> shard file)");
  std::map<std::string, std::string> map;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw std::runtime_error(path + ": weight_map[\"" + it.key() + "\"] must be a file name string");
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw std::runtime_error(path + ": weight_map[\"" + it.key() + "\"] = \"" + file +
                               "\" is not a file name in the model folder");
    map[it.key()] = file;
  }
  return map;
}

}  // namespace servelab
