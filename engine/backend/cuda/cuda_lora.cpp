#include "engine/backend/cuda/cuda_lora.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/lora_sgmv.h"

namespace servelab::cuda {

void DeviceLoraPool::reserve(const ModelConfig& c, int n_slots, int max_rank, kernels::ScalarType dt) {
  if (n_slots < 1) throw std::invalid_argument("CudaBackend::reserve_loras: max_loras must be >= 1 (got " +
                                               std::to_string(n_slots) + ")");
  if (max_rank < 1 || max_rank > kernels::kLoraMaxRank)
    throw std::invalid_argument("CudaBackend::reserve_loras: max_lora_rank " + std::to_string(max_rank) +
                                " is outside [1, " + std::to_string(kernels::kLoraMaxRank) +
                                "] (the LoRA kernels' limit)");
  if (reserved()) {
    if (n_slots == n_slots_ && max_rank == max_rank_) return;
    throw std::invalid_argument("CudaBackend::reserve_loras: the adapter pool is already reserved (" +
                                std::to_string(n_slots_) + " slots of rank " + std::to_string(max_rank_) + ")");
  }
  config_ = c;
  n_layers_ = c.n_layers;
  max_rank_ = max_rank;
  rank_ = lora_pool_rank(max_rank);
  dt_ = dt;
  groups_ = lora_group_shapes(c);
  // Offsets: per (layer, group) A of every slot then B of every slot, 16-byte aligned (every
  // block is a multiple of 8 elements: rank_ is).
  a_at_.assign(size_t(n_layers_) * kLoraGroups, 0);
  b_at_.assign(size_t(n_layers_) * kLoraGroups, 0);
  int64_t at = 0, per_slot = 0;
  for (int l = 0; l < n_layers_; ++l)
    for (int gi = 0; gi < kLoraGroups; ++gi) {
      const LoraGroupShape& g = groups_[size_t(gi)];
      const int64_t a = g.a_elems(rank_), b = g.b_elems(rank_);
      a_at_[size_t(l) * kLoraGroups + gi] = at;
      at += a * n_slots;
      b_at_[size_t(l) * kLoraGroups + gi] = at;
      at += b * n_slots;
      per_slot += a + b;
    }
  scale_at_ = at * 2;
  slot_bytes_ = per_slot * 2;
  if (scale_at_ + int64_t(sizeof(float)) * n_slots != lora_pool_bytes(c, n_slots, max_rank))  // what KV budgets leave out
    throw std::logic_error("DeviceLoraPool: the pool's layout and lora_pool_bytes disagree");
  device_.grow(size_t(scale_at_) + sizeof(float) * size_t(n_slots),
               "the LoRA adapter pool (lower max_loras or max_lora_rank)");
  CUDA_CHECK(cudaMemset(device_.get(), 0, device_.bytes()));
  // Packed images kept: twice the slots, within 16 GiB of pinned host memory.
  host_images_max_ = size_t(std::clamp<int64_t>((int64_t(16) << 30) / std::max<int64_t>(slot_bytes_, 1), 1,
                                                int64_t(2) * n_slots));
  n_slots_ = n_slots;
  loaded_.assign(size_t(n_slots), false);
  scales_.assign(size_t(n_slots), 0.0f);
}

size_t DeviceLoraPool::max_partial_floats_per_row() const {
  size_t most = 0;
  for (const LoraGroupShape& g : groups_)
    most = std::max(most, kernels::lora_partial_floats_per_row(g.in, g.n_seg * rank_));
  return most;
}

kernels::LoraPool DeviceLoraPool::pool(int layer, LoraGroup gi) const {
  const LoraGroupShape& g = groups_[size_t(gi)];
  const size_t i = size_t(layer) * kLoraGroups + size_t(gi);
  const auto* base = device_.get<uint16_t>();
  kernels::LoraPool p;
  p.a = base + a_at_[i];
  p.b = base + b_at_[i];
  p.scale = reinterpret_cast<const float*>(device_.get<uint8_t>() + scale_at_);
  p.n_slots = n_slots_;
  p.n_in = g.in;
  p.n_out = g.out;
  p.max_rank = rank_;
  p.n_seg = g.n_seg;
  for (int m = 0; m < g.n_seg; ++m) p.seg_end[m] = g.seg_end[m];
  return p;
}

const uint16_t* DeviceLoraPool::host_image(const std::shared_ptr<const LoraAdapter>& adapter) {
  ++clock_;
  for (HostImage& h : images_)
    if (h.key == adapter.get() && h.owner.lock() == adapter) {
      h.used = clock_;
      ++image_hits_;
      return h.image->get<uint16_t>();
    }
  // A buffer for the new image: a freed adapter's, else a new one below the cap, else the least
  // recently loaded one's (pinned allocations cost milliseconds: buffers are reused).
  HostImage* into = nullptr;
  for (HostImage& h : images_)
    if (h.owner.expired()) into = &h;
  if (!into && images_.size() < host_images_max_) {
    images_.emplace_back();
    into = &images_.back();
    into->image->grow(size_t(slot_bytes_));
  }
  if (!into)
    into = &*std::min_element(images_.begin(), images_.end(),
                              [](const HostImage& a, const HostImage& b) { return a.used < b.used; });
  into->key = nullptr;  // until packed: a throw leaves a free buffer, not a wrong image
  into->owner.reset();
  pack_lora_image(config_, rank_, *adapter, dt_ == kernels::ScalarType::f16, into->image->get<uint16_t>());
  into->key = adapter.get();
  into->owner = adapter;
  into->used = clock_;
  return into->image->get<uint16_t>();
}

void DeviceLoraPool::load(int slot, const std::shared_ptr<const LoraAdapter>& adapter, cudaStream_t stream) {
  if (!reserved())
    throw std::invalid_argument("CudaBackend::load_lora: no adapter pool (Backend::reserve_loras was not called; "
                                "an engine with lora.enabled calls it)");
  if (slot < 0 || slot >= n_slots_)
    throw std::invalid_argument("CudaBackend::load_lora: slot " + std::to_string(slot) + " is outside the pool [0, " +
                                std::to_string(n_slots_) + ") (max_loras)");
  float* scales = reinterpret_cast<float*>(device_.get<uint8_t>() + scale_at_);
  if (!adapter) {  // empty: scale 0, and steps naming the slot are refused (holds())
    loaded_[size_t(slot)] = false;
    scales_[size_t(slot)] = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(scales + slot, &scales_[size_t(slot)], sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  adapter->validate(config_, max_rank_);
  const uint16_t* img = host_image(adapter);
  // Copy each block into the slot's place in its (layer, group) pool.
  auto* dev = device_.get<uint16_t>();
  int64_t at = 0;
  for (int l = 0; l < n_layers_; ++l)
    for (int gi = 0; gi < kLoraGroups; ++gi) {
      const LoraGroupShape& g = groups_[size_t(gi)];
      const size_t i = size_t(l) * kLoraGroups + size_t(gi);
      const int64_t a = g.a_elems(rank_), b = g.b_elems(rank_);
      CUDA_CHECK(cudaMemcpyAsync(dev + a_at_[i] + a * slot, img + at, size_t(a) * 2, cudaMemcpyHostToDevice, stream));
      CUDA_CHECK(cudaMemcpyAsync(dev + b_at_[i] + b * slot, img + at + a, size_t(b) * 2, cudaMemcpyHostToDevice, stream));
      at += a + b;
    }
  scales_[size_t(slot)] = adapter->scale;
  CUDA_CHECK(cudaMemcpyAsync(scales + slot, &scales_[size_t(slot)], sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the image may be evicted by the next load
  loaded_[size_t(slot)] = true;
}

}  // namespace servelab::cuda
