#pragma once
// A real run's serving efficiency: how close its steps came to the hardware. Each step's
// roofline (the time its FLOPs and bytes need at the device's measured copy bandwidth and GEMM
// peak: max(bytes / bandwidth, FLOPs / peak), recorded in steps.jsonl by loadgen/roofline_meter.h
// from the cost model's terms) summed, over the same steps' measured times summed: overall and per
// step class (prefill-only, decode-only, mixed). 1 would be a run at the ceilings; the sim's
// steps carry no roofline, since its times are priced rather than measured.
//
// Beside it, what kept the engine from the hardware between its steps: the host's pauses, the time
// from one step's end to the next step's start while requests were running or waiting after the
// first (the engine had work: the driver or the host was busy elsewhere, e.g. an in-process
// workload drawing a new adapter's weights), in total, the largest, and how many exceeded 1 ms.
//
// summary.json, per run (absent when its steps carry no roofline):
//   "roofline": {"efficiency", "roofline_s", "measured_s", "n_steps",
//                "by_class": {"prefill"|"decode"|"mixed": {"efficiency", "roofline_s", "measured_s", "n_steps"}},
//                "ceilings": {"copy_bytes_s", "gemm_flops", "source", "detail"} | null,
//                "host_pauses": {"s", "max_s", "n_over_1ms"}}
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/records/roofline_record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis {

/// Σ roofline and Σ measured time over some steps.
struct RooflineShare {
  int64_t n_steps = 0;
  double roofline_s = 0.0;
  double measured_s = 0.0;
  /// roofline_s / measured_s; NaN without measured time (JSON null).
  double efficiency() const;
  void add(double roofline, double measured);
  void merge(const RooflineShare& other);
};

/// The host's pauses between steps while the engine had work (above).
struct HostPauses {
  double s = 0.0;          ///< their total
  double max_s = 0.0;      ///< the largest
  int64_t n_over_1ms = 0;  ///< how many exceeded 1 ms
  void add(double gap);
  void merge(const HostPauses& other);
};

/// One run's efficiency. `overall` sums the three classes exactly (same steps, same order).
struct RooflineEfficiency {
  RooflineShare overall;
  RooflineShare prefill, decode, mixed;
  std::optional<RooflineCeilings> ceilings;  ///< what the rooflines were priced at (null when unknown)
  HostPauses host_pauses;  ///< over each repetition's steps in order (a summary without them reads 0)

  const RooflineShare& of(StepClass c) const;
  /// Adds `other`'s steps (pooling runs, e.g. a strategy's rates); keeps these ceilings, or takes
  /// other's when these are unknown.
  void merge(const RooflineEfficiency& other);
};

/// The efficiency over the steps labelled `label` or one of its repetitions (`label#k`) that carry
/// a roofline (idle steps are not recorded); nullopt when none does (the sim, HTTP runs, old
/// records).
std::optional<RooflineEfficiency> roofline_efficiency(const std::string& label, const std::vector<StepRecord>& steps,
                                                      const std::optional<RooflineCeilings>& ceilings);

void to_json(nlohmann::ordered_json& j, const RooflineShare& s);
void from_json(const nlohmann::ordered_json& j, RooflineShare& s);
void to_json(nlohmann::ordered_json& j, const RooflineEfficiency& e);
/// Throws std::invalid_argument naming the key when one is missing or malformed.
void from_json(const nlohmann::ordered_json& j, RooflineEfficiency& e);

/// "1.00 (33 > 1 ms)" for tables: the pauses' total seconds and how many exceeded 1 ms.
std::string format_host_pauses(const HostPauses& p);
/// A step record's `run` is `label` itself or one of its repetitions, "label#k".
bool step_run_matches(const std::string& run, const std::string& label);
/// "0.412" for tables: the efficiency to 3 decimals, "sim" for a sim run, "-" without one.
std::string format_efficiency(const std::optional<RooflineEfficiency>& e, const std::string& backend);
/// "copy 13.2 GB/s, GEMM 92.1 GFLOP/s (probe)" for report headers.
std::string format_ceilings(const RooflineCeilings& c);

}  // namespace servelab::analysis
