// Quantized Linears on the GPU (quant_linear.h): quantize on load from the device's bf16
// weights, and the product that dispatches on the weight format and the row count.
#include "engine/backend/cuda/quant_linear.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_quant.h"
#include "kernels/int4_pack.h"
#include "kernels/int4_quant.h"
#include "kernels/quant_gemv.h"

namespace servelab::cuda {
namespace quant_linear_detail {  // named: servelab_backend may be compiled as unity batches

/// One fused matrix of a layer: its rows (out), input (in), and the HF matrices it is made of
/// (rows of each; per-tensor FP8 scales are theirs).
struct FusedShape {
  int out = 0, in = 0;
  std::vector<int64_t> runs;
};

int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

int64_t quant_bytes(const QuantScheme& s, const FusedShape& f) {
  if (s.method == Quantization::fp8) return align256(int64_t(f.out) * f.in) + align256(int64_t(f.out) * 4);
  const int64_t groups = f.in / s.group_size;
  return align256(int64_t(f.out) * f.in / 2) + 2 * align256(groups * f.out * 4) + (s.act_order ? align256(f.in * 4) : 0);
}

/// Rebuilds w.storage with the tensors that stay in bf16 (embedding, norms, Q/K/V bias, LM head),
/// each 16-byte aligned, and frees the bf16 Linears.
void keep_unquantized_only(DeviceWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t d = c.hidden_size, qkv = int64_t(c.n_heads + 2 * c.n_kv_heads) * c.head_dim();
  struct Piece {
    const void** slot;
    int64_t elems;
  };
  std::vector<Piece> pieces;
  pieces.push_back({&w.embedding, int64_t(c.vocab_size) * d});
  for (DeviceLayer& l : w.layers) {
    pieces.push_back({&l.attn_norm, d});
    if (l.b_qkv) pieces.push_back({&l.b_qkv, qkv});
    pieces.push_back({&l.ffn_norm, d});
  }
  pieces.push_back({&w.final_norm, d});
  const bool tied = w.lm_head == w.embedding;
  if (!tied) pieces.push_back({&w.lm_head, int64_t(c.vocab_size) * d});
  int64_t total = 0;
  for (const Piece& p : pieces) total += (p.elems + 7) / 8 * 8;
  DeviceBuffer fresh(size_t(total) * 2, "the model's unquantized weights");
  int64_t at = 0;
  for (const Piece& p : pieces) {
    uint16_t* dst = fresh.get<uint16_t>() + at;
    CUDA_CHECK(cudaMemcpy(dst, *p.slot, size_t(p.elems) * 2, cudaMemcpyDeviceToDevice));
    *p.slot = dst;
    at += (p.elems + 7) / 8 * 8;
  }
  if (tied) w.lm_head = w.embedding;
  for (DeviceLayer& l : w.layers) l.w_qkv = l.w_o = l.w_gate_up = l.w_down = nullptr;  // quantized now
  w.storage = std::move(fresh);
  w.bytes = total * 2;
}

}  // namespace quant_linear_detail

namespace quant_linear_detail {

/// The four fused Linears of a layer of c: q|k|v, o, gate|up, down.
std::array<FusedShape, 4> fused_shapes(const ModelConfig& c) {
  const int d = c.hidden_size, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd,
            ffn = c.intermediate_size;
  return {FusedShape{dq + 2 * dkv, d, {dq, dkv, dkv}}, FusedShape{d, dq, {d}}, FusedShape{2 * ffn, d, {ffn, ffn}},
          FusedShape{d, ffn, {d}}};
}

/// What neither GPU path runs, refused by name before anything is allocated.
void check_scheme(const DeviceWeights& w, const QuantScheme& scheme) {
  auto refuse = [&](const std::string& why) {
    return std::invalid_argument("cuda backend, quantization " + scheme.describe() + ": " + why);
  };
  if (!scheme.quantized()) throw refuse("nothing to quantize");
  if (w.storage_dtype != DType::bf16) throw refuse("quantized Linears run with dtype bf16 only (got f16)");
  if (scheme.method == Quantization::fp8 && scheme.activations == ActivationQuant::none)
    throw refuse("FP8 runs with per-tensor, per-token or static activation scales (weight-only FP8 runs on backend cpu)");
  for (const FusedShape& f : fused_shapes(w.config)) {
    if (f.in % 16 || f.out % 8)
      throw refuse("a Linear of [" + std::to_string(f.out) + ", " + std::to_string(f.in) +
                   "]: the kernels need inputs a multiple of 16 and outputs a multiple of 8");
    if (scheme.method != Quantization::fp8 &&
        (scheme.group_size < 16 || scheme.group_size % 16 || f.in % scheme.group_size))
      throw refuse("group size " + std::to_string(scheme.group_size) + " must be a multiple of 16 dividing every " +
                   "Linear's input (" + std::to_string(f.in) + ")");
  }
}

/// Allocates q's storage for every layer of `config` under `scheme` and points each QuantWeight
/// at its codes, scales and zeros (quant_bytes per fused Linear, 256-byte aligned pieces).
void lay_out_quant(QuantDeviceWeights& q, const QuantScheme& scheme, const ModelConfig& config) {
  const std::array<FusedShape, 4> shapes = fused_shapes(config);
  q.scheme = scheme;
  int64_t per_layer = 0;
  for (const FusedShape& f : shapes) per_layer += quant_bytes(scheme, f);
  q.bytes = per_layer * config.n_layers;
  q.storage.grow(size_t(q.bytes), "the quantized Linears");
  auto* base = q.storage.get<uint8_t>();
  int64_t at = 0;
  const bool int4 = scheme.method != Quantization::fp8;
  q.layers.resize(size_t(config.n_layers));
  for (QuantDeviceWeights::Layer& layer : q.layers) {
    QuantWeight* dst[4] = {&layer.qkv, &layer.o, &layer.gate_up, &layer.down};
    for (int i = 0; i < 4; ++i) {
      const FusedShape& f = shapes[size_t(i)];
      QuantWeight& qw = *dst[i];
      qw.out = f.out;
      qw.in = f.in;
      qw.codes = base + at;
      if (!int4) {
        qw.kind = QuantLinear::Kind::fp8_e4m3;
        qw.scales = reinterpret_cast<float*>(base + at + align256(int64_t(f.out) * f.in));
      } else {
        qw.kind = QuantLinear::Kind::int4;
        qw.group_size = scheme.group_size;
        const int64_t groups = f.in / scheme.group_size;
        qw.scales = reinterpret_cast<float*>(base + at + align256(int64_t(f.out) * f.in / 2));
        qw.zeros = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(qw.scales) +
                                                  align256(groups * f.out * 4));
        if (scheme.act_order)  // its room; upload_quant_weights points qw.perm at it when the order is not plain
          qw.perm = reinterpret_cast<const int32_t*>(reinterpret_cast<const uint8_t*>(qw.zeros) + align256(groups * f.out * 4));
      }
      at += quant_bytes(scheme, f);
    }
  }
}

}  // namespace quant_linear_detail

