#pragma once
// Clock: where the runner gets "now" from. Steady (real time, sleeps) or virtual (jumps).
#include <chrono>
#include <thread>

namespace servelab {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now() const = 0;               ///< seconds since the clock's start
  virtual void sleep_until(double t) = 0;       ///< returns at or after t
  /// After a step that took `duration_s`: the virtual clock moves forward, the steady one has.
  virtual void advance(double duration_s) = 0;
  virtual bool is_virtual() const = 0;
};

class SteadyClock final : public Clock {
 public:
  SteadyClock() : start_(std::chrono::steady_clock::now()) {}
  double now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void sleep_until(double t) override {
    std::this_thread::sleep_until(start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(t)));
  }
  void advance(double) override {}
  bool is_virtual() const override { return false; }

 private:
  std::chrono::steady_clock::time_point start_;
};

class VirtualClock final : public Clock {
 public:
  double now() const override { return now_; }
  void sleep_until(double t) override { if (t > now_) now_ = t; }
  void advance(double duration_s) override { now_ += duration_s; }
  bool is_virtual() const override { return true; }

 private:
  double now_ = 0.0;
};

}  // namespace servelab
