// ModelWeights::load: a Hugging Face folder (config.json + model.safetensors, or shards listed in
// model.safetensors.index.json), every tensor checked against the config before it is read.
#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/model/hf_config.h"
#include "engine/model/memory_check.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"
#include "engine/model/weights.h"
#include "engine/model/weight_map.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// Tensors a checkpoint may carry that the model does not use.
bool ignorable(const std::string& name, const ModelConfig& c) {
  const std::string inv_freq = "rotary_emb.inv_freq";
  if (name.size() > inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
    return true;
  return c.tie_embeddings && name == "lm_head.weight";
}

// Run f(i) for i in [0, n) on up to hardware_concurrency threads; rethrows the first error.
template <typename F>
void parallel_for(size_t n, F f) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        f(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
  };
  const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n_threads && t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

ModelWeights ModelWeights::load(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw std::runtime_error(dir + ": not a directory (expected a Hugging Face model folder)");
  ModelWeights w;
  w.config = read_hf_config((root / "config.json").string());
  check_weights_fit(w.config, (root / "config.json").string());  // before any allocation
  w.layers.resize(w.config.n_layers);

  // Which file holds each tensor.
  std::vector<std::string> file_names;
  std::map<std::string, std::string> weight_map;  // empty for a single file
  // As transformers: a single model.safetensors wins over an index.
  const bool sharded = !fs::exists(root / kSingleName) && fs::exists(root / kIndexName);
  if (sharded) {
    weight_map = read_weight_map((root / kIndexName).string());
    for (const auto& [name, file] : weight_map)
      if (std::find(file_names.begin(), file_names.end(), file) == file_names.end()) file_names.push_back(file);
  } else if (fs::exists(root / kSingleName)) {
    file_names.push_back(kSingleName);
  } else {
    throw std::runtime_error(dir + ": neither " + kSingleName + " nor " + kIndexName + " found");
  }
  std::vector<SafetensorsFile> files;
  for (const auto& f : file_names) {
    if (!fs::exists(root / f))
      throw std::runtime_error((root / kIndexName).string() + ": lists shard " + f + ", which does not exist in " + dir);
    files.emplace_back((root / f).string());
  }
  auto file_index = [&](const std::string& f) {
    return static_cast<size_t>(std::find(file_names.begin(), file_names.end(), f) - file_names.begin());
  };

  // Locate and check every expected tensor before reading any.
  const std::vector<TensorSpec> specs = tensor_specs(w.config);
  struct Job {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
    float* out;
  };
  std::vector<Job> jobs;
  for (const TensorSpec& s : specs) {
    const SafetensorsFile* file = nullptr;
    if (sharded) {
      auto it = weight_map.find(s.name);
      if (it == weight_map.end())
        throw std::runtime_error((root / kIndexName).string() + ": missing tensor " + s.name + " (shape " +
                                 shape_string(s.shape) + ") in weight_map");
      file = &files[file_index(it->second)];
    } else {
      file = &files[0];
    }
    const SafetensorsTensor* t = file->find(s.name);
    if (!t) {
      throw std::runtime_error(file->path() + ": missing tensor " + s.name + " (shape " + shape_string(s.shape) +
                               (sharded ? "; listed in " + std::string(kIndexName) + ", not in this shard)" : ")"));
    }
    if (t->shape != s.shape)
      throw std::runtime_error(file->path() + ": tensor " + s.name + " has shape " + shape_string(t->shape) +
                               ", expected " + shape_string(s.shape));
    if (!t->supported)
      throw std::runtime_error(file->path() + ": tensor " + s.name + " has dtype " + t->dtype_name +
                               "; only BF16, F16 and F32 checkpoints are supported");
    std::vector<float>& storage = tensor_storage(w, s.name);
    storage.resize(static_cast<size_t>(s.numel()));
    jobs.push_back({file, t, storage.data()});
  }
  // Anything else in the files means the config does not describe this checkpoint.
  std::map<std::string, bool> expected;
  for (const TensorSpec& s : specs) expected[s.name] = true;
  for (const SafetensorsFile& f : files)
    for (const SafetensorsTensor& t : f.tensors())
      if (!expected.count(t.name) && !ignorable(t.name, w.config))
        throw std::runtime_error(f.path() + ": unexpected tensor " + t.name + " " + shape_string(t.shape) +
                                 " (not part of a Llama-family model with this config.json)");

  // Largest tensors first, so threads finish together.
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.tensor->nbytes > b.tensor->nbytes; });
  parallel_for(jobs.size(), [&](size_t i) { jobs[i].file->read_f32(*jobs[i].tensor, jobs[i].out); });
  return w;
}

}  // namespace servelab
