// Quantized weights: FP8 E4M3 bits, INT4 group quantization, the AWQ and GPTQ int32 packings,
// and quantized checkpoints written in each layout and loaded back.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/fp8.h"
#include "engine/model/memory_check.h"
#include "engine/model/half.h"
#include "engine/model/quant.h"
#include "engine/model/quant_checkpoint.h"
#include "engine/model/quant_pack.h"
#include "engine/model/quantize_weights.h"
#include "engine/model/tensors.h"
#include "engine/model/weights.h"
#include "engine/splitmix64.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using testing_util::TempDir;

ModelConfig quant_micro() {
  ModelConfig c;
  c.name = "micro";
  c.hidden_size = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 128;
  c.vocab_size = 96;
  c.max_position = 64;
  c.dtype = DType::bf16;
  return c;
}

std::vector<float> gaussian(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (auto& x : v) {
    const double u1 = (double(splitmix64_next(s) >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = double(splitmix64_next(s) >> 11) / 9007199254740992.0;
    x = scale * static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return v;
}

TEST(Fp8E4m3, KnownValuesRoundingAndSaturation) {
  EXPECT_EQ(f32_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);     // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(0.001953125f), 0x01);  // 2^-9, the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(0.015625f), 0x08);     // 2^-6, the smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);       // tie between 1 and 1.125: to even
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);       // tie between 1.125 and 1.25: to even
  EXPECT_EQ(f32_to_fp8_e4m3(0.0009765625f), 0x00); // half the smallest subnormal: to even (0)
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_FLOAT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  // Every finite code decodes to a value that encodes back to it.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f || b == 0x80) continue;  // NaN; -0 encodes as 0x80 too but compare below
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(b))), b) << b;
  }
}

TEST(QuantizeFp8, PerChannelAndPerTensorErrorBounds) {
  const int64_t out = 24, in = 40;
  std::vector<float> w = gaussian(out * in, 7);
  for (int64_t k = 0; k < in; ++k) w[size_t(5 * in + k)] *= 300.0f;  // one loud row
  for (Fp8WeightScales layout : {Fp8WeightScales::per_tensor, Fp8WeightScales::per_channel}) {
    const QuantLinear q = quantize_fp8(w.data(), out, in, layout);
    ASSERT_EQ(q.scales.size(), layout == Fp8WeightScales::per_tensor ? 1u : size_t(out));
    const std::vector<float> d = dequantize(q);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) {
        const float s = q.scales[q.scales.size() == 1 ? 0 : size_t(o)], x = w[size_t(o * in + k)];
        // Half an ulp of 3 mantissa bits for normals, half the subnormal step below them.
        EXPECT_LE(std::fabs(d[size_t(o * in + k)] - x), std::max(std::fabs(x) / 16.0f, s / 1024.0f) * 1.0001f);
      }
  }
  // Per-tensor scales leave the quiet rows in the coarse end of the range: larger error there.
  auto quiet_error = [&](Fp8WeightScales layout) {
    const std::vector<float> d = dequantize(quantize_fp8(w.data(), out, in, layout));
    double e = 0;
    for (int64_t i = 0; i < out * in; ++i)
      if (i / in != 5) e += std::fabs(d[size_t(i)] - w[size_t(i)]);
    return e;
  };
  EXPECT_GT(quiet_error(Fp8WeightScales::per_tensor), quiet_error(Fp8WeightScales::per_channel));
}

TEST(QuantizeInt4, AsymmetricAndSymmetricWithinHalfAStep) {
  const int64_t out = 16, in = 64;
  const std::vector<float> w = gaussian(out * in, 11, 0.1f);
  for (bool symmetric : {false, true}) {
    const QuantLinear q = quantize_int4(w.data(), out, in, 32, symmetric);
    EXPECT_EQ(q.n_groups(), 2);
    const std::vector<float> d = dequantize(q);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) {
        const size_t g = size_t((k / 32) * out + o);
        if (symmetric) { EXPECT_EQ(q.zeros[g], 8); }
        // Within half a step, unless the value sits beyond the clamped code range (symmetric: +amax).
        const float tol = q.scales[g] * (symmetric ? 1.0f : 0.5f) * 1.001f;
        EXPECT_LE(std::fabs(d[size_t(o * in + k)] - w[size_t(o * in + k)]), tol);
      }
  }
}

