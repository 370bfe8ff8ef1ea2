#include "engine/backend/cuda/cuda_lora.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/lora_sgmv.h"

namespace servelab::cuda {

void DeviceLoraPool::reserve(const ModelConfig& c, int n_slots, int max_rank, kernels::ScalarType dt,
                             std::vector<std::vector<int32_t>> ffn_order) {
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
  // Packed images kept: twice the slots, within 16 GiB of pinned host memory, every buffer
  // allocated now (lora_images.h); packed on the cache's worker thread (plain C++, no CUDA call).
  LoraImageCache::Options images;
  images.image_bytes = size_t(slot_bytes_);
  images.max_images = size_t(std::clamp<int64_t>((int64_t(16) << 30) / std::max<int64_t>(slot_bytes_, 1), 1,
                                                 int64_t(2) * n_slots));
  const ModelConfig config = c;
  const int rank = rank_;
  const bool f16 = dt == kernels::ScalarType::f16;
  images_ = std::make_unique<LoraImageCache>(
      images,
      [n = images.max_images](size_t bytes) {
        void* p = nullptr;
        if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
          (void)cudaGetLastError();
          throw std::runtime_error("CudaBackend::reserve_loras: cannot pin " + std::to_string(n) + " x " +
                                   std::to_string(bytes >> 20) + " MiB of host memory for the adapters' images "
                                   "(twice max_loras): lower max_loras or max_lora_rank");
        }
        return std::shared_ptr<uint16_t>(static_cast<uint16_t*>(p), [](uint16_t* q) { cudaFreeHost(q); });
      },
      [config, rank, f16, order = std::make_shared<const std::vector<std::vector<int32_t>>>(std::move(ffn_order))](
          const LoraAdapter& a, uint16_t* out) {
        pack_lora_image(config, rank, a, f16, out, 0, order->empty() ? nullptr : order.get());
      });
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&copy_start_, cudaEventDisableTiming));
  layer_copied_.assign(size_t(n_layers_), nullptr);
  for (cudaEvent_t& e : layer_copied_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
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

void DeviceLoraPool::stage(std::shared_ptr<const LoraAdapter> adapter) {
  if (!reserved() || !adapter) return;
  try {
    adapter->validate(config_, max_rank_);
  } catch (const std::exception&) {
    return;  // load() reports it
  }
  images_->stage(std::move(adapter));
}

bool DeviceLoraPool::ready(const std::shared_ptr<const LoraAdapter>& adapter) {
  if (!reserved() || !adapter) return true;
  try {
    adapter->validate(config_, max_rank_);
  } catch (const std::exception&) {
    return true;  // load() reports it
  }
  return images_->ready(adapter);
}

LoraImageCache::Stats DeviceLoraPool::image_stats() const { return images_ ? images_->stats() : LoraImageCache::Stats{}; }
int DeviceLoraPool::host_images() const { return images_ ? images_->images() : 0; }

DeviceLoraPool::~DeviceLoraPool() {
  if (copying_) {
    cudaEventSynchronize(layer_copied_.back());  // the image is freed with the cache
    images_->release();
  }
  for (cudaEvent_t e : layer_copied_)
    if (e) cudaEventDestroy(e);
  if (copy_start_) cudaEventDestroy(copy_start_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
}

void DeviceLoraPool::settle(bool block) {
  if (!copying_) return;
  if (block) {
    CUDA_CHECK(cudaEventSynchronize(layer_copied_.back()));
  } else {
    const cudaError_t e = cudaEventQuery(layer_copied_.back());
    if (e == cudaErrorNotReady) return;
    CUDA_CHECK(e);
  }
  copying_ = false;
  images_->release();
}

void DeviceLoraPool::wait_layer(int layer, cudaStream_t stream) const {
  if (copying_) CUDA_CHECK(cudaStreamWaitEvent(stream, layer_copied_[size_t(layer)], 0));
}

void DeviceLoraPool::wait_copy(cudaStream_t stream) const {
  if (copying_) CUDA_CHECK(cudaStreamWaitEvent(stream, layer_copied_.back(), 0));
}

void DeviceLoraPool::load(int slot, const std::shared_ptr<const LoraAdapter>& adapter, cudaStream_t stream) {
  if (!reserved())
    throw std::invalid_argument("CudaBackend::load_lora: no adapter pool (Backend::reserve_loras was not called; "
                                "an engine with lora.enabled calls it)");
  if (slot < 0 || slot >= n_slots_)
    throw std::invalid_argument("CudaBackend::load_lora: slot " + std::to_string(slot) + " is outside the pool [0, " +
                                std::to_string(n_slots_) + ") (max_loras)");
  float* scales = reinterpret_cast<float*>(device_.get<uint8_t>() + scale_at_);
  settle(true);  // one image held at a time (LoraImageCache), and a slot's copies in order
  if (!adapter) {  // empty: scale 0, and steps naming the slot are refused (holds())
    loaded_[size_t(slot)] = false;
    scales_[size_t(slot)] = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(scales + slot, &scales_[size_t(slot)], sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  adapter->validate(config_, max_rank_);
  const uint16_t* img = images_->acquire(adapter);
  loaded_[size_t(slot)] = false;
  try {
    // After what the caller's stream has queued (a step that may still read the slot), the scale
    // first (pageable: staged before the call returns), then each layer's blocks into the slot's
    // places in its (layer, group) pools, an event after each layer.
    CUDA_CHECK(cudaEventRecord(copy_start_, stream));
    CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, copy_start_, 0));
    scales_[size_t(slot)] = adapter->scale;
    CUDA_CHECK(cudaMemcpyAsync(scales + slot, &scales_[size_t(slot)], sizeof(float), cudaMemcpyHostToDevice,
                               copy_stream_));
    auto* dev = device_.get<uint16_t>();
    int64_t at = 0;
    for (int l = 0; l < n_layers_; ++l) {
      for (int gi = 0; gi < kLoraGroups; ++gi) {
        const LoraGroupShape& g = groups_[size_t(gi)];
        const size_t i = size_t(l) * kLoraGroups + size_t(gi);
        const int64_t a = g.a_elems(rank_), b = g.b_elems(rank_);
        CUDA_CHECK(cudaMemcpyAsync(dev + a_at_[i] + a * slot, img + at, size_t(a) * 2, cudaMemcpyHostToDevice,
                                   copy_stream_));
        CUDA_CHECK(cudaMemcpyAsync(dev + b_at_[i] + b * slot, img + at + a, size_t(b) * 2, cudaMemcpyHostToDevice,
                                   copy_stream_));
        at += a + b;
      }
      CUDA_CHECK(cudaEventRecord(layer_copied_[size_t(l)], copy_stream_));
    }
  } catch (...) {
    cudaStreamSynchronize(copy_stream_);
    images_->release();
    throw;
  }
  copying_ = true;
  loaded_[size_t(slot)] = true;
  static const bool in_line = [] {  // SERVELAB_LORA_COPY=inline: the load waits for its copy (diagnostic)
    const char* s = std::getenv("SERVELAB_LORA_COPY");
    return s && std::string(s) == "inline";
  }();
  if (in_line) settle(true);
}

}  // namespace servelab::cuda
