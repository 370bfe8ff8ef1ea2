#include "engine/backend/sim_backend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/require.h"
#include "engine/splitmix64.h"

namespace servelab {

SimBackend::SimBackend(const ModelConfig& model, const SimCostModel& cost) : model_(model), cost_(cost) {
  model_.validate();
  cost_.device.validate();
  if (cost_.tensor_parallel < 1 || model_.n_kv_heads % cost_.tensor_parallel != 0)
    throw std::invalid_argument("sim backend: tensor_parallel (" + std::to_string(cost_.tensor_parallel) +
                                ") must divide " + model_.name + "'s " + std::to_string(model_.n_kv_heads) +
                                " KV heads");
}

int64_t SimBackend::kv_bytes_per_slot() const {
  return 2ll * model_.n_layers * (model_.kv_dim() / cost_.tensor_parallel) * cost_.device.kv_dtype_bytes;
}

void SimBackend::init_kv(int64_t n_slots) {
  if (n_slots < 1) throw std::invalid_argument("sim backend: arena of " + std::to_string(n_slots) + " slots");
  n_slots_ = n_slots;
}

ForwardResult SimBackend::forward(const Batch& batch, const KvManager& kv) {
  if (n_slots_ == 0) throw std::logic_error("sim backend: forward before init_kv");
  ForwardResult out;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const BatchEntry& e = batch.entries[i];
    auto where = [&] { return "sim backend: batch entry " + std::to_string(i); };  // built only on error
    if (!e.seq) throw std::invalid_argument(where() + " has no sequence");
    const Sequence& s = *e.seq;
    const int end = s.n_computed + e.n_new;
    if (e.n_new < 1 || s.n_computed < 0 || end > s.n_tokens())
      throw std::invalid_argument(where() + " (sequence " + std::to_string(s.id) + "): positions [" +
                                  std::to_string(s.n_computed) + ", " + std::to_string(end) + ") outside its " +
                                  std::to_string(s.n_tokens()) + " tokens");
    // The last position's slot (O(1); KvManager::slots_needed walks the block table).
    bool holds = s.kv.allocated;
    if (holds) {
      try {
        holds = kv.slot(s, end - 1) >= 0;
      } catch (const std::out_of_range&) {
        holds = false;
      }
    }
    if (!holds)
      throw std::invalid_argument(where() + " (sequence " + std::to_string(s.id) + ") holds no KV slots up to position " +
                                  std::to_string(end));
    if (e.sample != (end == s.n_tokens()))
      throw std::invalid_argument(where() + " (sequence " + std::to_string(s.id) + "): sample must be set exactly when the chunk ends at the last token");
    if (!e.sample) continue;
    for (int k = 0; k < std::max(1, e.n_samples); ++k) {  // draw k as sample sample_index + k would
      const uint64_t h = splitmix64(splitmix64(s.sampling.seed ^ splitmix64(static_cast<uint64_t>(s.sample_index + k))) +
                               static_cast<uint64_t>(end));
      const int64_t span = std::max(1, model_.vocab_size - 2);
      out.sampled.push_back(static_cast<TokenId>(std::min<int64_t>(model_.vocab_size - 1, 2 + static_cast<int64_t>(h % span))));
    }
  }
  StepShape shape = StepShape::of(batch);
  shape.swap_bytes = pending_swap_bytes_;
  CostSource used = CostSource::roofline;
  double t = cost_.step_seconds(model_, shape, &used);
  counts_.add(used);
  t += cost_.host.seconds(shape.n_seqs);  // the engine's own work around forward() (profiled)
  t += 2.0 * static_cast<double>(pending_copy_bytes_) / cost_.device.mem_bw_bytes_s;  // copy-on-write
  pending_swap_bytes_ = 0;
  pending_copy_bytes_ = 0;
  out.predicted_s = t;
  return out;
}

void SimBackend::copy_slots(std::span<const KvCopy> copies) {
  for (const KvCopy& c : copies) pending_copy_bytes_ += c.n_slots * kv_bytes_per_slot();
}

std::unique_ptr<HostKvPool> SimBackend::make_host_pool(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("SimBackend::make_host_pool: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  return std::make_unique<HostKvPool>(nullptr, nullptr, n_slots, kv_bytes_per_slot(), false, nullptr);
}

void SimBackend::swap_out(std::span<const KvSwap> runs, HostKvPool& pool) {
  pool.check(runs, n_slots_, "SimBackend::swap_out");
  for (const KvSwap& r : runs) pending_swap_bytes_ += std::max<int64_t>(0, r.n_slots) * kv_bytes_per_slot();
}

void SimBackend::swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) {
  pool.check(runs, n_slots_, "SimBackend::swap_in");
  for (const KvSwap& r : runs) pending_swap_bytes_ += std::max<int64_t>(0, r.n_slots) * kv_bytes_per_slot();
}

}  // namespace servelab