TEST(QuantPack, AwqNibbleOrderAndGptqLayout) {
  // One row of AWQ's [in, out] weight with output columns 0..7 holding 0..7: nibble i holds
  // column AWQ_ORDER[i].
  const uint8_t row[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(uint32_t(pack_cols(row, 1, 8, kAwqOrder)[0]), 0x75316420u);
  EXPECT_EQ(std::vector<uint8_t>(row, row + 8), unpack_cols(pack_cols(row, 1, 8, kAwqOrder).data(), 1, 8, kAwqOrder));

  QuantLinear q;  // out 8, in 8: codes[o][k] = (o + k) % 16, one group
  q.kind = QuantLinear::Kind::int4;
  q.out = q.in = 8;
  q.group_size = 8;
  for (int o = 0; o < 8; ++o)
    for (int k = 0; k < 8; ++k) q.codes.push_back(uint8_t((o + k) % 16));
  q.scales.assign(8, 0.5f);
  q.zeros.assign(8, 8);
  const GptqTensors g = pack_gptq(q);
  EXPECT_EQ(uint32_t(g.qweight[0]), 0x76543210u);  // output 0, input channels 0..7 in plain order
  EXPECT_EQ(uint32_t(g.qzeros[0]), 0x77777777u);   // v1: zero 8 stored as 7
  EXPECT_EQ(unpack_gptq(g, 8, 8, 8).codes, q.codes);
  EXPECT_EQ(unpack_gptq(g, 8, 8, 8).zeros, q.zeros);
  const AwqTensors a = pack_awq(q);
  EXPECT_EQ(unpack_awq(a, 8, 8, 8).codes, q.codes);
  // AWQ's qweight is transposed: word (k = 0) holds outputs 0..7 of input 0, i.e. codes[o][0] = o.
  EXPECT_EQ(uint32_t(a.qweight[0]), 0x75316420u);
}

// compressed-tensors' pack-quantized layout (compressed_tensors' pack_to_int32): the weight packed
// along the input in plain order and kept [out, in/8], the zero points packed along the output
// into [out/8, n_groups], the scales [out, n_groups].
TEST(QuantPack, CompressedTensorsInt4Layout) {
  QuantLinear q;  // out 16, in 16, groups of 8: codes[o][k] = (o + k) % 16, zeros[g][o] = (o + g) % 16
  q.kind = QuantLinear::Kind::int4;
  q.out = q.in = 16;
  q.group_size = 8;
  for (int o = 0; o < 16; ++o)
    for (int k = 0; k < 16; ++k) q.codes.push_back(uint8_t((o + k) % 16));
  for (int g = 0; g < 2; ++g)
    for (int o = 0; o < 16; ++o) {
      q.scales.push_back(0.25f * float(g + 1) + 0.01f * float(o));
      q.zeros.push_back(uint8_t((o + g) % 16));
    }
  const CtInt4Tensors t = pack_ct_int4(q, false);
  ASSERT_EQ(t.weight_packed.size(), 32u);  // [16, 2]
  EXPECT_EQ(uint32_t(t.weight_packed[0]), 0x76543210u);  // output 0, inputs 0..7
  EXPECT_EQ(uint32_t(t.weight_packed[1]), 0xfedcba98u);  // output 0, inputs 8..15
  EXPECT_EQ(uint32_t(t.weight_packed[2]), 0x87654321u);  // output 1, inputs 0..7
  ASSERT_EQ(t.weight_zero_point.size(), 4u);             // [2, 2]: outputs 8r..8r+7 of group g at [r][g]
  EXPECT_EQ(uint32_t(t.weight_zero_point[0]), 0x76543210u);  // outputs 0..7, group 0
  EXPECT_EQ(uint32_t(t.weight_zero_point[1]), 0x87654321u);  // outputs 0..7, group 1
  EXPECT_EQ(uint32_t(t.weight_zero_point[2]), 0xfedcba98u);  // outputs 8..15, group 0
  EXPECT_FLOAT_EQ(t.weight_scale[1], q.scales[16]);          // [o = 0][g = 1] = scales[g = 1][o = 0]
  const QuantLinear back = unpack_ct_int4(t, 16, 16, 8);
  EXPECT_EQ(back.codes, q.codes);
  EXPECT_EQ(back.zeros, q.zeros);
  EXPECT_EQ(back.scales, q.scales);
  EXPECT_THROW(pack_ct_int4(q, true), std::invalid_argument);  // symmetric needs every zero 8
  q.zeros.assign(q.zeros.size(), 8);
  const CtInt4Tensors sym = pack_ct_int4(q, true);
  EXPECT_TRUE(sym.weight_zero_point.empty());
  EXPECT_EQ(unpack_ct_int4(sym, 16, 16, 8).zeros, q.zeros);
  EXPECT_THROW(unpack_ct_int4(sym, 16, 24, 8), std::invalid_argument);  // weight_packed too small for in 24
}

// Every Linear of a loaded quantized checkpoint equals the writer's quantization of the source
// weights, dequantized; everything else equals the bf16 weights.
void expect_loads_as(const ModelWeights& src, const ModelWeights& loaded, const QuantWriteOptions& o) {
  for (const TensorSpec& s : tensor_specs(src.config)) {
    const std::vector<float>& a = tensor_storage(src, s.name);
    const std::vector<float>& b = tensor_storage(loaded, s.name);
    ASSERT_EQ(a.size(), b.size()) << s.name;
    if (!is_quantized_linear(s.name)) {
      EXPECT_EQ(a, b) << s.name;
      continue;
    }
    const int64_t out = s.shape[0], in = s.shape[1];
    QuantLinear q;
    if (o.format == QuantCheckpointFormat::awq) q = quantize_int4(a.data(), out, in, o.group_size, false);
    else if (o.format == QuantCheckpointFormat::gptq) q = quantize_int4(a.data(), out, in, o.group_size, true);
    else if (o.format == QuantCheckpointFormat::compressed_tensors_int4)
      q = quantize_int4(a.data(), out, in, o.group_size, o.symmetric);
    else q = quantize_fp8(a.data(), out, in, o.fp8_scales);
    if ((o.format == QuantCheckpointFormat::gptq || o.format == QuantCheckpointFormat::compressed_tensors_int4) &&
        o.act_order) {
      // Act order groups channels differently: check against the loaded weight's own error bound.
      double err = 0, ref = 0;
      for (size_t i = 0; i < a.size(); ++i) err += std::fabs(a[i] - b[i]), ref += std::fabs(a[i]);
      EXPECT_LT(err / ref, 0.15) << s.name;
      continue;
    }
    EXPECT_EQ(dequantize(q), b) << s.name;
  }
}

TEST(QuantCheckpoint, EachLayoutWritesAndLoadsBack) {
  const ModelWeights src = ModelWeights::random(quant_micro(), 3);  // bf16-rounded values
  struct Case {
    QuantWriteOptions o;
    Quantization method;
    ActivationQuant act;
  };
  std::vector<Case> cases;
  QuantWriteOptions o;
  o.format = QuantCheckpointFormat::compressed_tensors_fp8;
  o.fp8_scales = Fp8WeightScales::per_channel;
  cases.push_back({o, Quantization::fp8, ActivationQuant::fp8_per_token});
  o.fp8_scales = Fp8WeightScales::per_tensor;
  cases.push_back({o, Quantization::fp8, ActivationQuant::fp8_per_tensor});
  o.format = QuantCheckpointFormat::vllm_fp8;
  o.static_input_scale = 0.05f;
  cases.push_back({o, Quantization::fp8, ActivationQuant::fp8_static});
  o = {};
  o.format = QuantCheckpointFormat::awq;
  o.group_size = 32;
  cases.push_back({o, Quantization::int4_awq, ActivationQuant::none});
  o.format = QuantCheckpointFormat::gptq;
  cases.push_back({o, Quantization::int4_gptq, ActivationQuant::none});
  o.act_order = true;
  cases.push_back({o, Quantization::int4_gptq, ActivationQuant::none});
  o = {};
  o.format = QuantCheckpointFormat::compressed_tensors_int4;  // llm-compressor's W4A16
  o.group_size = 32;
  cases.push_back({o, Quantization::int4_gptq, ActivationQuant::none});
  o.symmetric = false;
  cases.push_back({o, Quantization::int4_gptq, ActivationQuant::none});
  o.act_order = true;
  cases.push_back({o, Quantization::int4_gptq, ActivationQuant::none});
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.o.format));
    TempDir dir;
    write_quantized_checkpoint(src, dir.path(), c.o);
    const ModelWeights w = ModelWeights::load(dir.path());
    EXPECT_EQ(w.quant.method, c.method);
    EXPECT_EQ(w.quant.activations, c.act);
    if (c.method == Quantization::fp8) { EXPECT_EQ(w.quant.fp8_scales, c.o.fp8_scales); }
    if (c.method != Quantization::fp8) { EXPECT_EQ(w.quant.group_size, 32); }
    EXPECT_EQ(w.quant.act_order, c.o.act_order);
    EXPECT_EQ(w.quant.pack_quantized, c.o.format == QuantCheckpointFormat::compressed_tensors_int4);
    if (c.act == ActivationQuant::fp8_static) {
      ASSERT_EQ(w.quant.input_scales.size(), 2u);
      EXPECT_FLOAT_EQ(w.quant.input_scales[1][kInputDown], 0.05f);
    }
    expect_loads_as(src, w, c.o);
    EXPECT_TRUE(w.quant_linears.empty());  // kept only when asked
    // Kept as stored (the cuda backend runs them): q, k, v, o, gate, up, down of each layer, each
    // dequantizing to the fp32 matrix the plain load gives.
    const ModelWeights kept = ModelWeights::load(dir.path(), ModelWeights::QuantLinears::dequantize_and_keep);
    ASSERT_EQ(kept.quant_linears.size(), size_t(kept.config.n_layers) * 7);
    for (int l = 0; l < kept.config.n_layers; ++l) {
      const LayerWeights& L = kept.layers[size_t(l)];
      const std::vector<float>* fp32[7] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
      for (int j = 0; j < 7; ++j)
        EXPECT_EQ(dequantize(kept.quant_linears[size_t(l) * 7 + j]), *fp32[j]) << "layer " << l << " " << kQuantLinearNames[j];
    }
    // Kept only (the cuda backend's load): the same codes, no fp32 copy of the Linears, every
    // other tensor as the plain load gives it.
    const ModelWeights only = ModelWeights::load(dir.path(), ModelWeights::QuantLinears::keep_only);
    ASSERT_EQ(only.quant_linears.size(), kept.quant_linears.size());
    for (size_t i = 0; i < only.quant_linears.size(); ++i) {
      EXPECT_EQ(only.quant_linears[i].codes, kept.quant_linears[i].codes) << "linear " << i;
      EXPECT_EQ(only.quant_linears[i].scales, kept.quant_linears[i].scales) << "linear " << i;
    }
    EXPECT_EQ(only.quant.describe(), kept.quant.describe());
    EXPECT_EQ(only.quant.input_scales, kept.quant.input_scales);
    for (const TensorSpec& s : tensor_specs(only.config)) {
      if (is_quantized_linear(s.name)) EXPECT_TRUE(tensor_storage(only, s.name).empty()) << s.name;
      else EXPECT_EQ(tensor_storage(only, s.name), tensor_storage(kept, s.name)) << s.name;
    }
    // A layer at a time (the cuda backend's load): each layer's seven Linears handed over in order,
    // the same codes, scales, zeros and act order as keep_only's, none kept; the rest the same.
    int next = 0;
    const ModelWeights streamed = ModelWeights::load_streamed(dir.path(), [&](int layer, std::vector<QuantLinear>&& ls) {
      ASSERT_EQ(layer, next++);
      ASSERT_EQ(ls.size(), 7u);
      for (size_t j = 0; j < 7; ++j) {
        const QuantLinear& want = only.quant_linears[size_t(layer) * 7 + j];
        EXPECT_EQ(ls[j].codes, want.codes) << "layer " << layer << " " << kQuantLinearNames[j];
        EXPECT_EQ(ls[j].scales, want.scales) << "layer " << layer << " " << kQuantLinearNames[j];
        EXPECT_EQ(ls[j].zeros, want.zeros) << "layer " << layer << " " << kQuantLinearNames[j];
        EXPECT_EQ(ls[j].g_idx, want.g_idx) << "layer " << layer << " " << kQuantLinearNames[j];
        EXPECT_EQ(ls[j].input_scale, want.input_scale) << "layer " << layer << " " << kQuantLinearNames[j];
      }
    });
    EXPECT_EQ(next, only.config.n_layers);
    EXPECT_TRUE(streamed.quant_linears.empty());
    EXPECT_EQ(streamed.quant.describe(), only.quant.describe());
    EXPECT_EQ(streamed.quant.input_scales, only.quant.input_scales);
    for (const TensorSpec& s : tensor_specs(streamed.config))
      EXPECT_EQ(tensor_storage(streamed, s.name), tensor_storage(only, s.name)) << s.name;
  }
}

