#include "engine/backend/sim_lora.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/backend/least_squares.h"
#include "engine/lora/lora_adapter.h"

namespace servelab {

int64_t lora_params(const ModelConfig& model, const LoraAdapter* adapter) {
  if (!adapter) return 0;
  int64_t per_layer = 0;
  for (int t = 0; t < kLoraTargets; ++t)
    if (adapter->targets[size_t(t)])
      per_layer += int64_t(adapter->rank) * (lora_in_dim(model, LoraTarget(t)) + lora_out_dim(model, LoraTarget(t)));
  return per_layer * model.n_layers;
}

double lora_step_seconds(const SimDevice& device, const ModelConfig& model, const Step& step,
                         std::span<const SimLoraSlot> slots) {
  const kernels::StepInput& in = step.in;
  const size_t n_seqs = in.context_lens.size();
  const bool per_seq = !step.seq_lora_slot.empty();
  if (!per_seq && in.lora_slot.empty()) return 0.0;
  auto params_of = [&](int slot) -> int64_t {
    return slot >= 0 && size_t(slot) < slots.size() ? slots[size_t(slot)].params : 0;
  };
  // The step's distinct adapters (a step holds a few: a linear scan) and its prefill runs.
  std::vector<int> all_slots;
  int64_t prefill_runs = 0;
  int last_prefill_slot = -1;  // the slot of the run the last entry extended (-1: none)
  int64_t decode_rows = 0, prefill_rows = 0;
  double flops = 0.0;
  for (size_t e = 0; e < n_seqs; ++e) {
    const int first = in.query_start[e];
    const int rows = in.query_start[e + 1] - first;
    const int slot = per_seq ? (e < step.seq_lora_slot.size() ? step.seq_lora_slot[e] : -1)
                             : (size_t(first) < in.lora_slot.size() ? in.lora_slot[size_t(first)] : -1);
    const int64_t params = params_of(slot);
    if (params <= 0) {
      last_prefill_slot = -1;
      continue;
    }
    flops += 2.0 * static_cast<double>(rows) * static_cast<double>(params);  // x·Aᵀ then ·Bᵀ, every layer
    if (std::find(all_slots.begin(), all_slots.end(), slot) == all_slots.end()) all_slots.push_back(slot);
    if (rows == 1) {
      decode_rows += 1;
      last_prefill_slot = -1;
    } else {
      prefill_rows += rows;
      if (slot != last_prefill_slot) ++prefill_runs;  // a new run of one adapter's rows
      last_prefill_slot = slot;
    }
  }
  if (all_slots.empty()) return 0.0;
  double bytes = 0.0;
  for (const int s : all_slots) bytes += static_cast<double>(params_of(s)) * device.weight_dtype_bytes;
  const double layers = static_cast<double>(model.n_layers);
  double kernels_s = layers * lora_decode_layer_seconds(device, static_cast<double>(decode_rows));
  if (prefill_rows > 0)
    kernels_s += layers * (device.lora_prefill_layer_s +
                           device.lora_prefill_run_s * static_cast<double>(prefill_runs - 1) +
                           device.lora_prefill_row_s * static_cast<double>(prefill_rows));
  const double read_s = bytes / (device.lora_bandwidth_share * device.mem_bw_bytes_s);
  const double compute_s = flops / device.peak_flops;
  return std::max(kernels_s + read_s, compute_s);
}

double lora_decode_layer_seconds(const SimDevice& device, double rows) {
  if (!(rows > 0)) return 0.0;
  const int n = device.lora_decode_knots;
  if (n <= 0) return device.lora_decode_row_s * rows;
  const auto& x = device.lora_decode_knot_rows;
  const auto& y = device.lora_decode_knot_s;
  double x0 = 0.0, y0 = 0.0;
  for (int i = 0; i < n; ++i) {
    if (rows <= x[size_t(i)]) return y0 + (y[size_t(i)] - y0) * (rows - x0) / (x[size_t(i)] - x0);
    x0 = x[size_t(i)];
    y0 = y[size_t(i)];
  }
  return y0 * rows / x0;  // past the last knot: its rate per row
}

double lora_load_seconds(const SimDevice& device, int64_t params) {
  return static_cast<double>(std::max<int64_t>(0, params)) * device.weight_dtype_bytes / device.host_link_bytes_s;
}

double lora_copies_seconds(std::span<const double> copies, double step_s, int n_layers) {
  if (copies.empty()) return 0.0;
  double t = 0.0;
  for (size_t i = 0; i + 1 < copies.size(); ++i) t += copies[i];
  const double last = copies.back(), layers = std::max(1, n_layers);
  return t + std::max(last / layers, last - std::max(0.0, step_s) * (layers - 1.0) / layers);
}

namespace {

/// A host-side pass over an adapter of `params` parameters at `bytes_per_param` bytes each and
/// `bytes_s` bytes a second; 0 where that rate is 0.
double adapter_bytes_seconds(int64_t params, double bytes_per_param, double bytes_s) {
  if (!(bytes_s > 0)) return 0.0;
  return static_cast<double>(std::max<int64_t>(0, params)) * bytes_per_param / bytes_s;
}

}  // namespace

double lora_host_load_seconds(const SimDevice& device, int64_t params) {
  return adapter_bytes_seconds(params, 4.0, device.lora_host_load_bytes_s);
}

double lora_pack_seconds(const SimDevice& device, int64_t params) {
  return adapter_bytes_seconds(params, 4.0, device.lora_pack_bytes_s);
}

namespace {

/// Point p as a shape-only step: its sequences' rows, sequence i on slot i mod adapters.
Step lora_point_step(const LoraProfilePoint& p) {
  Step st;
  st.shape_only = true;
  st.in.query_start.push_back(0);
  const int64_t per_seq = p.rows / std::max(1, p.n_seqs);
  for (int i = 0; i < p.n_seqs; ++i) {
    const int rows = static_cast<int>(i + 1 < p.n_seqs ? per_seq : p.rows - per_seq * (p.n_seqs - 1));
    st.in.query_start.push_back(st.in.query_start.back() + rows);
    st.in.context_lens.push_back(p.context + rows);
    st.in.seq_ids.push_back(int64_t(i) + 1);
    st.seq_lora_slot.push_back(i % std::max(1, p.adapters));
  }
  return st;
}

void check_lora_point(const LoraProfilePoint& p, size_t i) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("LoRA point " + std::to_string(i) + ": " + why);
  };
  if (p.n_seqs < 1) bad("n_seqs must be >= 1 (got " + std::to_string(p.n_seqs) + ")");
  if (p.rows < p.n_seqs || (!p.prefill && p.rows != p.n_seqs))
    bad("rows " + std::to_string(p.rows) + " do not fit " + std::to_string(p.n_seqs) + " sequences of a " +
        (p.prefill ? "prefill" : "decode"));
  if (p.adapters < 1 || p.adapters > p.n_seqs)
    bad("adapters must be in [1, n_seqs = " + std::to_string(p.n_seqs) + "] (got " + std::to_string(p.adapters) + ")");
  if (p.context < 0) bad("context must be >= 0");
  if (!(p.base_s > 0 && p.base_s < 1e3) || !(p.lora_s > 0 && p.lora_s < 1e3))
    bad("base_s and lora_s must be seconds in (0, 1000)");
}

}  // namespace

