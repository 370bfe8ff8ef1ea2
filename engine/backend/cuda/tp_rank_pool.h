#pragma once
// RankPool: the tensor-parallel backend's host threads, one per rank (tp_backend.cpp). Private to
// the cuda backend; plain C++.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/backend/cuda/tp_comm.h"

namespace servelab::cuda {

/// One host thread per rank. run(task) runs task(r) on rank r's thread for every r, waits for all,
/// and rethrows the lowest rank's exception. With a hard deadline (seconds > 0), a rank whose task
/// has not returned by then (stuck where no watchdog reaches: inside a driver call) ends the
/// process with a message rather than hanging it; the ranks' own watchdogs (tp_comm.h) fire first.
class RankPool {
 public:
  explicit RankPool(int n) : errors_(n) {
    for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankPool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
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
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    wake_.notify_all();
    std::unique_lock<std::mutex> lk(mu_);
    if (hard_deadline_s > 0.0) {
      if (!done_.wait_for(lk, std::chrono::duration<double>(hard_deadline_s), [&] { return pending_ == 0; })) {
        std::fprintf(stderr,
                     "servelab: backend cuda (tensor parallel): %d rank thread(s) still inside a step or set-up "
                     "%g s after it began, past every watchdog; ending the process instead of hanging\n",
                     pending_, hard_deadline_s);
        std::abort();
      }
    } else {
      done_.wait(lk, [&] { return pending_ == 0; });
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
      {
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
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
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace servelab::cuda