QuantDeviceWeights quantize_device_weights(DeviceWeights& w, const QuantScheme& scheme) {
  using namespace quant_linear_detail;
  check_scheme(w, scheme);
  if (scheme.act_order || scheme.activations == ActivationQuant::fp8_static)
    throw std::invalid_argument("cuda backend, quantization " + scheme.describe() +
                                ": quantize on load has no act order and no static input scales (they come with a "
                                "checkpoint)");
  const std::array<FusedShape, 4> shapes = fused_shapes(w.config);
  QuantDeviceWeights q;
  lay_out_quant(q, scheme, w.config);
  for (size_t l = 0; l < q.layers.size(); ++l) {
    const DeviceLayer& src = w.layers[l];
    const void* bf16[4] = {src.w_qkv, src.w_o, src.w_gate_up, src.w_down};
    QuantDeviceWeights::Layer& layer = q.layers[l];
    QuantWeight* dst[4] = {&layer.qkv, &layer.o, &layer.gate_up, &layer.down};
    for (int i = 0; i < 4; ++i) {
      const FusedShape& f = shapes[size_t(i)];
      QuantWeight& qw = *dst[i];
      auto* codes = const_cast<uint8_t*>(qw.codes);
      auto* scales = const_cast<float*>(qw.scales);
      if (qw.kind == QuantLinear::Kind::fp8_e4m3) {
        const bool per_channel = scheme.fp8_scales == Fp8WeightScales::per_channel;
        qw.uniform_scales = !per_channel && f.runs.size() == 1;
        kernels::quantize_fp8_weight(bf16[i], f.out, f.in, f.runs, per_channel, codes, scales);
      } else {
        kernels::quantize_int4_weight(bf16[i], f.out, f.in, scheme.group_size, scheme.method == Quantization::int4_gptq,
                                      codes, scales, const_cast<float*>(qw.zeros));
      }
    }
  }
  keep_unquantized_only(w);
  pack_int4_linears(q);
  return q;
}

