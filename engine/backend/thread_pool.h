#pragma once
// A small fork-join pool for the CPU backend: the caller plus n_threads - 1 workers. It runs
// every parallel part of a forward (dense layers split by output columns, attention, norms), so
// that one set of threads does all the work: OpenBLAS runs single-threaded inside its items.
// Owned by one backend; no global state.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace servelab {

class ThreadPool {
 public:
  /// Body of a parallel loop: items [begin, end) run on worker `worker` (0..n_threads-1), so a
  /// body can use per-worker scratch without locking.
  using Body = std::function<void(int worker, int64_t begin, int64_t end)>;

  /// n_threads >= 1 counts the calling thread; 1 means everything runs inline. An idle worker
  /// polls for the next job for spin_us microseconds before it sleeps: a forward issues a few
  /// jobs per layer, and waking a sleeping thread costs a system call and a reschedule each time.
  explicit ThreadPool(int n_threads, int spin_us = 50);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Runs body over [0, n_items) in chunks of `grain` items handed out dynamically (uneven items,
  /// such as causal attention rows, balance themselves); returns when all are done. The caller
  /// takes items too and never waits for a worker that has not joined yet (on a busy machine a
  /// late worker finds the job done and goes back to waiting). The first exception a body throws
  /// is rethrown here. Not reentrant: a body must not call parallel_for.
  void parallel_for(int64_t n_items, int64_t grain, const Body& body);

 private:
  void worker_loop(int worker);
  void run_chunks(int worker);

  std::vector<std::thread> workers_;
  int spin_us_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};  // bumped per job (under mutex_); polled while spinning
  bool job_open_ = false;                // workers may still join the job; guarded by mutex_
  int n_joined_ = 0;                     // workers inside the current job; guarded by mutex_
  bool stopping_ = false;                // guarded by mutex_
  std::atomic<bool> stopping_flag_{false};
  const Body* body_ = nullptr;
  int64_t n_items_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;  // guarded by mutex_
};

}  // namespace servelab
