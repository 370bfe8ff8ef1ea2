#include "loadgen/step_timing_file.h"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "loadgen/records/step_record.h"

namespace servelab {
namespace {

/// One step of validate-sim's steps_real.jsonl (n_tokens, n_padding_tokens, n_seqs, sum_context,
/// max_context, prefill_pairs, decode_context, measured_s).
StepTiming step_of_real_line(const nlohmann::json& j) {
  StepTiming t;
  t.measured_s = j.at("measured_s").get<double>();
  t.start_s = j.value("start_s", -1.0);  // written since 2026-11-30 (the sustained-load state)
  StepShape& s = t.shape;
  s.n_tokens = j.at("n_tokens").get<int64_t>();
  s.n_padding_tokens = j.value("n_padding_tokens", int64_t(0));
  s.n_seqs = j.at("n_seqs").get<int64_t>();
  s.n_sampled = j.value("n_sampled", s.n_seqs);  // steps_real.jsonl: every sequence draws
  s.sum_context = j.at("sum_context").get<int64_t>();
  s.max_context = j.at("max_context").get<int64_t>();
  s.prefill_pairs = j.at("prefill_pairs").get<double>();
  s.decode_context = j.at("decode_context").get<double>();
  s.attention_pairs = s.prefill_pairs + s.decode_context;
  if (j.contains("lora"))  // [rows, slot, params] of each entry on an adapter
    for (const nlohmann::json& r : j.at("lora"))
      t.lora.push_back({r.at(0).get<int32_t>(), r.at(1).get<int32_t>(), r.at(2).get<int64_t>()});
  return t;
}

/// One step of a run's steps.jsonl (a cpu or cuda run's, written since the step records carry
/// roofline.shape): the backend's forward time measured (host.forward_s, else duration_s), the shape
/// from the record and its roofline.shape.
StepTiming step_of_run_line(const nlohmann::json& j) {
  const StepRecord r = j.get<StepRecord>();
  if (!r.roofline || !r.roofline->shape)
    throw std::invalid_argument("a step record without roofline.shape (a sim run, or written before 2026-11-30): "
                                "nothing to price it by");
  const StepShapeRecord& h = *r.roofline->shape;
  StepTiming t;
  t.measured_s = r.forward_s > 0.0 ? r.forward_s : r.duration_s;
  t.start_s = r.start_s + (r.forward_s > 0.0 ? r.host_before_s : 0.0);  // when the forward began
  StepShape& s = t.shape;
  s.n_tokens = r.n_tokens;
  s.n_padding_tokens = r.n_padding_tokens;
  s.n_seqs = h.n_seqs;
  s.n_sampled = h.n_sampled;
  s.sum_context = h.sum_context;
  s.max_context = r.max_context;
  s.prefill_pairs = h.prefill_pairs;
  s.decode_context = h.decode_context;
  s.verify_rows = h.verify_rows;
  s.verify_pairs = h.verify_pairs;
  // StepShape::of charges each padding row the longest context's keys
  s.attention_pairs = s.prefill_pairs + s.decode_context + double(s.n_padding_tokens) * double(s.max_context);
  return t;
}

}  // namespace

std::vector<RecordedStep> read_recorded_steps(const std::string& path, const std::string& run) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<RecordedStep> steps;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      RecordedStep r;
      r.run = j.value("run", std::string());
      if (!run.empty() && r.run != run) continue;
      if (j.contains("measured_s")) {
        r.timing = step_of_real_line(j);
        r.swap_bytes = j.value("swap_bytes", int64_t(0));
      } else {
        r.timing = step_of_run_line(j);  // a run's records carry no swap bytes
        if (j.contains("host")) {
          r.record_start_s = j.value("start_s", -1.0);
          r.n_waiting = j.value("n_waiting", -1);
        }
      }
      if (r.timing.shape.n_tokens < 1 || r.timing.shape.n_seqs < 1 || !(r.timing.measured_s > 0))
        throw std::invalid_argument("a step needs n_tokens, n_seqs and a measured time > 0");
      steps.push_back(std::move(r));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  if (steps.empty()) throw std::runtime_error(path + ": no steps" + (run.empty() ? "" : " of run " + run));
  return steps;
}

std::vector<StepTiming> read_step_timings(const std::string& path, const std::string& run) {
  std::vector<StepTiming> out;
  for (RecordedStep& r : read_recorded_steps(path, run)) out.push_back(std::move(r.timing));
  return out;
}

}  // namespace servelab
