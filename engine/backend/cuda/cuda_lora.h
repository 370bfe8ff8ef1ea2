#pragma once
// The cuda backend's LoRA adapters (Backend::load_lora): a device pool of max_loras slots made
// once (Backend::reserve_loras), so CUDA graphs bake in fixed addresses and a slot's new adapter
// needs no recapture. Per layer, the adapted linears are grouped as the forward fuses them
// (q|k|v, o, gate|up, down: lora_pack.h); each group's pool is kernels::LoraPool's layout for
// every slot:
//   A [n_slots, n_seg · rank, in]   (the segments' ranks stacked: one shrink per group)
//   B [n_slots, out, rank]          (the fused weight's output columns: one expand per group)
// rank = max_lora_rank rounded up to 8 (16-byte loads), smaller adapters padded with zeros, a
// linear the adapter leaves alone all zeros. One scale per slot (alpha / r, PEFT's).
// A load copies the adapter's pinned host image of one slot into the slot's places on the pool's
// own copy stream, layer by layer, and returns without waiting (the "adapter miss"): an eager step
// waits for layer l's copy just before layer l (wait_layer), so the copy runs beside the step's
// first layers instead of ahead of the step; a graph step waits for the whole copy before its
// launch (wait_copy). One copy is under way at a time (the image cache holds one image).
// Images are kept per adapter in pinned host memory (LoraImageCache, lora_images.h: twice the
// slots within 16 GiB, allocated by reserve(), least recently used first out), so an adapter seen
// before costs only the copy; stage() packs a new adapter's fp32 pairs into 16 bits
// (pack_lora_image) on the cache's worker thread when a request naming it arrives, so its first
// load finds the image ready or waits for the rest.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/cuda/device_memory.h"
#include "engine/backend/cuda/lora_images.h"
#include "engine/backend/cuda/lora_pack.h"
#include "engine/lora/lora_adapter.h"
#include "kernels/lora.h"

namespace servelab::cuda {

class DeviceLoraPool {
 public:
  /// Allocates n_slots slots for adapters of rank <= max_rank over `config`'s shapes (one GPU:
  /// every head and FFN column), 16-bit `dt`. Throws std::invalid_argument naming a bad count or
  /// rank (max_rank <= kernels::kLoraMaxRank), std::runtime_error when the memory cannot be had.
  /// ffn_order: an act-order checkpoint's gate|up row orders (PackedQuantLinear::row_order, one a
  /// layer), which every adapter's image then takes (pack_lora_image); empty: none.
  void reserve(const ModelConfig& config, int n_slots, int max_rank, kernels::ScalarType dt,
               std::vector<std::vector<int32_t>> ffn_order = {});
  bool reserved() const { return n_slots_ > 0; }
  int n_slots() const { return n_slots_; }
  int max_rank() const { return max_rank_; }
  /// The most fp32 partial sums the grouped shrink writes per row for any group
  /// (kernels::lora_partial_floats_per_row): the scratch's row width.
  size_t max_partial_floats_per_row() const;
  /// Slot `slot` holds `adapter` (null empties it). The copy starts after what `stream` has
  /// queued and runs on the pool's copy stream; steps reading the pool wait for it (wait_layer,
  /// wait_copy); with SERVELAB_LORA_COPY=inline in the environment (a diagnostic: the miss as it
  /// cost before) load() waits for it. A copy still under way from an earlier load is waited for
  /// first. Emptying a slot writes its scale on `stream` and synchronizes it. Throws std::invalid_argument for a slot
  /// outside the pool or an adapter whose shapes or rank do not fit.
  void load(int slot, const std::shared_ptr<const LoraAdapter>& adapter, cudaStream_t stream);
  /// A load's copy may still be under way (settle() has not seen it finish).
  bool copying() const { return copying_; }
  /// `stream` waits for layer `layer`'s part of the copy under way (layer 0's includes the slot's
  /// scale), or for all of it (wait_copy); nothing when none is.
  void wait_layer(int layer, cudaStream_t stream) const;
  void wait_copy(cudaStream_t stream) const;
  /// The copy under way finished (block: waits for it): its image is released and copying() is
  /// false. Without block, returns at once if it has not finished.
  void settle(bool block);
  DeviceLoraPool() = default;
  DeviceLoraPool(const DeviceLoraPool&) = delete;
  DeviceLoraPool& operator=(const DeviceLoraPool&) = delete;
  ~DeviceLoraPool();
  /// A request naming `adapter` arrived: its image is packed on the worker (LoraImageCache::stage).
  void stage(std::shared_ptr<const LoraAdapter> adapter);
  /// A load() of `adapter` would find its image packed (LoraImageCache::ready: else it is staged
  /// now if it was not); true for an adapter that does not fit, which load() reports.
  bool ready(const std::shared_ptr<const LoraAdapter>& adapter);
  /// The packed images in pinned host memory: how loads found them (hits, waits, packs in line).
  LoraImageCache::Stats image_stats() const;
  int host_images() const;
  bool holds(int slot) const { return slot >= 0 && slot < n_slots_ && loaded_[size_t(slot)]; }
  /// Each slot's scale on the host (0 for an empty slot): the tensor-core path's alpha.
  const float* host_scales() const { return scales_.data(); }
  /// Group g of layer l, every slot.
  kernels::LoraPool pool(int layer, LoraGroup g) const;
  /// Device bytes of the pool; bytes one slot's image copies.
  int64_t bytes() const { return int64_t(device_.bytes()); }
  int64_t slot_bytes() const { return slot_bytes_; }

 private:
  std::array<LoraGroupShape, kLoraGroups> groups_{};
  int n_layers_ = 0, n_slots_ = 0, max_rank_ = 0, rank_ = 0;
  kernels::ScalarType dt_ = kernels::ScalarType::bf16;
  ModelConfig config_;
  DeviceBuffer device_;       // [layer][group][A of every slot, B of every slot], then scale [slots]
  std::vector<int64_t> a_at_, b_at_;  // element offsets of (layer, group)'s A and B
  int64_t scale_at_ = 0;      // byte offset of the scales
  int64_t slot_bytes_ = 0;
  std::unique_ptr<LoraImageCache> images_;  // made by reserve()
  std::vector<bool> loaded_;
  std::vector<float> scales_;
  // The copy stream (made by reserve()), an event after each layer's copies, and one recorded on
  // the caller's stream that the copies start after.
  cudaStream_t copy_stream_ = nullptr;
  std::vector<cudaEvent_t> layer_copied_;
  cudaEvent_t copy_start_ = nullptr;
  bool copying_ = false;
};

}  // namespace servelab::cuda
