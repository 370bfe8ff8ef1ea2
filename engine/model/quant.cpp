#include "engine/model/quant.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/model/fp8.h"
#include "engine/model/half.h"

namespace servelab {

const char* to_string(Quantization q) {
  switch (q) {
    case Quantization::none: return "none";
    case Quantization::fp8: return "fp8";
    case Quantization::int4_awq: return "int4_awq";
    case Quantization::int4_gptq: return "int4_gptq";
  }
  return "?";
}

Quantization parse_quantization(const std::string& s) {
  if (s == "none") return Quantization::none;
  if (s == "fp8") return Quantization::fp8;
  if (s == "int4_awq" || s == "awq") return Quantization::int4_awq;
  if (s == "int4_gptq" || s == "gptq") return Quantization::int4_gptq;
  throw std::invalid_argument("quantization must be none, fp8, int4_awq or int4_gptq (got '" + s + "')");
}

const char* to_string(Fp8WeightScales s) { return s == Fp8WeightScales::per_tensor ? "per_tensor" : "per_channel"; }

const char* to_string(ActivationQuant a) {
  switch (a) {
    case ActivationQuant::none: return "none";
    case ActivationQuant::fp8_per_tensor: return "fp8_per_tensor";
    case ActivationQuant::fp8_per_token: return "fp8_per_token";
    case ActivationQuant::fp8_static: return "fp8_static";
  }
  return "?";
}

std::string QuantScheme::describe() const {
  switch (method) {
    case Quantization::none: return "none";
    case Quantization::fp8:
      return std::string("fp8 (") + (fp8_scales == Fp8WeightScales::per_tensor ? "per-tensor" : "per-channel") +
             " weights, " +
             (activations == ActivationQuant::fp8_per_tensor  ? "per-tensor dynamic"
              : activations == ActivationQuant::fp8_per_token ? "per-token dynamic"
              : activations == ActivationQuant::fp8_static    ? "static"
                                                              : "unquantized") +
             " activations)";
    case Quantization::int4_awq:
    case Quantization::int4_gptq:
      return std::string(to_string(method)) + " (group " + std::to_string(group_size) + (act_order ? ", act order" : "") +
             (pack_quantized ? ", compressed-tensors pack-quantized" : "") + ")";
  }
  return "?";
}

QuantScheme QuantScheme::for_method(Quantization method, bool per_channel) {
  QuantScheme s;
  s.method = method;
  if (method == Quantization::fp8) {
    s.fp8_scales = per_channel ? Fp8WeightScales::per_channel : Fp8WeightScales::per_tensor;
    s.activations = per_channel ? ActivationQuant::fp8_per_token : ActivationQuant::fp8_per_tensor;
  }
  return s;
}

int64_t QuantLinear::storage_bytes() const {
  if (kind == Kind::fp8_e4m3) return out * in + int64_t(scales.size()) * 4;
  return (out * in + 1) / 2 + n_groups() * out * 2 + (n_groups() * out + 1) / 2 + int64_t(g_idx.size()) * 4;
}

void QuantLinear::validate() const {
  auto bad = [](const std::string& what) { return std::invalid_argument("quantized weight: " + what); };
  if (out < 1 || in < 1) throw bad("shape [" + std::to_string(out) + ", " + std::to_string(in) + "] must be positive");
  if (int64_t(codes.size()) != out * in)
    throw bad("codes hold " + std::to_string(codes.size()) + " values, [out, in] needs " + std::to_string(out * in));
  if (kind == Kind::fp8_e4m3) {
    if (scales.size() != 1 && int64_t(scales.size()) != out)
      throw bad("fp8 scales hold " + std::to_string(scales.size()) + " values, expected 1 or out = " + std::to_string(out));
    return;
  }
  if (group_size < 1) throw bad("group_size must be >= 1 (got " + std::to_string(group_size) + ")");
  if (int64_t(scales.size()) != n_groups() * out || int64_t(zeros.size()) != n_groups() * out)
    throw bad("int4 scales/zeros hold " + std::to_string(scales.size()) + "/" + std::to_string(zeros.size()) +
              " values, [n_groups, out] needs " + std::to_string(n_groups() * out));
  if (!g_idx.empty() && int64_t(g_idx.size()) != in)
    throw bad("g_idx holds " + std::to_string(g_idx.size()) + " values, expected in = " + std::to_string(in));
  for (int32_t g : g_idx)
    if (g < 0 || g >= n_groups()) throw bad("g_idx value " + std::to_string(g) + " outside [0, " + std::to_string(n_groups()) + ")");
  for (uint8_t c : codes)
    if (c > 15) throw bad("int4 code " + std::to_string(c) + " > 15");
  for (uint8_t z : zeros)  // 16: GPTQ v1 stores zero − 1, and a stored 15 reads back as 16
    if (z > 16) throw bad("int4 zero point " + std::to_string(z) + " > 16");
}

QuantLinear quantize_fp8(const float* w, int64_t out, int64_t in, Fp8WeightScales layout) {
  QuantLinear q;
  q.kind = QuantLinear::Kind::fp8_e4m3;
  q.out = out;
  q.in = in;
  q.codes.resize(size_t(out * in));
  auto amax_of = [&](int64_t begin, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[begin + i]));
    return m;
  };
  auto scale_for = [](float amax) { return amax > 0.0f ? amax / kFp8E4m3Max : 1.0f; };
  if (layout == Fp8WeightScales::per_tensor) q.scales = {scale_for(amax_of(0, out * in))};
  else
    for (int64_t o = 0; o < out; ++o) q.scales.push_back(scale_for(amax_of(o * in, in)));
  for (int64_t o = 0; o < out; ++o) {
    const float inv = 1.0f / q.scales[q.scales.size() == 1 ? 0 : o];
    for (int64_t k = 0; k < in; ++k) q.codes[o * in + k] = f32_to_fp8_e4m3(w[o * in + k] * inv);
  }
  return q;
}

