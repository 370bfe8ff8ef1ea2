#pragma once
// A small fork-join pool for the CPU backend's attention: the caller plus n_threads - 1 workers
// that sleep between jobs. Owned by one backend; no global state.
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

  /// n_threads >= 1 counts the calling thread; 1 means everything runs inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Runs body over [0, n_items) in chunks of `grain` items handed out dynamically (uneven items,
  /// such as causal attention rows, balance themselves); returns when all are done. The first
  /// exception a body throws is rethrown here. Not reentrant.
  void parallel_for(int64_t n_items, int64_t grain, const Body& body);

 private:
  void worker_loop(int worker);
  void run_chunks(int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // bumped per job; guarded by mutex_
  int n_busy_ = 0;           // workers still inside the current job; guarded by mutex_
  bool stopping_ = false;
  const Body* body_ = nullptr;
  int64_t n_items_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;  // guarded by mutex_
};

}  // namespace servelab
