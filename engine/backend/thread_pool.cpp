#include "engine/backend/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SERVELAB_CPU_RELAX() _mm_pause()
#else
#define SERVELAB_CPU_RELAX() std::this_thread::yield()
#endif

namespace servelab {

ThreadPool::ThreadPool(int n_threads, int spin_us) : spin_us_(std::max(0, spin_us)) {
  if (n_threads < 1)
    throw std::invalid_argument("ThreadPool: n_threads (" + std::to_string(n_threads) + ") must be >= 1");
  for (int w = 1; w < n_threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stopping_flag_.store(true, std::memory_order_relaxed);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int worker) {
  for (;;) {
    const int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_items_) return;
    const int64_t end = std::min(begin + grain_, n_items_);
    try {
      (*body_)(worker, begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_items_, std::memory_order_relaxed);  // stop handing out work
      return;
    }
  }
}

void ThreadPool::worker_loop(int worker) {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = 0;
  for (;;) {
    // Poll briefly: the next job of a forward usually follows within microseconds.
    if (spin_us_ > 0) {
      const auto until = Clock::now() + std::chrono::microseconds(spin_us_);
      for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
        if (stopping_flag_.load(std::memory_order_relaxed)) break;
        SERVELAB_CPU_RELAX();
        if ((i & 63) == 63 && Clock::now() >= until) break;
      }
    }
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stopping_) return;
      seen = generation_.load(std::memory_order_relaxed);
      if (!job_open_) continue;  // came too late: the caller already finished that job
      ++n_joined_;
    }
    run_chunks(worker);
    {
      std::lock_guard lock(mutex_);
      if (--n_joined_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n_items, int64_t grain, const Body& body) {
  if (n_items <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n_items <= grain) {
    body(0, 0, n_items);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_items_ = n_items;
    grain_ = grain;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    job_open_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(0);  // returns once every item is handed out
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    job_open_ = false;  // no worker joins from now on; wait for those inside
    done_.wait(lock, [&] { return n_joined_ == 0; });
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace servelab