QuantDeviceWeights upload_quant_weights(DeviceWeights& w, const QuantScheme& scheme,
                                        const std::vector<PackedQuantLayer>& layers) {
  using namespace quant_linear_detail;
  check_scheme(w, scheme);
  if (layers.size() != size_t(w.config.n_layers))
    throw std::invalid_argument("upload_quant_weights: " + std::to_string(layers.size()) + " packed layers for " +
                                std::to_string(w.config.n_layers));
  const std::array<FusedShape, 4> shapes = fused_shapes(w.config);
  QuantDeviceWeights q;
  lay_out_quant(q, scheme, w.config);
  for (size_t l = 0; l < q.layers.size(); ++l) {
    QuantDeviceWeights::Layer& layer = q.layers[l];
    QuantWeight* dst[4] = {&layer.qkv, &layer.o, &layer.gate_up, &layer.down};
    for (int i = 0; i < 4; ++i) {
      const PackedQuantLinear& p = layers[l][size_t(i)];
      QuantWeight& qw = *dst[i];
      const FusedShape& f = shapes[size_t(i)];
      const bool int4 = qw.kind == QuantLinear::Kind::int4;
      if (p.kind != qw.kind || p.out != f.out || p.in != f.in || (int4 && p.group_size != qw.group_size))
        throw std::invalid_argument("upload_quant_weights: layer " + std::to_string(l) + "'s Linear " +
                                    std::to_string(i) + " does not match the model's shapes or the scheme");
      qw.uniform_scales = p.uniform_scales;
      qw.input_scale = p.input_scale;
      if (!int4 && (p.input_scale > 0.0f) != (scheme.activations == ActivationQuant::fp8_static))
        throw std::invalid_argument("upload_quant_weights: layer " + std::to_string(l) + "'s Linear " +
                                    std::to_string(i) + (p.input_scale > 0.0f ? " has a static input scale" : " has no input scale") +
                                    " where the scheme's activations are " + to_string(scheme.activations));
      CUDA_CHECK(cudaMemcpy(const_cast<uint8_t*>(qw.codes), p.codes.data(), p.codes.size(), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(const_cast<float*>(qw.scales), p.scales.data(), p.scales.size() * 4, cudaMemcpyHostToDevice));
      if (int4)
        CUDA_CHECK(cudaMemcpy(const_cast<float*>(qw.zeros), p.zeros.data(), p.zeros.size() * 4, cudaMemcpyHostToDevice));
      if (!p.perm.empty() && (!int4 || !qw.perm || p.perm.size() != size_t(f.in)))
        throw std::invalid_argument("upload_quant_weights: layer " + std::to_string(l) + "'s Linear " +
                                    std::to_string(i) + " has an act order the scheme does not (desc_act false)");
      if (p.perm.empty()) qw.perm = nullptr;  // a plain order: the product reads x as it is
      else CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(qw.perm), p.perm.data(), p.perm.size() * 4, cudaMemcpyHostToDevice));
    }
  }
  keep_unquantized_only(w);
  pack_int4_linears(q);
  return q;
}

