#pragma once
// A one-line progress display for a run (requests done of total, elapsed, current throughput),
// redrawn in place on a terminal; silent when stderr is not a terminal or with --quiet.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <string>

namespace servelab::cli {

class ProgressLine {
 public:
  ProgressLine(bool enabled, std::string label, int total);
  ~ProgressLine();
  /// A request finished with `n_tokens` output tokens at engine time `t_s`.
  void on_finished(double t_s, int n_tokens);
  /// Redraws at most ~10 times a second.
  void draw(bool force = false);
  void done();

  static bool stderr_is_terminal();

 private:
  bool enabled_;
  std::string label_;
  int total_;
  int done_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  std::deque<std::pair<double, int>> recent_;  ///< (engine time, tokens) over the last few seconds
  bool finished_ = false;
};

/// Installs a SIGINT/SIGTERM handler that sets the returned flag (a second Ctrl-C exits at once).
const std::atomic<bool>& install_stop_handler();

}  // namespace servelab::cli
