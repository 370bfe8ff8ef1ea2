#pragma once
// LoraImageCache: the packed 16-bit images of LoRA adapters (lora_pack.h) in host memory, which
// the cuda backend's loads copy into a device slot (cuda_lora.h). Packing an adapter and
// allocating a pinned buffer for its image cost milliseconds (llama2-7b rank 16 on the H200 host:
// pack 7.9 ms, one 80 MB cudaHostAlloc 30.6 ms), and on the engine's thread they stall every
// running request's next step. So every buffer is allocated when the cache is made (the pool's
// reserve: no pinning while serving, which would hold the driver against the engine's launches
// from any thread), and stage() hands the packing to a worker thread when a request naming the
// adapter arrives: the load that follows finds the image ready, or waits only for the rest.
//
// Images are keyed by the adapter object (an adapter read again is packed again); `max_images`
// buffers, a free one (never used, or its adapter freed) taken first, else the least recently
// used image's. Plain C++ with the allocation and packing passed in, so the rules are tested
// without a GPU (tests/cuda_backend/lora_images_test.cpp).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/lora/lora_adapter.h"

namespace servelab::cuda {

class LoraImageCache {
 public:
  /// Host memory for one image of `bytes` bytes, freed by the pointer's deleter (cuda: pinned).
  using Allocate = std::function<std::shared_ptr<uint16_t>(size_t bytes)>;
  /// Writes `adapter`'s image into `out` (throws for an adapter that does not fit).
  using Pack = std::function<void(const LoraAdapter& adapter, uint16_t* out)>;
  struct Options {
    size_t image_bytes = 0;
    size_t max_images = 1;     ///< buffers, all allocated by the constructor (>= 1)
    bool worker = true;        ///< false: stage() does nothing and every first load packs in line
  };
  struct Stats {
    int64_t hits = 0;            ///< loads that found their image ready
    int64_t waits = 0;           ///< loads that waited for the worker to finish packing theirs
    int64_t packed_ahead = 0;    ///< images the worker packed
    int64_t packed_in_line = 0;  ///< images a load packed itself (not staged, or evicted before it)
    int64_t stage_failures = 0;  ///< staged packs that threw (the load packs again and reports it)
  };

  /// Allocates every buffer now (what `allocate` throws, e.g. out of pinned memory, propagates).
  LoraImageCache(Options options, const Allocate& allocate, Pack pack);
  ~LoraImageCache();  ///< stops the worker (a pack in progress finishes first)
  LoraImageCache(const LoraImageCache&) = delete;
  LoraImageCache& operator=(const LoraImageCache&) = delete;

  /// Starts packing `adapter`'s image on the worker unless it is kept or under way; returns at once.
  void stage(std::shared_ptr<const LoraAdapter> adapter);
  /// Whether an acquire() of `adapter` now finds its image packed (true), or would wait for the
  /// worker or pack in line (false). An adapter neither kept nor under way (never staged, its
  /// image taken by another since, or its staged pack dropped) is staged now. Without a worker,
  /// always true: nothing packs ahead.
  bool ready(const std::shared_ptr<const LoraAdapter>& adapter);
  /// `adapter`'s image, readable until release(): kept, or waited for, or packed now. One image is
  /// held at a time (the caller's copy). Throws what packing throws.
  const uint16_t* acquire(const std::shared_ptr<const LoraAdapter>& adapter);
  void release();
  Stats stats() const;
  int images() const;  ///< buffers (max_images)

 private:
  struct Image {
    std::shared_ptr<uint16_t> buffer;
    const LoraAdapter* key = nullptr;  // null: free
    std::weak_ptr<const LoraAdapter> owner;
    bool ready = false;    // packed (else packing while key is set)
    bool held = false;     // acquired, being copied from
    uint64_t used = 0;
  };
  using Lock = std::unique_lock<std::mutex>;
  Image* find(const LoraAdapter* key, const std::shared_ptr<const LoraAdapter>& adapter);
  /// A buffer for a new image (lock held): a free one, else the least recently used ready one.
  /// Null when every buffer is held or packing.
  Image* claim();
  void work();

  Options options_;
  Pack pack_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Image> images_;  // made by the constructor, never resized
  std::deque<std::shared_ptr<const LoraAdapter>> queue_;
  uint64_t clock_ = 0;
  Stats stats_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace servelab::cuda