bool pack_int4_linears(QuantDeviceWeights& q) {
  using quant_linear_detail::align256;
  if (q.scheme.method == Quantization::fp8 || q.layers.empty()) return false;
  const kernels::QuantGemvKernel env = kernels::quant_gemv_env_kernel();
  if (env != kernels::QuantGemvKernel::packed) return false;  // auto keeps the steps kernel (docs/quantization.md)
  auto layout = [](const QuantWeight& w) { return kernels::int4_pack::Layout{w.out, w.in, w.group_size}; };
  int64_t total = 0;
  for (QuantDeviceWeights::Layer& layer : q.layers)
    for (QuantWeight* w : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      if (!layout(*w).packable()) return false;
      total += align256(layout(*w).code_bytes()) + align256(layout(*w).group_bytes());
    }
  DeviceBuffer packed;
  packed.grow(size_t(total), "the quantized Linears (INT4 fragment layout)");
  auto* base = packed.get<uint8_t>();
  int64_t at = 0;
  for (QuantDeviceWeights::Layer& layer : q.layers)
    for (QuantWeight* w : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      const kernels::int4_pack::Layout lay = layout(*w);
      uint8_t* codes = base + at;
      void* groups = base + at + align256(lay.code_bytes());
      kernels::pack_int4_fragments(w->codes, w->scales, w->zeros, w->out, w->in, w->group_size, codes, groups, nullptr);
      at += align256(lay.code_bytes()) + align256(lay.group_bytes());
      w->packed_codes = codes;
      w->packed_groups = groups;
      w->codes = nullptr;
      w->scales = nullptr;
      w->zeros = nullptr;
    }
  CUDA_CHECK(cudaDeviceSynchronize());
  q.storage = std::move(packed);  // the row layout freed
  q.bytes = total;
  return true;
}

int QuantLinearRunner::default_gemv_rows(const QuantScheme& scheme) {
  // H200, results/gpu/quant/h200-2026-11-29-0327c2b-steps16/: quant_gemv's steps kernel takes up to
  // 16 rows (two column tiles); llama2-7b's batch-16 decode step took 3.76 ms with fp8 through
  // quant_gemv (engine_bench fp8/16) against 4.21 with the activations quantized and the FP8 GEMM
  // (fp8/8, the default before; bf16 4.60). INT4's dequantize + bf16 GEMM takes several times
  // quant_gemv's time at 16 rows. So both formats take quant_gemv up to 16 rows.
  (void)scheme;
  return kGemvRows;
}

QuantLinearRunner::QuantLinearRunner(const QuantScheme& scheme, int max_out, int max_in, int gemv_max_rows)
    : scheme_(scheme), max_in_(max_in), gemv_max_rows_(gemv_max_rows > 0 ? gemv_max_rows : default_gemv_rows(scheme)) {
  if (gemv_max_rows < 0 || gemv_max_rows > kGemvRows)
    throw std::invalid_argument("quant_gemv_max_rows must be 0 (the default) or 1.." + std::to_string(kGemvRows) +
                                " (got " + std::to_string(gemv_max_rows) + ")");
  gemv_partial_floats_ = kernels::quant_gemv_workspace_floats(max_out, max_in);
  gemv_counter_count_ = kernels::quant_gemv_workspace_counters(max_out);
  gemv_partials_.grow(size_t(gemv_partial_floats_) * 4, "quant_gemv's split-K partial sums");
  gemv_counters_.grow(size_t(gemv_counter_count_) * 4, "quant_gemv's split-K counters");
  CUDA_CHECK(cudaMemset(gemv_counters_.get(), 0, size_t(gemv_counter_count_) * 4));
  if (scheme.method == Quantization::fp8) {
    fp8_ = std::make_unique<kernels::Fp8Gemm>();
    amax_.grow(256, "the FP8 activation amax");
  } else {
    dequant_.grow(size_t(max_out) * max_in * 2, "the INT4 dequantization scratch");
  }
}

