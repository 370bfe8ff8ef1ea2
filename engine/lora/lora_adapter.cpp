#include "engine/lora/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "engine/model/weights.h"
#include "engine/splitmix64.h"

namespace servelab {
namespace {

constexpr const char* kModuleNames[kLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};

std::vector<float>& base_matrix(LayerWeights& L, LoraTarget t) {
  switch (t) {
    case LoraTarget::q: return L.wq;
    case LoraTarget::k: return L.wk;
    case LoraTarget::v: return L.wv;
    case LoraTarget::o: return L.wo;
    case LoraTarget::gate: return L.w_gate;
    case LoraTarget::up: return L.w_up;
    case LoraTarget::down: return L.w_down;
  }
  throw std::logic_error("unknown LoraTarget");
}

}  // namespace

const char* peft_module_name(LoraTarget t) { return kModuleNames[static_cast<int>(t)]; }

const char* peft_block_name(LoraTarget t) { return static_cast<int>(t) <= static_cast<int>(LoraTarget::o) ? "self_attn" : "mlp"; }

bool lora_target_from_name(const std::string& name, LoraTarget& out) {
  for (int i = 0; i < kLoraTargets; ++i)
    if (name == kModuleNames[i]) {
      out = static_cast<LoraTarget>(i);
      return true;
    }
  return false;
}

int lora_in_dim(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::o: return c.n_heads * c.head_dim();
    case LoraTarget::down: return c.intermediate_size;
    default: return c.hidden_size;
  }
}

int lora_out_dim(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::q: return c.n_heads * c.head_dim();
    case LoraTarget::k:
    case LoraTarget::v: return c.kv_dim();
    case LoraTarget::o:
    case LoraTarget::down: return c.hidden_size;
    case LoraTarget::gate:
    case LoraTarget::up: return c.intermediate_size;
  }
  return 0;
}

bool LoraAdapter::targets_any() const {
  for (bool t : targets)
    if (t) return true;
  return false;
}

float LoraAdapter::scale_for(float alpha, int rank, bool use_rslora) {
  return use_rslora ? alpha / std::sqrt(static_cast<float>(rank)) : alpha / static_cast<float>(rank);
}

void LoraAdapter::validate(const ModelConfig& config, int max_rank) const {
  auto bad = [&](const std::string& m) { throw std::invalid_argument("LoRA adapter '" + name + "': " + m); };
  if (rank < 1 || rank > max_rank)
    bad("rank r = " + std::to_string(rank) + " is outside [1, max_lora_rank = " + std::to_string(max_rank) +
        "]; raise --max-lora-rank");
  if (!targets_any()) bad("adapts no module (target_modules is empty)");
  if (static_cast<int>(layers.size()) != config.n_layers)
    bad("has " + std::to_string(layers.size()) + " layers, the base model " + std::to_string(config.n_layers));
  for (int l = 0; l < config.n_layers; ++l)
    for (int i = 0; i < kLoraTargets; ++i) {
      const LoraTarget t = static_cast<LoraTarget>(i);
      const LoraPair& p = layers[size_t(l)][size_t(i)];
      const std::string where = "layer " + std::to_string(l) + " " + peft_module_name(t);
      if (!targets[size_t(i)]) {
        if (p.present() || !p.b.empty()) bad(where + " has weights but is not among target_modules");
        continue;
      }
      const int64_t in = lora_in_dim(config, t), out = lora_out_dim(config, t);
      if (int64_t(p.a.size()) != int64_t(rank) * in)
        bad(where + ".lora_A has " + std::to_string(p.a.size()) + " values, [r=" + std::to_string(rank) + ", " +
            std::to_string(in) + "] expected");
      if (int64_t(p.b.size()) != out * rank)
        bad(where + ".lora_B has " + std::to_string(p.b.size()) + " values, [" + std::to_string(out) + ", r=" +
            std::to_string(rank) + "] expected");
    }
}

