#include "engine/model/synth.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/model/hf_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// Remove checkpoint files a previous synth may have left, so the loader cannot mix old and new.
void remove_old_checkpoint(const fs::path& dir) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" || std::regex_match(name, shard))
      fs::remove(entry.path());
  }
}

// Draw one tensor a slice at a time on several threads and append it to the writer.
void write_random_tensor(const TensorSpec& spec, uint64_t seed, DType dtype, SafetensorsWriter& writer,
                         std::vector<float>& buffer, unsigned n_threads) {
  const int64_t kSlice = static_cast<int64_t>(buffer.size() / n_threads);
  const int64_t n = spec.numel();
  for (int64_t begin = 0; begin < n;) {
    const int64_t count = std::min<int64_t>(n - begin, kSlice * n_threads);
    const int64_t per = (count + n_threads - 1) / n_threads;
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < n_threads && t * per < count; ++t)
      pool.emplace_back([&, t] {
        const int64_t b = t * per;
        fill_random(spec, seed, dtype, begin + b, std::min(per, count - b), buffer.data() + b);
      });
    fill_random(spec, seed, dtype, begin, std::min(per, count), buffer.data());
    for (auto& th : pool) th.join();
    writer.append(buffer.data(), count);
    begin += count;
  }
}

}  // namespace

std::vector<ShardPlan> plan_shards(const ModelConfig& config, int64_t max_shard_bytes) {
  if (max_shard_bytes < 1)
    throw std::invalid_argument("max_shard_bytes must be >= 1 (got " + std::to_string(max_shard_bytes) + ")");
  std::vector<ShardPlan> shards;
  for (const TensorSpec& s : tensor_specs(config)) {
    const int64_t bytes = s.numel() * static_cast<int64_t>(dtype_size(config.dtype));
    if (shards.empty() || (shards.back().nbytes > 0 && shards.back().nbytes + bytes > max_shard_bytes))
      shards.emplace_back();
    shards.back().tensors.push_back(s.name);
    shards.back().nbytes += bytes;
  }
  for (size_t i = 0; i < shards.size(); ++i)
    shards[i].file = shards.size() == 1 ? "model.safetensors" : shard_name(i, shards.size());
  return shards;
}

void synthesize_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed,
                           int64_t max_shard_bytes) {
  config.validate();
  const std::vector<ShardPlan> shards = plan_shards(config, max_shard_bytes);
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) throw std::runtime_error(dir + ": cannot create directory: " + ec.message());
  remove_old_checkpoint(root);
  write_hf_config(config, (root / "config.json").string());

  std::map<std::string, TensorSpec> specs;
  for (TensorSpec& s : tensor_specs(config)) specs[s.name] = std::move(s);
  const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<float> buffer((size_t(1) << 20) * n_threads);

  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (const ShardPlan& shard : shards) {
    std::vector<SafetensorsEntry> entries;
    for (const std::string& name : shard.tensors) {
      entries.push_back({name, config.dtype, specs.at(name).shape});
      weight_map[name] = shard.file;
    }
    SafetensorsWriter writer((root / shard.file).string(), std::move(entries));
    for (const std::string& name : shard.tensors)
      write_random_tensor(specs.at(name), seed, config.dtype, writer, buffer, n_threads);
    writer.finish();
    total += shard.nbytes;
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const fs::path path = root / "model.safetensors.index.json";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << index.dump(2) << "\n";
    out.close();
    if (!out) throw std::runtime_error(path.string() + ": write failed");
  }
}

int64_t parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> kUnits = {
      {"", 1.0},    {"B", 1.0},          {"KB", 1e3},         {"MB", 1e6},
      {"GB", 1e9},  {"TB", 1e12},        {"KIB", 1024.0},     {"MIB", 1048576.0},
      {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  auto it = kUnits.find(unit);
  double value = 0.0;
  bool ok = i > 0 && it != kUnits.end();
  if (ok) {
    try {
      size_t used = 0;
      value = std::stod(text.substr(0, i), &used);
      ok = used == i;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  const double bytes = ok ? value * it->second : 0.0;
  if (!ok || !(bytes >= 1.0) || bytes > 9e18)
    throw std::invalid_argument("size '" + text + "' is not a positive byte count (e.g. 2GB, 500MB, 4GiB, 1048576)");
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace servelab
