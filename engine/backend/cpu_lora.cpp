#include "engine/backend/cpu_lora.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu_gemm.h"

namespace servelab {

void CpuLora::load(int slot, std::shared_ptr<const LoraAdapter> adapter, const ModelConfig& config) {
  if (slot < 0 || slot > 65535) throw std::invalid_argument("CpuBackend::load_lora: slot " + std::to_string(slot) + " out of range");
  if (adapter) adapter->validate(config, adapter->rank);
  if (size_t(slot) >= slots_.size()) slots_.resize(size_t(slot) + 1);
  slots_[size_t(slot)] = std::move(adapter);
}

bool CpuLora::plan(const kernels::StepInput& in) {
  runs_.clear();
  max_rank_ = 0;
  for (size_t r = 0; r < in.lora_slot.size(); ++r) {
    const int s = in.lora_slot[r];
    if (s < 0) continue;
    if (size_t(s) >= slots_.size() || !slots_[size_t(s)])
      throw std::invalid_argument("CpuBackend: lora_slot[" + std::to_string(r) + "] = " + std::to_string(s) +
                                  " names a slot holding no adapter");
    const LoraAdapter* a = slots_[size_t(s)].get();
    if (!runs_.empty() && runs_.back().adapter == a && runs_.back().end == int(r)) {
      ++runs_.back().end;
    } else {
      runs_.push_back({int(r), int(r) + 1, a});
    }
    max_rank_ = std::max(max_rank_, a->rank);
  }
  return active();
}

void CpuLora::shrink(int layer, LoraTarget t, const float* x) {
  if (runs_.empty()) return;
  std::vector<float>& xa = xa_[size_t(t)];
  if (xa.size() < size_t(runs_.back().end) * max_rank_) xa.resize(size_t(runs_.back().end) * max_rank_);
  for (const Run& run : runs_) {
    const LoraPair& p = run.adapter->layers[size_t(layer)][size_t(t)];
    if (!p.present()) continue;
    const int r = run.adapter->rank, in = static_cast<int>(p.a.size()) / r, n = run.end - run.begin;
    float* out = xa.data() + size_t(run.begin) * max_rank_;
    gemm_nt(x + size_t(run.begin) * in, n, in, p.a.data(), r, out, r, false);  // [n, r], stride r
    for (int i = 0; i < n * r; ++i) out[i] *= run.adapter->scale;
  }
}

void CpuLora::expand(int layer, LoraTarget t, int r0, int r1, int c0, int c1, float* y, int ld_y) const {
  const std::vector<float>& xa = xa_[size_t(t)];
  for (const Run& run : runs_) {
    const int b = std::max(r0, run.begin), e = std::min(r1, run.end);
    if (b >= e) continue;
    const LoraPair& p = run.adapter->layers[size_t(layer)][size_t(t)];
    if (!p.present()) continue;
    const int r = run.adapter->rank;
    const float* in = xa.data() + size_t(run.begin) * max_rank_ + size_t(b - run.begin) * r;
    gemm_nt(in, e - b, r, p.b.data() + size_t(c0) * r, c1 - c0, y + size_t(b) * ld_y + c0, ld_y, true);
  }
}

}  // namespace servelab