int64_t LoraAdapter::bytes() const {
  int64_t n = 0;
  for (const auto& layer : layers)
    for (const LoraPair& p : layer) n += int64_t(p.a.size() + p.b.size()) * int64_t(sizeof(float));
  return n;
}

void merge_lora(ModelWeights& weights, const LoraAdapter& adapter) {
  const ModelConfig& c = weights.config;
  adapter.validate(c, adapter.rank);
  for (int l = 0; l < c.n_layers; ++l)
    for (int i = 0; i < kLoraTargets; ++i) {
      const LoraPair& p = adapter.layers[size_t(l)][size_t(i)];
      if (!p.present()) continue;
      const LoraTarget t = static_cast<LoraTarget>(i);
      const int in = lora_in_dim(c, t), out = lora_out_dim(c, t), r = adapter.rank;
      std::vector<float>& w = base_matrix(weights.layers[size_t(l)], t);
      for (int o = 0; o < out; ++o)
        for (int j = 0; j < in; ++j) {
          double delta = 0.0;
          for (int k = 0; k < r; ++k) delta += double(p.b[size_t(o) * r + k]) * p.a[size_t(k) * in + j];
          w[size_t(o) * in + j] += static_cast<float>(adapter.scale * delta);
        }
    }
}

namespace {

/// Element n of stream `key`: uniform on [-sqrt(3), sqrt(3)] (mean 0, variance 1).
float unit_uniform(uint64_t key, uint64_t n) {
  const uint32_t bits = uint32_t(splitmix64(key + n) >> 40);  // 24 bits
  return (float(bits) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 1.7320508f;
}

}  // namespace

LoraAdapter random_lora(const ModelConfig& config, const std::string& name, int rank, float alpha,
                        const std::vector<LoraTarget>& targets, uint64_t seed, int threads) {
  LoraAdapter a;
  a.name = name;
  a.rank = rank;
  a.alpha = alpha;
  a.scale = LoraAdapter::scale_for(alpha, rank, false);
  for (LoraTarget t : targets) a.targets[size_t(t)] = true;
  a.layers.resize(size_t(config.n_layers));
  // Each (layer, target) pair from its own counter-based stream (splitmix64 of its key and the
  // element's index: a few ns an element), so the layers are drawn on several threads and the
  // weights do not depend on how many (a 7B model's rank-16 adapter is 40M values, drawn when a
  // workload's request first names it). Uniform on [-sqrt(3), sqrt(3)]: unit variance, as the
  // Gaussian's it stands in for, then scaled by 1 / sqrt(fan-in).
  auto draw_layer = [&](int l) {
    for (LoraTarget t : targets) {
      const int in = lora_in_dim(config, t), out = lora_out_dim(config, t);
      const uint64_t key = splitmix64(seed ^ (0x9e3779b97f4a7c15ull * (uint64_t(l) * kLoraTargets + uint64_t(t) + 1)));
      LoraPair& p = a.layers[size_t(l)][size_t(t)];
      p.a.resize(size_t(rank) * in);
      p.b.resize(size_t(out) * rank);
      const float sa = 1.0f / std::sqrt(static_cast<float>(in)), sb = 1.0f / std::sqrt(static_cast<float>(rank));
      uint64_t n = 0;
      for (float& x : p.a) x = unit_uniform(key, n++) * sa;
      for (float& x : p.b) x = unit_uniform(key, n++) * sb;
    }
  };
  const int n_threads =
      std::clamp(threads > 0 ? threads : int(std::thread::hardware_concurrency()), 1, std::max(1, std::min(16, config.n_layers)));
  std::vector<std::thread> pool;
  for (int w = 1; w < n_threads; ++w)
    pool.emplace_back([&, w] {
      for (int l = w; l < config.n_layers; l += n_threads) draw_layer(l);
    });
  for (int l = 0; l < config.n_layers; l += n_threads) draw_layer(l);
  for (std::thread& th : pool) th.join();
  return a;
}

}  // namespace servelab