TEST(QuantCheckpoint, AStreamedLoadIsCheckedForWhatItHolds) {
  // llama2-7b: 6.5 G parameters in its Linears. Loaded a layer at a time as INT4 it holds the
  // Linears packed (half a byte a weight), one layer unpacked and the rest in fp32, ~5 GiB: a
  // 12 GiB machine takes it, where the fp32 check (25 GiB) would refuse it.
  const ModelConfig c = preset("llama2-7b");
  EXPECT_NEAR(linear_params(c), 32.0 * (4 * 4096.0 * 4096 + 3 * 4096.0 * 11008), 1.0);
  EXPECT_THROW(check_weights_fit(c, "test", int64_t(12) << 30), std::runtime_error);
  const double others = fp32_weight_bytes(c) - 4.0 * linear_params(c);
  const double need = others + 0.5 * linear_params(c) + linear_params(c) / c.n_layers;
  EXPECT_LT(need, double(int64_t(6) << 30));
  EXPECT_NO_THROW(check_bytes_fit(c, need, "its quantized Linears packed", "test", int64_t(12) << 30));
  try {
    check_bytes_fit(c, need, "its quantized Linears packed", "config.json", int64_t(2) << 30);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("config.json: model llama2-7b needs"), std::string::npos) << m;
    EXPECT_NE(m.find("for its quantized Linears packed"), std::string::npos) << m;
    EXPECT_NE(m.find("2.0 GiB of memory"), std::string::npos) << m;
  }
}

