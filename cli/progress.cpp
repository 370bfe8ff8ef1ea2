#include "cli/progress.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace servelab::cli {

ProgressLine::ProgressLine(bool enabled, std::string label, int total)
    : enabled_(enabled && stderr_is_terminal()),
      label_(std::move(label)),
      total_(total),
      start_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { done(); }

bool ProgressLine::stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

void ProgressLine::on_finished(double t_s, int n_tokens) {
  ++done_;
  recent_.emplace_back(t_s, n_tokens);
  while (recent_.size() > 1 && recent_.back().first - recent_.front().first > 5.0) recent_.pop_front();
  draw();
}

void ProgressLine::draw(bool force) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  double tok_s = 0.0;
  if (recent_.size() > 1) {
    int tokens = 0;
    for (size_t i = 1; i < recent_.size(); ++i) tokens += recent_[i].second;
    const double span = recent_.back().first - recent_.front().first;
    if (span > 0) tok_s = tokens / span;
  }
  std::fprintf(stderr, "\r\033[K  %-28s %5d/%-5d requests  %6.1fs  %8.1f tok/s", label_.c_str(), done_,
               total_, elapsed, tok_s);
  std::fflush(stderr);
}

void ProgressLine::done() {
  if (!enabled_ || finished_) return;
  draw(true);
  std::fprintf(stderr, "\n");
  finished_ = true;
}

namespace {
std::atomic<bool> g_stop{false};  // set only by the signal handler; read by the runner
extern "C" void on_signal(int) {
  if (g_stop.exchange(true)) std::_Exit(130);
}
}  // namespace

const std::atomic<bool>& install_stop_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  return g_stop;
}

}  // namespace servelab::cli
