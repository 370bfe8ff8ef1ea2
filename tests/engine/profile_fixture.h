#pragma once
// Profile files for the cost-model tests: a temporary file, a servelab.profile/2 text of given
// points, and a synthetic profile drawn from the profiled model's own class.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/cost_model.h"
#include "engine/model/config.h"
#include "tests/engine/step_shapes.h"

namespace servelab::profile_fixture {

class TempFile {
 public:
  explicit TempFile(const std::string& text) : path_(::testing::TempDir() + "servelab_profile_" +
                                                     std::to_string(reinterpret_cast<uintptr_t>(this)) + ".json") {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A servelab.profile/2 text for `m` whose every point has the given shape and time.
inline std::string profile_text(const ModelConfig& m, const std::vector<TimedStep>& steps, const std::string& hardware = "cpu-2core",
                         int tp = 1) {
  nlohmann::json j;
  j["schema"] = "servelab.profile/2";
  j["backend"] = "cpu";
  j["hardware"] = hardware;
  j["tensor_parallel"] = tp;
  j["model"] = {{"name", m.name}, {"hidden_size", m.hidden_size}, {"n_layers", m.n_layers}, {"n_heads", m.n_heads},
                {"n_kv_heads", m.n_kv_heads}, {"head_dim", m.head_dim()}, {"intermediate_size", m.intermediate_size},
                {"vocab_size", m.vocab_size}, {"shape_hash", model_shape_hash(m)}};
  j["kv_dtype_bytes"] = 4;
  j["samples"] = nlohmann::json::array();
  for (const TimedStep& t : steps)
    j["samples"].push_back({{"phase", "x"}, {"n_seqs", t.shape.n_seqs}, {"n_tokens", t.shape.n_tokens},
                            {"n_padding_tokens", t.shape.n_padding_tokens}, {"n_sampled", t.shape.n_sampled},
                            {"sum_context", t.shape.sum_context}, {"max_context", t.shape.max_context},
                            {"prefill_pairs", t.shape.prefill_pairs}, {"decode_context", t.shape.decode_context},
                            {"step_s", t.step_s}});
  return j.dump();
}

/// A synthetic profile drawn from the model class itself: a non-linear matrix term over rows
/// (with a fixed cost), a per-sampled-row cost, and attention by prefill pairs and decode context.
inline std::vector<TimedStep> synthetic_profile() {
  auto matrix = [](double rows) { return 0.004 + 2e-4 * rows + 3e-3 * std::sqrt(rows); };
  auto time = [&](const StepShape& s) {
    return matrix(double(s.n_rows())) + 5e-4 * s.n_sampled + 2e-8 * s.prefill_pairs + 7e-7 * s.decode_context;
  };
  std::vector<TimedStep> steps;
  for (int t : {16, 32, 64, 128, 256}) steps.push_back({test_shapes::prefill_shape(t, 0), 0});
  for (int b : {1, 2, 4, 8, 16})
    for (int c : {32, 128, 256}) steps.push_back({test_shapes::decode_shape(b, c), 0});
  for (int t : {32, 128})
    for (int c : {32, 128, 256}) steps.push_back({test_shapes::prefill_shape(t, c), 0});
  for (TimedStep& s : steps) s.step_s = time(s.shape);
  return steps;
}

}  // namespace servelab::profile_fixture
