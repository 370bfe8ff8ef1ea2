#pragma once
// A quant_gemv product's inputs (FP8 or INT4 codes, scales, zeros, x; INT4's packed layout where
// it packs) on host and device, and a split-K workspace as a caller allocates it: shared by the
// quant_gemv GPU tests.
#include <random>
#include <vector>

#include "kernels/int4_pack.h"
#include "kernels/int4_quant.h"
#include "kernels/quant_gemv.h"
#include "kernels/ref/int4_pack_ref.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/quant_gemv_ref.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels::testing {

/// One product's inputs on host and device, drawn from rng.
struct QuantProblem {
  bool int4 = false;
  int m = 0, n = 0, k = 0, group = 128, x_stride = 0, n_scales = 0;
  std::vector<uint8_t> w;
  std::vector<float> scales, zeros, xf;
  std::vector<uint16_t> xb;
  Int4Packed packed;  // int4 with K and the group multiples of 128
  DeviceBuffer dx, dw, ds, dz, dpc, dpg;

  QuantProblem(std::mt19937_64& rng, bool int4_, int m_, int n_, int k_, int group_, bool per_channel)
      : int4(int4_), m(m_), n(n_), k(k_), group(group_), x_stride(k_ + 8) {
    std::uniform_int_distribution<int> byte(0, 255), nib(0, 15);
    std::uniform_real_distribution<float> pos(0.01f, 0.1f), unit(-1.0f, 1.0f);
    std::vector<uint8_t> codes(size_t(n) * k);
    for (uint8_t& c : codes) {
      c = uint8_t(int4 ? nib(rng) : byte(rng));
      if (!int4 && (c & 0x7f) == 0x7f) c = 0x3f;  // no NaN codes
    }
    w = int4 ? pack_int4_rows(codes, n, k) : codes;
    scales.resize(int4 ? size_t(k / group) * n : per_channel ? size_t(n) : 1);
    for (float& s : scales) s = pos(rng);
    if (int4) {
      zeros.resize(scales.size());
      for (float& z : zeros) z = float(nib(rng));
    }
    n_scales = int(scales.size());
    xb.resize(size_t(m) * x_stride);
    xf.resize(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) {
      xb[i] = f32_to_bf16(unit(rng));
      xf[i] = bf16_to_f32(xb[i]);
    }
    dx = testing::upload(xb);
    dw = testing::upload(w);
    ds = testing::upload(scales);
    dz = testing::upload(int4 ? zeros : std::vector<float>{0.0f});
    if (int4 && int4_pack::Layout{n, k, group}.packable()) {
      packed = pack_int4_fragments_ref(w.data(), scales.data(), zeros.data(), n, k, group);
      dpc = testing::upload(packed.codes);
      dpg = testing::upload(packed.groups);
    }
  }

  QuantGemvArgs args(void* y, bool out_bf16, bool accumulate) const {
    QuantGemvArgs a;
    a.kind = int4 ? QuantWeightKind::int4 : QuantWeightKind::fp8_e4m3;
    a.x = dx.get();
    a.x_stride = x_stride;
    a.w = dw.get<uint8_t>();
    a.scales = ds.get<float>();
    a.zeros = int4 ? dz.get<float>() : nullptr;
    if (!packed.codes.empty()) {
      a.w_packed = dpc.get<uint8_t>();
      a.w_packed_groups = dpg.get();
    }
    a.n_scales = n_scales;
    a.group_size = group;
    a.y = y;
    a.out_bf16 = out_bf16;
    a.m = m;
    a.n = n;
    a.k = k;
    a.accumulate = accumulate;
    return a;
  }

  std::vector<float> reference(const std::vector<float>& y0, bool accumulate) const {
    std::vector<float> ref = y0;
    quant_gemv_ref(int4, xf.data(), x_stride, w.data(), scales.data(), zeros.data(), n_scales, group, ref.data(), m, n,
                   k, accumulate);
    return ref;
  }
};

/// A workspace as a caller allocates it (counters zeroed once).
struct QuantWorkspace {
  DeviceBuffer partials, counters;
  int64_t floats = 0;
  int n_counters = 0;
  QuantWorkspace(int max_n, int max_k)
      : floats(quant_gemv_workspace_floats(max_n, max_k)), n_counters(quant_gemv_workspace_counters(max_n)) {
    partials = DeviceBuffer(size_t(floats) * 4);
    counters = DeviceBuffer(size_t(n_counters) * 4);
    CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  }
  void attach(QuantGemvArgs& a) {
    a.partials = partials.get<float>();
    a.partial_capacity = floats;
    a.counters = counters.get<int32_t>();
    a.counter_capacity = n_counters;
  }
  bool counters_zero() const {
    for (int32_t c : testing::download<int32_t>(counters, size_t(n_counters)))
      if (c != 0) return false;
    return true;
  }
};

}  // namespace servelab::kernels::testing