double lora_point_seconds(const SimDevice& device, const ModelConfig& model, int64_t params, const LoraProfilePoint& p) {
  const std::vector<SimLoraSlot> slots(size_t(std::max(1, p.adapters)), SimLoraSlot{params});
  return lora_step_seconds(device, model, lora_point_step(p), slots);
}

std::vector<LoraRows> lora_rows_of(const Step& step, std::span<const int64_t> slot_params) {
  std::vector<LoraRows> out;
  const kernels::StepInput& in = step.in;
  const bool per_seq = !step.seq_lora_slot.empty();
  if (!per_seq && in.lora_slot.empty()) return out;
  for (size_t e = 0; e + 1 < in.query_start.size(); ++e) {
    const int first = in.query_start[e];
    const int slot = per_seq ? (e < step.seq_lora_slot.size() ? step.seq_lora_slot[e] : -1)
                             : (size_t(first) < in.lora_slot.size() ? in.lora_slot[size_t(first)] : -1);
    if (slot < 0 || size_t(slot) >= slot_params.size() || slot_params[size_t(slot)] <= 0) continue;
    out.push_back({in.query_start[e + 1] - first, slot, slot_params[size_t(slot)]});
  }
  return out;
}

double lora_rows_seconds(const SimDevice& device, const ModelConfig& model, std::span<const LoraRows> rows) {
  if (rows.empty()) return 0.0;
  Step st;
  st.shape_only = true;
  st.in.query_start.push_back(0);
  std::vector<SimLoraSlot> slots;
  for (size_t i = 0; i < rows.size(); ++i) {
    st.in.query_start.push_back(st.in.query_start.back() + rows[i].rows);
    st.in.context_lens.push_back(rows[i].rows);
    st.in.seq_ids.push_back(int64_t(i) + 1);
    st.seq_lora_slot.push_back(rows[i].slot);
    if (size_t(rows[i].slot) >= slots.size()) slots.resize(size_t(rows[i].slot) + 1);
    slots[size_t(rows[i].slot)].params = rows[i].params;
  }
  return lora_step_seconds(device, model, st, slots);
}

