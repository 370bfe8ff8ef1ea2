#include "engine/backend/cuda/lora_images.h"

#include <stdexcept>

namespace servelab::cuda {

LoraImageCache::LoraImageCache(Options options, const Allocate& allocate, Pack pack)
    : options_(std::move(options)), pack_(std::move(pack)) {
  if (options_.max_images < 1) throw std::invalid_argument("LoraImageCache: max_images must be >= 1");
  if (options_.image_bytes < 1) throw std::invalid_argument("LoraImageCache: image_bytes must be >= 1");
  images_.resize(options_.max_images);
  for (Image& img : images_) img.buffer = allocate(options_.image_bytes);
  if (options_.worker) worker_ = std::thread([this] { work(); });
}

LoraImageCache::~LoraImageCache() {
  {
    Lock lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

LoraImageCache::Image* LoraImageCache::find(const LoraAdapter* key, const std::shared_ptr<const LoraAdapter>& adapter) {
  for (Image& img : images_)
    if (img.key == key && img.owner.lock() == adapter) return &img;
  return nullptr;
}

LoraImageCache::Image* LoraImageCache::claim() {
  Image* got = nullptr;
  for (Image& img : images_)
    if (!img.held && (!img.key || (img.ready && img.owner.expired()))) {  // never used, or its adapter freed
      got = &img;
      break;
    }
  if (!got)
    for (Image& img : images_)
      if (img.ready && !img.held && (!got || img.used < got->used)) got = &img;
  if (got) {  // until packed, a claimed buffer belongs to no adapter
    got->key = nullptr;
    got->owner.reset();
    got->ready = false;
  }
  return got;
}

void LoraImageCache::stage(std::shared_ptr<const LoraAdapter> adapter) {
  if (!options_.worker || !adapter) return;
  {
    Lock lock(mutex_);
    if (Image* img = find(adapter.get(), adapter)) {  // kept or under way: wanted soon, so kept longer
      img->used = ++clock_;
      return;
    }
    for (const auto& queued : queue_)
      if (queued == adapter) return;
    queue_.push_back(std::move(adapter));
  }
  changed_.notify_all();
}

bool LoraImageCache::ready(const std::shared_ptr<const LoraAdapter>& adapter) {
  if (!options_.worker || !adapter) return true;
  {
    Lock lock(mutex_);
    if (const Image* img = find(adapter.get(), adapter)) return img->ready;
    for (const auto& queued : queue_)
      if (queued == adapter) return false;
  }
  stage(adapter);
  return false;
}

const uint16_t* LoraImageCache::acquire(const std::shared_ptr<const LoraAdapter>& adapter) {
  if (!adapter) throw std::invalid_argument("LoraImageCache::acquire: no adapter");
  Lock lock(mutex_);
  bool waited = false;
  for (;;) {
    if (Image* img = find(adapter.get(), adapter)) {
      if (img->ready) {
        img->held = true;
        img->used = ++clock_;
        ++stats_.hits;
        return img->buffer.get();
      }
      if (!waited) ++stats_.waits;  // the worker is packing it
      waited = true;
      changed_.wait(lock);
      continue;
    }
    Image* img = claim();
    if (!img) {  // every buffer held or packing: the worker's pack ends soon
      changed_.wait(lock);
      continue;
    }
    img->key = adapter.get();
    img->owner = adapter;
    img->held = true;
    img->used = ++clock_;
    lock.unlock();
    try {
      pack_(*adapter, img->buffer.get());
    } catch (...) {
      lock.lock();
      img->key = nullptr;
      img->owner.reset();
      img->held = false;
      changed_.notify_all();
      throw;
    }
    lock.lock();
    img->ready = true;
    ++stats_.packed_in_line;
    changed_.notify_all();
    return img->buffer.get();
  }
}

void LoraImageCache::release() {
  {
    Lock lock(mutex_);
    for (Image& img : images_) img.held = false;
  }
  changed_.notify_all();
}

LoraImageCache::Stats LoraImageCache::stats() const {
  Lock lock(mutex_);
  return stats_;
}

int LoraImageCache::images() const { return int(images_.size()); }

void LoraImageCache::work() {
  Lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::shared_ptr<const LoraAdapter> adapter = std::move(queue_.front());
    queue_.pop_front();
    if (find(adapter.get(), adapter)) continue;  // kept, or a load packed it meanwhile
    Image* img = claim();
    if (!img) continue;  // every buffer held or packing: the load packs it
    img->key = adapter.get();
    img->owner = adapter;
    img->used = ++clock_;
    lock.unlock();
    bool packed = true;
    try {
      pack_(*adapter, img->buffer.get());
    } catch (...) {
      packed = false;
    }
    lock.lock();
    if (packed) {
      img->ready = true;
      ++stats_.packed_ahead;
    } else {  // the load packs it again and reports why
      img->key = nullptr;
      img->owner.reset();
      ++stats_.stage_failures;
    }
    changed_.notify_all();
  }
}

}  // namespace servelab::cuda
