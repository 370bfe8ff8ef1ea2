#include "engine/backend/thread_pool.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>

namespace servelab {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads < 1)
    throw std::invalid_argument("ThreadPool: n_threads (" + std::to_string(n_threads) + ") must be >= 1");
  for (int w = 1; w < n_threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
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
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_chunks(worker);
    {
      std::lock_guard lock(mutex_);
      if (--n_busy_ == 0) done_.notify_one();
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
    n_busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return n_busy_ == 0; });
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace servelab