SimDevice fit_lora(const SimDevice& device, const ModelConfig& model, const LoraProfile& profile) {
  if (profile.points.empty()) throw std::invalid_argument("a LoRA profile needs at least one point");
  if (profile.params <= 0) throw std::invalid_argument("a LoRA profile's adapters need params > 0");
  for (size_t i = 0; i < profile.points.size(); ++i) check_lora_point(profile.points[i], i);
  // The decode knots: the points' decode row counts (at most kLoraDecodeKnots, spread over them).
  std::vector<double> knots;
  for (const LoraProfilePoint& p : profile.points)
    if (!p.prefill) knots.push_back(static_cast<double>(p.rows));
  std::sort(knots.begin(), knots.end());
  knots.erase(std::unique(knots.begin(), knots.end()), knots.end());
  if (knots.size() > size_t(SimDevice::kLoraDecodeKnots)) {
    std::vector<double> kept;
    for (int i = 0; i < SimDevice::kLoraDecodeKnots; ++i)
      kept.push_back(knots[size_t(i) * (knots.size() - 1) / (SimDevice::kLoraDecodeKnots - 1)]);
    knots = kept;
  }
  // Columns as lora_step_seconds adds them up, per layer: each decode knot (a decode point's rows
  // interpolated between the knots around them), a prefill step, a prefill run after the first
  // (one adapter's consecutive prompts), a prefill row; and the weights read beyond the full
  // bandwidth's time (the read at share s costs bytes / (s · bw) = bytes / bw · (1 + x), x >= 0).
  const size_t n_knots = knots.size(), c_layer = n_knots, c_run = n_knots + 1, c_row = n_knots + 2,
               c_bw = n_knots + 3, n_cols = n_knots + 4;
  const double layers = static_cast<double>(model.n_layers);
  std::vector<std::vector<double>> a;
  std::vector<double> b, w;
  for (const LoraProfilePoint& p : profile.points) {
    const double bytes = double(p.adapters) * double(profile.params) * device.weight_dtype_bytes;
    std::vector<double> row(n_cols, 0.0);
    if (p.prefill) {
      row[c_layer] = layers;
      row[c_run] = layers * static_cast<double>(p.adapters > 1 ? p.n_seqs - 1 : 0);  // sequence i on slot i mod adapters
      row[c_row] = layers * static_cast<double>(p.rows);
    } else {
      const double r = static_cast<double>(p.rows);
      size_t hi = 0;
      while (hi + 1 < n_knots && knots[hi] < r) ++hi;
      if (r >= knots[hi]) {
        row[hi] = layers * r / knots[hi];  // at a knot, or past the last at its rate
      } else {  // between knot hi - 1 (or 0) and knot hi
        const double lo_x = hi > 0 ? knots[hi - 1] : 0.0, t = (r - lo_x) / (knots[hi] - lo_x);
        row[hi] = layers * t;
        if (hi > 0) row[hi - 1] = layers * (1.0 - t);
      }
    }
    row[c_bw] = bytes / device.mem_bw_bytes_s;
    a.push_back(row);
    b.push_back(p.lora_s - p.base_s - bytes / device.mem_bw_bytes_s);
    w.push_back(1.0 / p.base_s);  // errors relative to the step the sim prices
  }
  const std::vector<double> x = nonnegative_least_squares(a, b, w, std::vector<bool>(n_cols, true));
  SimDevice out = device;
  if (n_knots > 0) {
    out.lora_decode_knots = int(n_knots);
    for (size_t i = 0; i < n_knots; ++i) {
      out.lora_decode_knot_rows[i] = knots[i];
      out.lora_decode_knot_s[i] = x[i];
    }
    out.lora_decode_row_s = x[n_knots - 1] / knots[n_knots - 1];
  }
  out.lora_prefill_layer_s = x[c_layer];
  out.lora_prefill_run_s = x[c_run];
  out.lora_prefill_row_s = x[c_row];
  out.lora_bandwidth_share = 1.0 / (1.0 + x[c_bw]);
  return out;
}

}  // namespace servelab