bool QuantLinearRunner::reserve(int rows) {
  if (rows <= rows_capacity_ || (!fp8_ && !scheme_.act_order)) return false;
  if (fp8_) {
    act_codes_.grow(size_t(rows) * max_in_, "the FP8 activation codes");
    act_scales_.grow(size_t(rows) * 4, "the FP8 activation scales");
  }
  if (scheme_.act_order) gathered_.grow(size_t(rows) * max_in_ * 2, "the act order's gathered activations");
  rows_capacity_ = rows;
  return true;
}

int64_t QuantLinearRunner::scratch_bytes(int rows) const {
  const int64_t gemv = int64_t(gemv_partials_.bytes() + gemv_counters_.bytes());
  const int64_t gathered = scheme_.act_order ? int64_t(rows) * max_in_ * 2 : 0;
  return gemv + gathered + (fp8_ ? int64_t(rows) * (max_in_ + 4) : int64_t(dequant_.bytes()));
}

const void* QuantLinearRunner::in_codes_order(const QuantWeight& w, const void* x, int rows, cudaStream_t stream) {
  if (!w.perm) return x;
  if (rows > rows_capacity_ || w.in > max_in_)
    throw std::logic_error("QuantLinearRunner: " + std::to_string(rows) + " rows of " + std::to_string(w.in) +
                           " inputs exceed the reserved act-order scratch");
  kernels::gather_columns(x, w.perm, gathered_.get(), rows, w.in, stream);
  return gathered_.get();
}

void QuantLinearRunner::prepare(int max_rows, const QuantWeight& w) {
  if (!fp8_ || max_rows <= gemv_max_rows_) return;
  const bool per_token = scheme_.activations == ActivationQuant::fp8_per_token;
  fp8_->prepare(gemv_max_rows_ + 1, max_rows, w.out, w.in, per_token || !w.uniform_scales);
}

kernels::QuantGemvArgs QuantLinearRunner::gemv_args(const QuantWeight& w, const void* x, void* y, int rows) const {
  const bool fp8 = w.kind == QuantLinear::Kind::fp8_e4m3;
  kernels::QuantGemvArgs a;
  a.kind = fp8 ? kernels::QuantWeightKind::fp8_e4m3 : kernels::QuantWeightKind::int4;
  a.x = x;
  a.x_stride = w.in;
  a.w = w.codes;
  a.w_packed = w.packed_codes;
  a.w_packed_groups = w.packed_groups;
  a.scales = w.scales;
  a.zeros = w.zeros;
  a.n_scales = fp8 ? w.out : (w.in / w.group_size) * w.out;
  a.group_size = w.group_size;
  a.y = y;
  a.out_bf16 = true;
  a.m = rows;
  a.n = w.out;
  a.k = w.in;
  a.partials = gemv_partials_.get<float>();
  a.partial_capacity = gemv_partial_floats_;
  a.counters = gemv_counters_.get<int32_t>();
  a.counter_capacity = gemv_counter_count_;
  return a;
}

bool QuantLinearRunner::run_gate_up_silu(const QuantWeight& w, const void* x, void* act, int rows, int ffn,
                                         cudaStream_t stream) {
  if (rows < 1 || rows > gemv_max_rows_ || w.out != 2 * ffn) return false;
  kernels::QuantGemvArgs a = gemv_args(w, x, act, rows);
  a.silu_ffn = ffn;
  const kernels::QuantGemvKernel kernel = kernels::quant_gemv_kernel_for(a);  // steps takes up to 16 rows
  if (kernel != kernels::QuantGemvKernel::steps && kernel != kernels::QuantGemvKernel::packed) return false;
  if (kernel == kernels::QuantGemvKernel::steps && !a.w) return false;  // only the packed layout: 8 rows at most
  a.x = in_codes_order(w, x, rows, stream);
  kernels::quant_gemv(a, stream);
  return true;
}