TEST(QuantCheckpoint, GptqActOrderGidxIsAPermutationOfGroups) {
  const ModelWeights src = ModelWeights::random(quant_micro(), 5);
  TempDir dir;
  QuantWriteOptions o;
  o.format = QuantCheckpointFormat::gptq;
  o.group_size = 32;
  o.act_order = true;
  write_quantized_checkpoint(src, dir.path(), o);
  SafetensorsFile f(dir.file("model.safetensors"));
  const SafetensorsTensor* g = f.find("model.layers.0.mlp.down_proj.g_idx");
  ASSERT_NE(g, nullptr);
  std::vector<int32_t> g_idx(size_t(g->numel));
  std::memcpy(g_idx.data(), f.data(*g), size_t(g->nbytes));
  std::vector<int> per_group(4, 0);
  bool plain = true;
  for (size_t k = 0; k < g_idx.size(); ++k) {
    ++per_group[size_t(g_idx[k])];
    plain = plain && g_idx[k] == int32_t(k / 32);
  }
  EXPECT_FALSE(plain);
  EXPECT_EQ(per_group, std::vector<int>({32, 32, 32, 32}));
  // The Linears reading one input share its order (GPTQ's Hessian is the input's): q, k and v;
  // gate and up. o_proj reads another input, and orders its channels its own way.
  auto g_idx_of = [&](const std::string& linear) {
    const SafetensorsTensor* t = f.find("model.layers.0." + linear + ".g_idx");
    EXPECT_NE(t, nullptr) << linear;
    std::vector<int32_t> v(t ? size_t(t->numel) : 0);
    if (t) std::memcpy(v.data(), f.data(*t), size_t(t->nbytes));
    return v;
  };
  const std::vector<int32_t> q = g_idx_of("self_attn.q_proj");
  EXPECT_EQ(g_idx_of("self_attn.k_proj"), q);
  EXPECT_EQ(g_idx_of("self_attn.v_proj"), q);
  EXPECT_EQ(g_idx_of("mlp.up_proj"), g_idx_of("mlp.gate_proj"));
  EXPECT_NE(g_idx_of("self_attn.o_proj"), q);
  // The loaded weight dequantizes with those groups: the GPTQ tensors unpack to the same matrix.
  const ModelWeights w = ModelWeights::load(dir.path());
  EXPECT_TRUE(w.quant.act_order);
}

