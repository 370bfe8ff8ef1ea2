#pragma once
// Helpers of the profiler tests (tests/backend/profiler_test.cpp, profiler_interleave_test.cpp): a
// small grid and a CpuBackend that counts and records its steps.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/profiler.h"
#include "engine/backend/step_input.h"

namespace servelab::profiler_testing {

inline ProfileOptions small_options() {
  ProfileOptions o;
  o.prefill_lens = {4, 8};
  o.batch_sizes = {1, 3};
  o.contexts = {6, 12};
  o.prompt_lens = {6};
  o.chunk_lens = {5};
  o.repeats = 2;
  o.min_point_s = 1e9;  // always both repeats
  return o;
}

/// A CpuBackend that counts execute() calls (warm-up runs included) and records what each saw.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(CpuBackend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  KvCacheSpec kv_cache_spec() const override { return inner_.kv_cache_spec(); }
  void init_kv(int64_t n_slots) override {
    arena_slots = n_slots;
    inner_.init_kv(n_slots);
  }
  BackendCaps caps() const override { return inner_.caps(); }
  std::string device_description() const override { return inner_.device_description(); }
  StepOutput execute(const Step& step) override {
    ++n_forward;
    first_slots.clear();
    for (int s = 0; s < step.in.n_seqs(); ++s) first_slots.push_back(step.in.addressing().slot(s, 0));
    const StepShape shape = StepShape::of(step);
    shapes.push_back(shape.n_rows() * 100000 + shape.sum_context);
    return inner_.execute(step);
  }
  void copy_slots(std::span<const KvCopy> copies) override { inner_.copy_slots(copies); }
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override { return inner_.make_host_pool(n_slots); }
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override { inner_.swap_out(runs, pool); }
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override {
    for (const KvSwap& r : runs) n_loaded += r.n_slots;
    inner_.swap_in(runs, pool);
  }
  std::vector<int> decode_row_buckets() const override { return buckets; }
  int n_forward = 0;
  int64_t n_loaded = 0;
  std::vector<int> buckets;  ///< what decode_row_buckets() reports
  int64_t arena_slots = 0;
  std::vector<int64_t> first_slots;  ///< of the last forward(): each sequence's slot of position 0
  std::vector<int64_t> shapes;       ///< rows and context of every forward(), in order

 private:
  CpuBackend& inner_;
};

}  // namespace servelab::profiler_testing
