// ModelWeights::random: every tensor drawn from its own (seed, name) stream, in parallel.
#include <algorithm>
#include <atomic>
#include <thread>

#include "engine/model/memory_check.h"
#include "engine/model/tensors.h"
#include "engine/model/weights.h"

namespace servelab {

ModelWeights ModelWeights::random(const ModelConfig& config, uint64_t seed) {
  config.validate();
  check_weights_fit(config, "model " + config.name);
  ModelWeights w;
  w.config = config;
  w.layers.resize(config.n_layers);
  const std::vector<TensorSpec> specs = tensor_specs(config);
  std::vector<float*> slots;
  for (const TensorSpec& s : specs) {
    std::vector<float>& v = tensor_storage(w, s.name);
    v.resize(s.numel());
    slots.push_back(v.data());
  }
  // Slices of every tensor are independent (counter-based streams), so threads take work items
  // of at most kChunk elements in any order.
  struct Item {
    size_t tensor;
    int64_t begin, count;
  };
  constexpr int64_t kChunk = int64_t(1) << 20;
  std::vector<Item> items;
  for (size_t t = 0; t < specs.size(); ++t)
    for (int64_t b = 0, n = specs[t].numel(); b < n; b += kChunk) items.push_back({t, b, std::min(kChunk, n - b)});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < items.size();) {
      const Item& it = items[i];
      fill_random(specs[it.tensor], seed, config.dtype, it.begin, it.count, slots[it.tensor] + it.begin);
    }
  };
  const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n_threads && items.size() > 8; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return w;
}

}  // namespace servelab
