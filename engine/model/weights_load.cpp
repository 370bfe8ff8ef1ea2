// ModelWeights::load: a Hugging Face folder (config.json + model.safetensors, or shards listed in
// model.safetensors.index.json), every tensor checked against the config before it is read.
#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/model/hf_config.h"
#include "engine/model/memory_check.h"
#include "engine/model/quant_checkpoint.h"
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

// ModelWeights::quant_linears' index of the Linear "model.layers.L.<kQuantLinearNames[j]>".
size_t quant_linear_slot(const std::string& prefix) {
  const size_t dot = prefix.find('.', 13);
  const size_t layer = std::stoul(prefix.substr(13, dot - 13));
  const std::string tail = prefix.substr(dot + 1);
  for (size_t j = 0; j < 7; ++j)
    if (tail == kQuantLinearNames[j]) return layer * 7 + j;
  throw std::logic_error("not a decoder Linear: " + prefix);
}

}  // namespace

namespace {

ModelWeights load_weights(const std::string& dir, ModelWeights::QuantLinears quant,
                          const ModelWeights::QuantLayerSink* sink) {
  using QuantLinears = ModelWeights::QuantLinears;
  const bool keep_quant_codes = quant != QuantLinears::dequantize, fp32_linears = quant != QuantLinears::keep_only;
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw std::runtime_error(dir + ": not a directory (expected a Hugging Face model folder)");
  ModelWeights w;
  w.config = read_hf_config((root / "config.json").string());
  {  // before any allocation: what this load holds in host memory at its peak
    const std::string config_json = (root / "config.json").string();
    const std::optional<QuantScheme> stored = read_quant_scheme(config_json);
    if (!stored || fp32_linears) {
      check_weights_fit(w.config, config_json);
    } else {
      const double linears = linear_params(w.config), others = fp32_weight_bytes(w.config) - 4.0 * linears;
      const double packed = stored->method == Quantization::fp8 ? 1.0 : 0.5;  // the codes as the sink keeps them
      if (sink)
        check_bytes_fit(w.config, others + linears * packed + linears / std::max(1, w.config.n_layers),
                        "its quantized Linears packed, one layer of them unpacked and its other tensors in fp32",
                        config_json);
      else
        check_bytes_fit(w.config, others + linears, "its quantized Linears unpacked and its other tensors in fp32",
                        config_json);
    }
  }
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
  const std::string config_path = (root / "config.json").string();
  const std::optional<QuantScheme> scheme = read_quant_scheme(config_path);
  if (scheme) w.quant = *scheme;
  const std::vector<TensorSpec> specs = tensor_specs(w.config);
  struct Job {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
    float* out;
  };
  std::vector<Job> jobs;
  auto locate = [&](const std::string& name) -> TensorRef {
    const SafetensorsFile* file = nullptr;
    if (sharded) {
      auto it = weight_map.find(name);
      if (it == weight_map.end()) return {};
      file = &files[file_index(it->second)];
    } else {
      file = &files[0];
    }
    const SafetensorsTensor* t = file->find(name);
    return t ? TensorRef{file, t} : TensorRef{file, nullptr};
  };
  std::map<std::string, bool> expected;
  struct QuantJob {
    std::string prefix;
    int64_t out, in;
    float* dst;
  };
  std::vector<QuantJob> quant_jobs;
  for (const TensorSpec& s : specs) {
    std::string prefix;
    if (scheme && is_quantized_linear(s.name, &prefix)) {  // read below, from the format's tensors
      std::vector<float>& storage = tensor_storage(w, s.name);
      if (fp32_linears) storage.resize(static_cast<size_t>(s.numel()));
      quant_jobs.push_back({prefix, s.shape[0], s.shape[1], fp32_linears ? storage.data() : nullptr});
      continue;
    }
    expected[s.name] = true;
    if (sharded && !weight_map.count(s.name))
      throw std::runtime_error((root / kIndexName).string() + ": missing tensor " + s.name + " (shape " +
                               shape_string(s.shape) + ") in weight_map");
    const TensorRef ref = locate(s.name);
    const SafetensorsFile* file = ref.file;
    const SafetensorsTensor* t = ref.tensor;
    if (!t) {
      throw std::runtime_error(file->path() + ": missing tensor " + s.name + " (shape " + shape_string(s.shape) +
                               (sharded ? "; listed in " + std::string(kIndexName) + ", not in this shard)" : ")"));
    }
    if (t->shape != s.shape)
      throw std::runtime_error(file->path() + ": tensor " + s.name + " has shape " + shape_string(t->shape) +
                               ", expected " + shape_string(s.shape));
    if (!t->supported)
      throw std::runtime_error(file->path() + ": tensor " + s.name + " has dtype " + t->dtype_name +
                               "; only BF16, F16 and F32 checkpoints are supported" +
                               (t->dtype_name == "F8_E4M3" ? " (an FP8 checkpoint needs its quantization_config in config.json)" : ""));
    std::vector<float>& storage = tensor_storage(w, s.name);
    storage.resize(static_cast<size_t>(s.numel()));
    jobs.push_back({file, t, storage.data()});
  }
  // Quantized Linears: their tensors read and dequantized in parallel; static input scales kept.
  std::vector<std::vector<std::string>> consumed(quant_jobs.size());
  std::vector<float> input_scales(quant_jobs.size(), 0.0f);
  auto read_job = [&](size_t i) {  // quant_jobs[i] read (and dequantized into its fp32 tensor when asked)
    const QuantJob& q = quant_jobs[i];
    QuantLinear ql;
    try {
      ql = read_quant_linear(locate, q.prefix, *scheme, q.out, q.in, consumed[i]);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(dir + ": " + e.what());
    }
    if (q.dst) {
      const std::vector<float> values = dequantize(ql);
      std::copy(values.begin(), values.end(), q.dst);
    }
    input_scales[i] = ql.input_scale;
    if (quant_linear_slot(q.prefix) == 0 && ql.kind == QuantLinear::Kind::fp8_e4m3)
      w.quant.fp8_scales = ql.scales.size() == 1 ? Fp8WeightScales::per_tensor : Fp8WeightScales::per_channel;
    return ql;
  };
  if (sink && scheme) {  // a layer at a time, handed over
    std::vector<std::vector<size_t>> by_layer(size_t(w.config.n_layers));
    for (size_t i = 0; i < quant_jobs.size(); ++i) by_layer[quant_linear_slot(quant_jobs[i].prefix) / 7].push_back(i);
    for (size_t l = 0; l < by_layer.size(); ++l) {
      std::vector<QuantLinear> layer(7);
      parallel_for(by_layer[l].size(), [&](size_t k) {
        const size_t i = by_layer[l][k];
        layer[quant_linear_slot(quant_jobs[i].prefix) % 7] = read_job(i);
      });
      (*sink)(int(l), std::move(layer));
    }
  } else {
    if (keep_quant_codes && scheme) w.quant_linears.resize(size_t(w.config.n_layers) * 7);
    parallel_for(quant_jobs.size(), [&](size_t i) {
      QuantLinear ql = read_job(i);
      if (!w.quant_linears.empty()) w.quant_linears[quant_linear_slot(quant_jobs[i].prefix)] = std::move(ql);
    });
  }
  for (const auto& names : consumed)
    for (const std::string& n : names) expected[n] = true;
  if (scheme && scheme->activations == ActivationQuant::fp8_static) {
    // Q/K/V share one input, gate/up another: the larger of their scales covers both (as vLLM).
    w.quant.input_scales.assign(size_t(w.config.n_layers), {0.0f, 0.0f, 0.0f, 0.0f});
    for (size_t i = 0; i < quant_jobs.size(); ++i) {
      const std::string& p = quant_jobs[i].prefix;
      const size_t layer = std::stoul(p.substr(13, p.find('.', 13) - 13));
      const int input = p.find("o_proj") != std::string::npos      ? kInputO
                        : p.find("down_proj") != std::string::npos ? kInputDown
                        : p.find("mlp.") != std::string::npos      ? kInputGateUp
                                                                   : kInputQkv;
      float& s = w.quant.input_scales[layer][input];
      s = std::max(s, input_scales[i]);
    }
  }
  // Anything else in the files means the config does not describe this checkpoint.
  for (const SafetensorsFile& f : files)
    for (const SafetensorsTensor& t : f.tensors())
      if (!expected.count(t.name) && !ignorable(t.name, w.config))
        throw std::runtime_error(f.path() + ": unexpected tensor " + t.name + " " + shape_string(t.shape) +
                                 " (not part of a Llama-family model with this config.json" +
                                 (scheme ? " quantized as " + w.quant.describe() : "") + ")");

  // Largest tensors first, so threads finish together.
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.tensor->nbytes > b.tensor->nbytes; });
  parallel_for(jobs.size(), [&](size_t i) { jobs[i].file->read_f32(*jobs[i].tensor, jobs[i].out); });
  return w;
}

}  // namespace

ModelWeights ModelWeights::load(const std::string& dir, QuantLinears quant) { return load_weights(dir, quant, nullptr); }

ModelWeights ModelWeights::load_streamed(const std::string& dir, const QuantLayerSink& sink) {
  return load_weights(dir, QuantLinears::keep_only, &sink);
}

}  // namespace servelab
