#pragma once
// Starting `servelab` as a child process the test can signal (SIGINT, SIGKILL), and the slow
// real-time scenario those tests interrupt mid-run.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {

/// Two strategies on the CPU backend at 2 req/s (40 requests each): ~20 s of real time per
/// strategy, so a signal sent once a few records are on disk lands mid-run.
inline std::string slow_scenario(int seed) {
  return "name: slow\nseed: " + std::to_string(seed) + R"(
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 4, max_model_len: 256}
strategies:
  - {label: first, batching: continuous, max_num_seqs: 8, max_num_batched_tokens: 256}
  - {label: second, batching: dynamic, max_batch_size: 4}
workload:
  rates: [2]
  n_requests: 40
  prompt_tokens: 16
  output_tokens: 8
)";
}

/// Starts `servelab ARGS...` with stdout and stderr in `log`; returns its pid (-1 on failure).
inline pid_t spawn_servelab(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s = {servelab_exe()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace servelab::cli_test