QuantLinear quantize_int4(const float* w, int64_t out, int64_t in, int group_size, bool symmetric,
                          const std::vector<int32_t>& g_idx) {
  if (group_size < 1) throw std::invalid_argument("int4 group_size must be >= 1 (got " + std::to_string(group_size) + ")");
  QuantLinear q;
  q.kind = QuantLinear::Kind::int4;
  q.out = out;
  q.in = in;
  q.group_size = group_size;
  q.g_idx = g_idx;
  const int64_t n_groups = q.n_groups();
  q.codes.resize(size_t(out * in));
  q.scales.assign(size_t(n_groups * out), 0.0f);
  q.zeros.assign(size_t(n_groups * out), 0);
  // Each group's channels (consecutive, or g_idx's).
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(n_groups));
  for (int64_t k = 0; k < in; ++k) members[size_t(q.group_of(k))].push_back(k);
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w + o * in;
    for (int64_t g = 0; g < n_groups; ++g) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t k : members[size_t(g)]) lo = std::min(lo, row[k]), hi = std::max(hi, row[k]);
      float scale;
      int zero;
      if (symmetric) {
        const float amax = std::max(-lo, hi);
        scale = round_f16(amax > 0.0f ? 2.0f * amax / 15.0f : 1.0f);
        zero = 8;
      } else {
        scale = round_f16(std::max(hi - lo, 1e-5f) / 15.0f);
        zero = std::clamp(static_cast<int>(-std::nearbyint(lo / scale)), 0, 15);
      }
      q.scales[size_t(g * out + o)] = scale;
      q.zeros[size_t(g * out + o)] = static_cast<uint8_t>(zero);
      for (int64_t k : members[size_t(g)])
        q.codes[size_t(o * in + k)] =
            static_cast<uint8_t>(std::clamp(static_cast<int>(std::nearbyint(row[k] / scale)) + zero, 0, 15));
    }
  }
  q.validate();
  return q;
}

std::vector<float> dequantize(const QuantLinear& q) {
  q.validate();
  std::vector<float> w(size_t(q.out * q.in));
  if (q.kind == QuantLinear::Kind::fp8_e4m3) {
    float table[256];
    for (int b = 0; b < 256; ++b) table[b] = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    for (int64_t o = 0; o < q.out; ++o) {
      const float s = q.scales[q.scales.size() == 1 ? 0 : size_t(o)];
      for (int64_t k = 0; k < q.in; ++k) w[size_t(o * q.in + k)] = table[q.codes[size_t(o * q.in + k)]] * s;
    }
    return w;
  }
  for (int64_t o = 0; o < q.out; ++o)
    for (int64_t k = 0; k < q.in; ++k) {
      const size_t gi = size_t(int64_t(q.group_of(k)) * q.out + o);
      w[size_t(o * q.in + k)] = (static_cast<int>(q.codes[size_t(o * q.in + k)]) - q.zeros[gi]) * q.scales[gi];
    }
  return w;
}

void fake_quant_fp8_rows(float* x, int64_t rows, int64_t cols, ActivationQuant mode, float static_scale) {
  if (mode == ActivationQuant::none || rows == 0) return;
  auto apply = [&](float* p, int64_t n, float scale) {
    const float inv = 1.0f / scale;
    for (int64_t i = 0; i < n; ++i) p[i] = round_fp8_e4m3(p[i] * inv) * scale;
  };
  auto amax = [](const float* p, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(p[i]));
    return m;
  };
  auto scale_for = [](float m) { return m > 0.0f ? m / kFp8E4m3Max : 1.0f; };
  switch (mode) {
    case ActivationQuant::none: return;
    case ActivationQuant::fp8_per_token:
      for (int64_t r = 0; r < rows; ++r) apply(x + r * cols, cols, scale_for(amax(x + r * cols, cols)));
      return;
    case ActivationQuant::fp8_per_tensor: apply(x, rows * cols, scale_for(amax(x, rows * cols))); return;
    case ActivationQuant::fp8_static:
      if (!(static_scale > 0.0f)) throw std::invalid_argument("fp8 static activation scale must be > 0");
      apply(x, rows * cols, static_scale);
      return;
  }
}

}  // namespace servelab
