#include "engine/backend/cuda/lora_images.h"

#include <stdexcept>

namespace servelab::cuda {

LoraImageCache::LoraImageCache(Options options, Allocate allocate, Pack pack)
    : options_(std::move(options)), allocate_(std::move(allocate)), pack_(std::move(pack)) {
  if (options_.max_images < 1) throw std::invalid_argument("LoraImageCache: max_images must be >= 1");
  if (options_.image_bytes < 1) throw std::invalid_argument("LoraImageCache: image_bytes must be >= 1");
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
  for (auto& img : images_)
    if (img->key == key && img->owner.lock() == adapter) return img.get();
  return nullptr;
}

static bool is_free(const auto& img) { return !img->held && (!img->key || (img->ready && img->owner.expired())); }

size_t LoraImageCache::free_buffers() const {
  size_t n = 0;
  for (const auto& img : images_) n += is_free(img) ? 1 : 0;
  return n;
}

LoraImageCache::Image* LoraImageCache::claim(Lock& lock, bool ahead) {
  Image* got = nullptr;
  for (auto& img : images_)
    if (is_free(img)) {
      got = img.get();
      break;
    }
  if (!got && images_.size() + allocating_ < options_.max_images) {
    ++allocating_;
    lock.unlock();
    std::shared_ptr<uint16_t> buffer;
    try {
      buffer = allocate_(options_.image_bytes);
    } catch (...) {
      lock.lock();
      --allocating_;
      throw;
    }
    lock.lock();
    --allocating_;
    ++(ahead ? stats_.allocated_ahead : stats_.allocated_in_line);
    images_.push_back(std::make_unique<Image>());
    images_.back()->buffer = std::move(buffer);
    got = images_.back().get();
  }
  if (!got)
    for (auto& img : images_)
      if (img->ready && !img->held && (!got || img->used < got->used)) got = img.get();
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
    Image* img = claim(lock, false);
    if (!img) {  // every buffer held or packing: the worker's pack ends soon
      changed_.wait(lock);
      continue;
    }
    if (find(adapter.get(), adapter)) continue;  // staged while claim() allocated: img stays free
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
    for (auto& img : images_) img->held = false;
  }
  changed_.notify_all();
}

LoraImageCache::Stats LoraImageCache::stats() const {
  Lock lock(mutex_);
  return stats_;
}

int LoraImageCache::images() const {
  Lock lock(mutex_);
  return int(images_.size());
}

void LoraImageCache::work() {
  if (options_.worker_init) options_.worker_init();
  bool spares_failed = false;  // an allocation ahead threw: leave them to the loads
  auto want_spare = [&] {
    return !spares_failed && free_buffers() + allocating_ < options_.spares &&
           images_.size() + allocating_ < options_.max_images;
  };
  Lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty() || want_spare(); });
    if (stop_) return;
    if (queue_.empty()) {  // a spare buffer
      ++allocating_;
      lock.unlock();
      std::shared_ptr<uint16_t> buffer;
      try {
        buffer = allocate_(options_.image_bytes);
      } catch (...) {
      }
      lock.lock();
      --allocating_;
      if (!buffer) {
        spares_failed = true;
        continue;
      }
      images_.push_back(std::make_unique<Image>());
      images_.back()->buffer = std::move(buffer);
      ++stats_.allocated_ahead;
      changed_.notify_all();
      continue;
    }
    std::shared_ptr<const LoraAdapter> adapter = std::move(queue_.front());
    queue_.pop_front();
    if (find(adapter.get(), adapter)) continue;
    Image* img = nullptr;
    try {
      img = claim(lock, true);
    } catch (...) {  // no memory for it now: the load will try
      ++stats_.stage_failures;
      continue;
    }
    if (!img || find(adapter.get(), adapter)) continue;  // none to spare, or a load packed it meanwhile
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