bool QuantLinearRunner::run_qkv_rope_kv(const QuantWeight& w, const kernels::QkvArgs& qa, const void* x,
                                        cudaStream_t stream) {
  const int rows = qa.n_tokens;
  if (rows < 1 || rows > gemv_max_rows_ || qa.head_dim % 32 != 0 || qa.qkv_row_stride != w.out || qa.delta ||
      qa.lora.xa || !qa.positions || !qa.inv_freq || w.out != (qa.n_heads + 2 * qa.n_kv_heads) * qa.head_dim)
    return false;
  kernels::QuantGemvArgs a = gemv_args(w, x, qa.qkv, rows);
  if (!a.w) return false;  // only the packed INT4 layout: the steps kernel reads the plain codes
  a.rope = kernels::gemv_rope_kv_params(qa);
  if (kernels::quant_gemv_kernel_for(a) != kernels::QuantGemvKernel::steps) return false;
  a.x = in_codes_order(w, x, rows, stream);
  kernels::quant_gemv(a, stream);
  return true;
}

void QuantLinearRunner::run(const QuantWeight& w, const void* x, void* y, int rows, kernels::Gemm& gemm,
                            cudaStream_t stream) {
  if (rows == 0) return;
  const bool fp8 = w.kind == QuantLinear::Kind::fp8_e4m3;
  x = in_codes_order(w, x, rows, stream);
  if (rows <= gemv_max_rows_ && w.packed_codes) {  // the packed kernel: launches of up to 8 rows
    for (int r0 = 0; r0 < rows; r0 += 8) {
      kernels::QuantGemvArgs a = gemv_args(w, static_cast<const uint16_t*>(x) + int64_t(r0) * w.in,
                                           static_cast<uint16_t*>(y) + int64_t(r0) * w.out, std::min(8, rows - r0));
      kernels::quant_gemv(a, stream);
    }
    return;
  }
  if (rows <= gemv_max_rows_) {  // decode: stream the quantized weights once, dequantized in registers
    kernels::quant_gemv(gemv_args(w, x, y, rows), stream);
    return;
  }
  if (!fp8 && w.packed_codes) {  // INT4 prefill: the bf16 matrix in scratch, then the bf16 GEMM
    kernels::dequantize_int4_packed(w.packed_codes, w.packed_groups, w.out, w.in, w.group_size, dequant_.get(), stream);
    gemm.run(kernels::ScalarType::bf16, x, dequant_.get(), y, rows, w.out, w.in, false, stream);
    return;
  }
  if (!fp8) {
    kernels::dequantize_int4(w.codes, w.scales, w.zeros, w.out, w.in, w.group_size, dequant_.get(), stream);
    gemm.run(kernels::ScalarType::bf16, x, dequant_.get(), y, rows, w.out, w.in, false, stream);
    return;
  }
  if (rows > rows_capacity_ || w.in > max_in_)
    throw std::logic_error("QuantLinearRunner: " + std::to_string(rows) + " rows of " + std::to_string(w.in) +
                           " inputs exceed the reserved activation scratch");
  const bool per_token = scheme_.activations == ActivationQuant::fp8_per_token;
  kernels::Fp8QuantizeArgs qa;
  qa.x = x;
  qa.x_stride = w.in;
  qa.m = rows;
  qa.k = w.in;
  qa.scales = w.input_scale > 0.0f ? kernels::Fp8ActScales::fixed
              : per_token          ? kernels::Fp8ActScales::per_token
                                   : kernels::Fp8ActScales::per_tensor;
  qa.fixed_scale = w.input_scale;
  qa.codes = act_codes_.get<uint8_t>();
  qa.row_scales = act_scales_.get<float>();
  qa.amax = amax_.get<float>();
  kernels::quantize_fp8_activations(qa, stream);
  kernels::Fp8GemmArgs ga;
  ga.x = qa.codes;
  ga.x_scales = qa.row_scales;
  ga.x_uniform = !per_token;
  ga.w = w.codes;
  ga.w_scales = w.scales;
  ga.w_uniform = w.uniform_scales;
  ga.y = y;
  ga.m = rows;
  ga.n = w.out;
  ga.k = w.in;
  fp8_->run(ga, stream);
}

}  // namespace servelab::cuda
