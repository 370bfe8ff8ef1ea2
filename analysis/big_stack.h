#pragma once
// Runs a function on a thread with a large stack and returns its result (or rethrows its
// exception). The report's output checkers recurse as deep as an output is long (std::regex's
// backtracking executor, a right-recursive GBNF rule): an 8 MiB default stack overflows on outputs
// of tens of thousands of characters, which a server may well send. The stack's pages are only
// committed as they are touched.
#include <pthread.h>

#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

namespace servelab::analysis {

inline constexpr std::size_t kCheckerStackBytes = std::size_t(512) << 20;

template <class F>
auto call_on_big_stack(F&& f, std::size_t stack_bytes = kCheckerStackBytes) -> decltype(f()) {
  using R = decltype(f());
  struct Job {
    F* fn;
    std::optional<R> result;
    std::exception_ptr error;
  } job{&f, std::nullopt, nullptr};
  auto body = [](void* p) -> void* {
    auto* j = static_cast<Job*>(p);
    try {
      j->result.emplace((*j->fn)());
    } catch (...) {
      j->error = std::current_exception();
    }
    return nullptr;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, body, &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) return f();  // no thread to be had: run here, on the caller's stack
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
  return std::move(*job.result);
}

}  // namespace servelab::analysis
