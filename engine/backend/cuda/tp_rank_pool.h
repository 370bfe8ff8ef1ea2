#pragma once
// RankPool: the tensor-parallel backend's host threads, one per rank (tp_backend.cpp). Private to
// the cuda backend; plain C++.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/backend/cuda/tp_errors.h"

namespace servelab::cuda {

/// One host thread per rank. run(task) runs task(r) on rank r's thread for every r, waits for all,
/// and rethrows the lowest rank's exception. With a hard deadline (seconds > 0), a rank whose task
/// has not returned by then (stuck where no watchdog reaches: inside a driver call) ends the
/// process with a message rather than hanging it; the ranks' own watchdogs (tp_comm.h) fire first.
///
/// Hand-offs spin before they sleep (spin_us > 0): a rank thread that finished a task polls for
/// the next one for spin_us before blocking on the condition variable, and run() polls for the
/// ranks' completion (the whole step, a GPU forward) before blocking. A blocked thread's wake-up
/// costs tens of microseconds, more in a VM, and a decode step pays one per hand-off: the
/// rank that wakes last delays every rank at the step's first all-reduce. spin_us = 0 blocks at
/// once (every hand-off through the condition variables).
class RankPool {
 public:
  explicit RankPool(int n, int spin_us = 0) : errors_(n), spin_(std::chrono::microseconds(std::max(0, spin_us))) {
    for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankPool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  void run(const std::function<void(int)>& task, double hard_deadline_s = 0.0) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      task_ = &task;
      std::fill(errors_.begin(), errors_.end(), nullptr);
      pending_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = t0 + std::chrono::duration<double>(hard_deadline_s);
    if (spin_.count() > 0) {  // the ranks' tasks end together (their collectives pair them): poll
      for (unsigned i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
        if ((i & 1023) == 1023 && hard_deadline_s > 0.0 && std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::yield();
      }
    }
    std::unique_lock<std::mutex> lk(mu_);
    const auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    if (hard_deadline_s > 0.0) {
      if (!done_.wait_until(lk, deadline, done)) {
        std::fprintf(stderr,
                     "servelab: backend cuda (tensor parallel): %d rank thread(s) still inside a step or set-up "
                     "%g s after it began, past every watchdog; ending the process instead of hanging\n",
                     pending_.load(), hard_deadline_s);
        std::abort();
      }
    } else {
      done_.wait(lk, done);
    }
    task_ = nullptr;
    // The lowest rank's own failure; a rank that only gave up because another failed
    // (cuda::TpPeerFailed) is reported only when no rank has anything else to say.
    std::exception_ptr first;
    for (const std::exception_ptr& e : errors_) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const TpPeerFailed&) {
        if (!first) first = e;
        continue;
      } catch (...) {
      }
      std::rethrow_exception(e);
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  void loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* task = nullptr;
      // The next task is usually a step away (the engine's host work between steps): poll first.
      const auto spin_end = std::chrono::steady_clock::now() + spin_;
      for (unsigned i = 0; spin_.count() > 0 && generation_.load(std::memory_order_acquire) == seen; ++i) {
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_end) break;
        std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait(lk, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
        seen = generation_.load(std::memory_order_relaxed);
        if (stop_) return;
        task = task_;
      }
      std::exception_ptr error;
      try {
        (*task)(r);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(mu_);
      errors_[r] = error;
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  std::chrono::microseconds spin_;
};

}  // namespace servelab::cuda
