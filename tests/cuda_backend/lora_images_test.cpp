// LoraImageCache (engine/backend/cuda/lora_images.h): the cuda backend's packed adapter images in
// host memory, with plain allocations and a packing function that writes the adapter's id, so
// the rules run without a GPU: every buffer is allocated up front, an image kept is copied from
// again, a freed adapter's or the least recently used buffer is reused, a staged adapter is
// packed by the worker once (a load waits for a pack under way rather than packing twice), and a
// staged pack that fails is reported by the load.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "engine/backend/cuda/lora_images.h"

namespace servelab::cuda {
namespace lora_images_test {  // named, not anonymous: a unity batch shares one translation unit

constexpr size_t kBytes = 64;

std::shared_ptr<const LoraAdapter> adapter(uint64_t id, const char* name = "a") {
  auto a = std::make_shared<LoraAdapter>();
  a->id = id;
  a->name = name;
  return a;
}

/// Counts allocations and packs; packing writes the adapter's id into every element.
struct Fake {
  std::atomic<int> allocations{0}, packs{0};
  std::function<void(const LoraAdapter&)> before_pack;  // may block or throw
  LoraImageCache make(size_t max_images, bool worker) {
    LoraImageCache::Options o;
    o.image_bytes = kBytes;
    o.max_images = max_images;
    o.worker = worker;
    return LoraImageCache(
        o,
        [this](size_t bytes) {
          ++allocations;
          return std::shared_ptr<uint16_t>(new uint16_t[bytes / 2], std::default_delete<uint16_t[]>());
        },
        [this](const LoraAdapter& a, uint16_t* out) {
          if (before_pack) before_pack(a);
          for (size_t i = 0; i < kBytes / 2; ++i) out[i] = uint16_t(a.id);
          ++packs;
        });
  }
};

bool holds(const uint16_t* image, uint64_t id) {
  for (size_t i = 0; i < kBytes / 2; ++i)
    if (image[i] != uint16_t(id)) return false;
  return true;
}

/// Polls `done` until it holds (a worker's progress), failing after 20 s.
void wait_until(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the worker made no progress";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(LoraImages, AKeptImageIsCopiedFromAgainAndAFreedAdaptersBufferIsReused) {
  Fake f;
  LoraImageCache cache = f.make(4, false);
  EXPECT_EQ(f.allocations, 4);  // up front: no allocation while serving
  auto a = adapter(7);
  EXPECT_TRUE(holds(cache.acquire(a), 7));
  cache.release();
  EXPECT_TRUE(holds(cache.acquire(a), 7));
  cache.release();
  EXPECT_EQ(f.packs, 1);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().packed_in_line, 1);
  a.reset();  // freed: its buffer is the next image's
  auto b = adapter(8);
  EXPECT_TRUE(holds(cache.acquire(b), 8));
  cache.release();
  // The same id in a new object (an adapter read again) is packed again.
  auto b2 = adapter(8);
  EXPECT_TRUE(holds(cache.acquire(b2), 8));
  cache.release();
  EXPECT_EQ(f.packs, 3);
  EXPECT_EQ(f.allocations, 4);
  EXPECT_EQ(cache.images(), 4);
}

TEST(LoraImages, AtTheCapTheLeastRecentlyUsedImageGoes) {
  Fake f;
  LoraImageCache cache = f.make(2, false);
  auto a = adapter(1), b = adapter(2), c = adapter(3);
  for (const auto& x : {a, b, c}) {  // c takes a's buffer
    cache.acquire(x);
    cache.release();
  }
  EXPECT_TRUE(holds(cache.acquire(b), 2));  // kept
  cache.release();
  EXPECT_EQ(f.packs, 3);
  EXPECT_TRUE(holds(cache.acquire(a), 1));  // packed again, over c (now the least recent)
  cache.release();
  EXPECT_EQ(f.packs, 4);
  EXPECT_TRUE(holds(cache.acquire(b), 2));
  cache.release();
  EXPECT_EQ(f.packs, 4);
  EXPECT_EQ(f.allocations, 2);
}

TEST(LoraImages, AStagedAdapterIsPackedByTheWorkerAndItsLoadFindsIt) {
  Fake f;
  LoraImageCache cache = f.make(4, true);
  auto a = adapter(5);
  cache.stage(a);
  cache.stage(a);  // once
  wait_until([&] { return cache.stats().packed_ahead == 1; });
  EXPECT_TRUE(holds(cache.acquire(a), 5));
  cache.release();
  const auto s = cache.stats();
  EXPECT_EQ(s.packed_in_line, 0);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(f.packs, 1);
}

TEST(LoraImages, ALoadWaitsForThePackUnderWayRatherThanPackingTwice) {
  Fake f;
  std::promise<void> started, gate;
  std::shared_future<void> open = gate.get_future().share();
  f.before_pack = [&](const LoraAdapter&) {
    started.set_value();
    open.wait();
  };
  LoraImageCache cache = f.make(4, true);
  auto a = adapter(9);
  cache.stage(a);
  started.get_future().wait();  // the worker is packing a
  auto load = std::async(std::launch::async, [&] { return holds(cache.acquire(a), 9); });
  gate.set_value();
  EXPECT_TRUE(load.get());
  cache.release();
  EXPECT_EQ(f.packs, 1);
  EXPECT_EQ(cache.stats().packed_ahead, 1);
  EXPECT_EQ(cache.stats().packed_in_line, 0);
}

TEST(LoraImages, ReadySaysWhetherALoadWouldFindTheImagePackedAndStagesOneNotUnderWay) {
  Fake f;
  std::promise<void> started, gate;
  std::shared_future<void> open = gate.get_future().share();
  f.before_pack = [&](const LoraAdapter& a) {
    if (a.id != 3) return;
    started.set_value();
    open.wait();
  };
  LoraImageCache cache = f.make(4, true);
  auto a = adapter(3), b = adapter(4);
  cache.stage(a);
  started.get_future().wait();       // the worker is packing a
  EXPECT_FALSE(cache.ready(a));      // under way
  EXPECT_FALSE(cache.ready(b));      // never staged: staged now (queued behind a)
  EXPECT_EQ(cache.stats().packed_ahead, 0);
  gate.set_value();
  wait_until([&] { return cache.stats().packed_ahead == 2; });  // b too, without a stage() of its own
  EXPECT_TRUE(cache.ready(a));
  EXPECT_TRUE(cache.ready(b));
  EXPECT_TRUE(holds(cache.acquire(b), 4));
  cache.release();
  EXPECT_EQ(cache.stats().packed_in_line, 0);
  EXPECT_EQ(f.packs, 2);
  // Without a worker nothing packs ahead, so there is nothing to wait for.
  Fake g;
  LoraImageCache plain = g.make(2, false);
  EXPECT_TRUE(plain.ready(adapter(8)));
  EXPECT_EQ(g.packs, 0);
}

TEST(LoraImages, AnAllocationThatFailsIsReportedWhenTheCacheIsMade) {
  LoraImageCache::Options o;
  o.image_bytes = kBytes;
  o.max_images = 3;
  int n = 0;
  auto allocate = [&](size_t bytes) -> std::shared_ptr<uint16_t> {
    if (++n == 3) throw std::runtime_error("cannot pin 3 x 64 bytes");
    return std::shared_ptr<uint16_t>(new uint16_t[bytes / 2], std::default_delete<uint16_t[]>());
  };
  EXPECT_THROW(LoraImageCache(o, allocate, [](const LoraAdapter&, uint16_t*) {}), std::runtime_error);
  o.max_images = 0;
  EXPECT_THROW(LoraImageCache(o, allocate, [](const LoraAdapter&, uint16_t*) {}), std::invalid_argument);
}

TEST(LoraImages, AStagedPackThatFailsIsReportedByTheLoad) {
  Fake f;
  f.before_pack = [](const LoraAdapter& a) {
    if (a.name == "bad") throw std::invalid_argument("adapter 'bad' does not fit");
  };
  LoraImageCache cache = f.make(2, true);
  auto bad = adapter(1, "bad"), good = adapter(2);
  cache.stage(bad);
  wait_until([&] { return cache.stats().stage_failures == 1; });
  EXPECT_THROW(cache.acquire(bad), std::invalid_argument);
  EXPECT_TRUE(holds(cache.acquire(good), 2));  // the failed packs left their buffers free
  cache.release();
  auto later = adapter(3);  // the worker goes on after a failure
  cache.stage(later);
  wait_until([&] { return cache.stats().packed_ahead == 1; });
  EXPECT_TRUE(holds(cache.acquire(later), 3));
  cache.release();
}

}  // namespace lora_images_test
}  // namespace servelab::cuda
