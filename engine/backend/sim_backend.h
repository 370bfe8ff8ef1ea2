#pragma once
// SimBackend: never runs the model. It predicts each step's duration from a cost model (a
// roofline over a device's peak FLOP/s and memory bandwidth, or a linear model fitted to step
// times that `servelab profile --json` measured on a real backend) and hands back
// deterministic pseudo-random tokens, so schedulers can be studied at GPU scale on a laptop.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"

namespace servelab {

/// A device as the roofline sees it. validate() names the bad field.
struct SimDevice {
  std::string name = "h100";
  double peak_flops = 989e12;          ///< dense matmul FLOP/s at the weight dtype
  double mem_bw_bytes_s = 3.35e12;     ///< device memory bandwidth
  double step_overhead_s = 2e-4;       ///< fixed per step: launches, scheduling, sampling
  int kv_dtype_bytes = 2;              ///< bytes per K/V element (bf16 by default)
  int weight_dtype_bytes = 2;          ///< bytes per weight element read each step
  double host_link_bytes_s = 25e9;     ///< swap traffic (device <-> host), e.g. PCIe
  void validate() const;

  /// Rough public figures: "h100" (SXM, bf16 dense), "h200", "cpu-2core" (fp32 on 2 AVX2 cores).
  static SimDevice preset(const std::string& name);  ///< throws listing the known names
  static std::vector<std::string> preset_names();
};

/// What one step computes, as the cost models read it.
struct StepShape {
  int64_t n_tokens = 0;          ///< positions computed (padding excluded)
  int64_t n_padding_tokens = 0;  ///< rows computed and thrown away
  int64_t n_sampled = 0;         ///< rows that go through the LM head
  int64_t sum_context = 0;       ///< Σ over sequences of their context after the step (n_computed + n_new)
  double attention_pairs = 0.0;  ///< Σ over computed tokens of the positions each attends to
  int64_t swap_bytes = 0;        ///< swapped out or in before the step

  /// The shape of a batch (positions read from each entry's sequence).
  static StepShape of(const Batch& batch);
};

/// One measured step for calibration.
struct StepSample {
  int64_t n_tokens = 0;
  int64_t sum_context = 0;
  double step_s = 0.0;
};

/// Per-step time = a + b·n_tokens + c·sum_context, fitted by least squares.
struct LinearStepModel {
  double a_s = 0.0;           ///< fixed per step
  double b_s_per_token = 0.0;
  double c_s_per_context = 0.0;
  double predict(int64_t n_tokens, int64_t sum_context) const;
  /// Throws std::invalid_argument when the samples cannot determine the three coefficients.
  static LinearStepModel fit(std::span<const StepSample> samples);
};

/// How the sim backend prices a step: roofline over a SimDevice, or a calibrated linear model.
struct SimCostModel {
  enum class Kind { roofline, linear };
  Kind kind = Kind::roofline;
  SimDevice device;        ///< roofline figures; also kv_dtype_bytes and the swap link for both kinds
  LinearStepModel linear;  ///< Kind::linear
  std::string source;      ///< "roofline:h100" or the profile path, for reports

  static SimCostModel roofline(const SimDevice& device);
  /// Reads a profile: {"samples": [{"n_tokens": N, "sum_context": C, "step_s": T}, ...]} (also
  /// accepted: "steps" for "samples", "seconds" or "duration_s" for "step_s"; an optional top-level
  /// "kv_dtype_bytes") and fits the linear model. `device` supplies the K/V element size and the
  /// swap link. Throws std::runtime_error naming the file (and the sample index) on bad input.
  static SimCostModel from_profile_json(const std::string& path, const SimDevice& device = SimDevice{});

  /// Predicted seconds for a step of `shape` on `model`.
  double step_seconds(const ModelConfig& model, const StepShape& shape) const;
};

/// The simulated backend. K/V are never stored: init_kv allocates nothing and swaps only add
/// their transfer time to the next step.
class SimBackend final : public Backend {
 public:
  SimBackend(const ModelConfig& model, const SimCostModel& cost);

  std::string name() const override { return "sim"; }
  const ModelConfig& config() const override { return model_; }
  /// 2 (K and V) × n_layers × n_kv_heads × head_dim × device.kv_dtype_bytes.
  int64_t kv_bytes_per_slot() const override;
  void init_kv(int64_t n_slots) override;
  /// Checks every entry holds its slots, predicts the step, and samples a token for each entry
  /// with sample set: a pure function of (seed, sample index, position) in [2, vocab).
  ForwardResult forward(const Batch& batch, const KvManager& kv) override;
  void copy_slots(std::span<const KvCopy> copies) override;
  void save_slots(std::span<const int64_t> slots, std::vector<std::byte>& host) override;
  void load_slots(std::span<const int64_t> slots, const std::vector<std::byte>& host) override;

  const SimCostModel& cost() const { return cost_; }

 private:
  ModelConfig model_;
  SimCostModel cost_;
  int64_t n_slots_ = 0;
  int64_t pending_swap_bytes_ = 0;
  int64_t pending_copy_bytes_ = 0;
};

}  // namespace servelab