TEST(QuantCheckpoint, ErrorsNameTheTensorAndKey) {
  const ModelWeights src = ModelWeights::random(quant_micro(), 3);
  TempDir dir;
  QuantWriteOptions o;
  o.format = QuantCheckpointFormat::awq;
  o.group_size = 32;
  write_quantized_checkpoint(src, dir.path(), o);
  // 8-bit AWQ is refused naming the key.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
  j["quantization_config"]["bits"] = 8;
  std::ofstream(dir.file("config.json")) << j.dump();
  try {
    ModelWeights::load(dir.path());
    FAIL() << "8-bit AWQ loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bits = 8"), std::string::npos) << e.what();
  }
  // Declared as GPTQ, the AWQ tensors' shapes do not fit: the error names the tensor.
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}};
  std::ofstream(dir.file("config.json")) << j.dump();
  try {
    ModelWeights::load(dir.path());
    FAIL() << "AWQ tensors loaded as GPTQ";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("qweight"), std::string::npos) << e.what();
  }
  // compressed-tensors int4: activations quantized too (W4A8) and 8 bits are refused naming the
  // key, a group size the tensors do not hold names the tensor.
  TempDir ct;
  o = {};
  o.format = QuantCheckpointFormat::compressed_tensors_int4;
  o.group_size = 32;
  write_quantized_checkpoint(src, ct.path(), o);
  const nlohmann::json good = nlohmann::json::parse(std::ifstream(ct.file("config.json")));
  auto refused = [&](const char* key, const nlohmann::json& value, const std::string& named) {
    nlohmann::json c = good;
    nlohmann::json& group = c["quantization_config"]["config_groups"]["group_0"];
    if (std::string(key) == "input_activations") group[key] = value;
    else group["weights"][key] = value;
    std::ofstream(ct.file("config.json")) << c.dump();
    try {
      ModelWeights::load(ct.path());
      ADD_FAILURE() << key << " = " << value.dump() << " loaded";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  refused("input_activations", {{"num_bits", 8}, {"type", "int"}}, "input_activations");
  refused("num_bits", 8, "num_bits: 4");
  refused("group_size", 16, "weight_scale");  // the tensors hold groups of 32
  // An FP8 tensor without a quantization_config is refused with the reason.
  TempDir fp8;
  o = {};
  write_quantized_checkpoint(src, fp8.path(), o);
  nlohmann::json k = nlohmann::json::parse(std::ifstream(fp8.file("config.json")));
  k.erase("quantization_config");
  std::ofstream(fp8.file("config.json")) << k.dump();
  EXPECT_THROW(ModelWeights::load(fp8.path()), std::runtime_error);
}

TEST(QuantizeWeights, OnLoadMatchesTheCheckpointPathAndCountsBytes) {
  const ModelWeights src = ModelWeights::random(quant_micro(), 9);
  QuantScheme s = QuantScheme::for_method(Quantization::fp8, /*per_channel=*/true);
  const ModelWeights q = quantize_weights(src, s);
  EXPECT_EQ(q.quant.activations, ActivationQuant::fp8_per_token);
  TempDir dir;
  write_quantized_checkpoint(src, dir.path(), {});
  EXPECT_EQ(ModelWeights::load(dir.path()).layers[1].w_down, q.layers[1].w_down);
  EXPECT_EQ(q.embedding, src.embedding);  // only the Linears are quantized
  EXPECT_THROW(quantize_weights(q, s), std::invalid_argument);
  QuantScheme int4 = QuantScheme::for_method(Quantization::int4_awq);
  EXPECT_THROW(quantize_weights(src, int4), std::invalid_argument);  // in = 64 < group 128
  int4.group_size = 32;
  EXPECT_NE(quantize_weights(src, int4).layers[0].wq, src.layers[0].wq);
  // Bytes: bf16 2 per weight; FP8 1 + scales; INT4 ½ + fp16 scales and 4-bit zeros per group.
  const ModelConfig c = preset("llama2-7b");
  const double n = double(linear_weight_bytes(c, {})) / 2.0;
  EXPECT_NEAR(linear_weight_bytes(c, QuantScheme::for_method(Quantization::fp8)) / n, 1.0, 0.002);
  EXPECT_NEAR(linear_weight_bytes(c, QuantScheme::for_method(Quantization::int4_gptq)) / n, 0.5 + 2.5 / 128, 1e-4);
}

}  // namespace
}  // namespace servelab
