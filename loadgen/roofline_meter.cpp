#include "loadgen/roofline_meter.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/backend/ceiling_probe.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/backend/profiler.h"

namespace servelab {

StepClass step_class_of(const StepShape& s) {
  if (s.prefill_pairs == 0.0) return StepClass::decode;
  if (s.decode_context == 0.0) return StepClass::prefill;
  return StepClass::mixed;
}

RooflineMeter::RooflineMeter(const ModelConfig& model, const SimDevice& base, const RooflineCeilings& ceilings,
                             int tensor_parallel, const StorageFormats& formats)
    : model_(model), device_(base) {
  ceilings.validate();
  device_.peak_flops = ceilings.gemm_flops;
  device_.mem_bw_bytes_s = ceilings.copy_bytes_s;
  terms_ = RooflineTerms::of(model_, device_, tensor_parallel, formats);
}

StepRoofline RooflineMeter::price(const StepShape& shape) const {
  StepShape useful = shape;
  // StepShape::of charges each padding row max_context attention pairs; take them back out.
  useful.attention_pairs -= static_cast<double>(shape.n_padding_tokens) * static_cast<double>(shape.max_context);
  useful.n_padding_tokens = 0;
  useful.swap_bytes = 0;  // host link traffic, not the device's ceilings
  const RooflineBound b = roofline_bound(terms_, useful);
  StepRoofline r;
  r.step_class = step_class_of(shape);
  r.seconds = b.seconds();
  r.flops = b.flops;
  r.bytes = b.bytes;
  r.shape = StepShapeRecord{shape.n_seqs,        shape.n_sampled,   shape.sum_context, shape.prefill_pairs,
                            shape.decode_context, shape.verify_rows, shape.verify_pairs};
  return r;
}

std::optional<SimDevice> roofline_base_device(BackendKind kind, const std::string& device_description) {
  if (kind == BackendKind::cpu) return SimDevice::preset("cpu-2core");
  if (kind == BackendKind::cuda) {
    const std::string name = sim_hardware_for_device(device_description);
    if (!name.empty()) return SimDevice::preset(name);
  }
  return std::nullopt;
}

RooflineCeilings read_ceilings_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the ceilings file");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  const nlohmann::json* c = &j;
  if (j.is_object() && j.contains("ceilings")) c = &j["ceilings"];
  if (!c->is_object() || !c->contains("copy_bytes_s") || !c->contains("gemm_flops") || !(*c)["copy_bytes_s"].is_number() ||
      !(*c)["gemm_flops"].is_number())
    throw std::runtime_error(path + ": expected numbers copy_bytes_s and gemm_flops (at the top level or under \"ceilings\")");
  RooflineCeilings r;
  r.copy_bytes_s = (*c)["copy_bytes_s"].get<double>();
  r.gemm_flops = (*c)["gemm_flops"].get<double>();
  r.source = CeilingSource::profile;
  r.detail = path;
  try {
    r.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return r;
}

namespace {

/// Leaves each executed step's roofline with its recorder.
class RooflineTapBackend final : public ForwardingBackend {
 public:
  RooflineTapBackend(std::unique_ptr<Backend> inner, const RooflineMeter& meter, std::optional<StepRoofline>& last)
      : ForwardingBackend(std::move(inner)), meter_(meter), last_(last) {}
  StepOutput execute(const Step& step) override {
    StepOutput out = inner().execute(step);
    last_ = meter_.price(StepShape::of(step));  // after the step: its own time is not in its measure
    return out;
  }

 private:
  const RooflineMeter& meter_;
  std::optional<StepRoofline>& last_;
};

}  // namespace

RooflineRecorder::RooflineRecorder(BackendKind kind, std::string ceilings_file, int threads, int tensor_parallel)
    : kind_(kind), ceilings_file_(std::move(ceilings_file)), threads_(threads), tensor_parallel_(std::max(1, tensor_parallel)) {}

RooflineRecorder::~RooflineRecorder() = default;

std::unique_ptr<Backend> RooflineRecorder::wrap(std::unique_ptr<Backend> inner, const StorageFormats& formats) {
  if (!resolved_) {
    resolved_ = true;
    base_ = roofline_base_device(kind_, inner->device_description());
    if (!base_) {
      note_ = "no device preset matches '" + inner->device_description() + "': no roofline";
    } else if (!ceilings_file_.empty()) {
      ceilings_ = read_ceilings_file(ceilings_file_);
    } else if (kind_ == BackendKind::cpu) {
      CeilingProbeOptions o;
      o.threads = threads_;
      const ProbedCeilings p = probe_cpu_ceilings(o);
      ceilings_ = RooflineCeilings{p.copy_bytes_s, p.gemm_flops, CeilingSource::probe, p.detail};
    } else {
      ceilings_ = RooflineCeilings{base_->mem_bw_bytes_s, base_->peak_flops, CeilingSource::table,
                                   "device table: " + base_->name};
    }
  }
  if (!ceilings_) return inner;
  const std::string key = formats.quant.describe() + "/" + to_string(formats.kv_cache_dtype);
  auto it = std::find_if(meters_.begin(), meters_.end(), [&](const auto& m) { return m.first == key; });
  if (it == meters_.end())
    it = meters_.insert(meters_.end(), {key, std::make_unique<RooflineMeter>(inner->config(), *base_, *ceilings_,
                                                                             tensor_parallel_, formats)});
  return std::make_unique<RooflineTapBackend>(std::move(inner), *it->second, last_);
}

std::optional<StepRoofline> RooflineRecorder::take() { return std::exchange(last_, std::nullopt); }

}  // namespace servelab
