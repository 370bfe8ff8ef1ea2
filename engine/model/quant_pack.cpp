#include "engine/model/quant_pack.h"

#include <stdexcept>
#include <string>

namespace servelab {
namespace {

constexpr int kPlainOrder[8] = {0, 1, 2, 3, 4, 5, 6, 7};

void require_size(const char* what, size_t have, int64_t want) {
  if (int64_t(have) != want)
    throw std::invalid_argument(std::string(what) + " holds " + std::to_string(have) + " values, expected " +
                                std::to_string(want));
}

void require_multiple_of_8(const char* what, int64_t n) {
  if (n % 8 != 0) throw std::invalid_argument(std::string(what) + " (" + std::to_string(n) + ") must be a multiple of 8 to pack int4 into int32");
}

/// An int4 QuantLinear's shape, its codes, scales and zeros still to fill.
QuantLinear int4_linear(int64_t out, int64_t in, int group_size) {
  QuantLinear q;
  q.kind = QuantLinear::Kind::int4;
  q.out = out;
  q.in = in;
  q.group_size = group_size;
  return q;
}

}  // namespace

std::vector<int32_t> pack_cols(const uint8_t* values, int64_t rows, int64_t cols, const int* order) {
  require_multiple_of_8("columns", cols);
  std::vector<int32_t> words(size_t(rows * cols / 8));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols / 8; ++c) {
      uint32_t w = 0;
      for (int i = 0; i < 8; ++i) w |= uint32_t(values[r * cols + 8 * c + order[i]] & 0xfu) << (4 * i);
      words[size_t(r * (cols / 8) + c)] = static_cast<int32_t>(w);
    }
  return words;
}

std::vector<uint8_t> unpack_cols(const int32_t* words, int64_t rows, int64_t cols, const int* order) {
  require_multiple_of_8("columns", cols);
  std::vector<uint8_t> values(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols / 8; ++c) {
      const uint32_t w = static_cast<uint32_t>(words[r * (cols / 8) + c]);
      for (int i = 0; i < 8; ++i) values[size_t(r * cols + 8 * c + order[i])] = static_cast<uint8_t>((w >> (4 * i)) & 0xfu);
    }
  return values;
}

AwqTensors pack_awq(const QuantLinear& q) {
  q.validate();
  if (q.kind != QuantLinear::Kind::int4 || !q.g_idx.empty())
    throw std::invalid_argument("AWQ packs int4 weights with consecutive groups (no g_idx)");
  // AWQ stores the weight as [in, out].
  std::vector<uint8_t> t(size_t(q.in * q.out));
  for (int64_t o = 0; o < q.out; ++o)
    for (int64_t k = 0; k < q.in; ++k) t[size_t(k * q.out + o)] = q.codes[size_t(o * q.in + k)];
  AwqTensors a;
  a.qweight = pack_cols(t.data(), q.in, q.out, kAwqOrder);
  a.qzeros = pack_cols(q.zeros.data(), q.n_groups(), q.out, kAwqOrder);
  a.scales = q.scales;
  return a;
}

QuantLinear unpack_awq(const AwqTensors& a, int64_t out, int64_t in, int group_size) {
  QuantLinear q = int4_linear(out, in, group_size);
  require_multiple_of_8("out_features", out);
  require_size("qweight", a.qweight.size(), in * out / 8);
  require_size("qzeros", a.qzeros.size(), q.n_groups() * out / 8);
  require_size("scales", a.scales.size(), q.n_groups() * out);
  const std::vector<uint8_t> t = unpack_cols(a.qweight.data(), in, out, kAwqOrder);
  q.codes.resize(size_t(out * in));
  for (int64_t k = 0; k < in; ++k)
    for (int64_t o = 0; o < out; ++o) q.codes[size_t(o * in + k)] = t[size_t(k * out + o)];
  q.zeros = unpack_cols(a.qzeros.data(), q.n_groups(), out, kAwqOrder);
  q.scales = a.scales;
  q.validate();
  return q;
}

GptqTensors pack_gptq(const QuantLinear& q, bool v1) {
  q.validate();
  if (q.kind != QuantLinear::Kind::int4) throw std::invalid_argument("GPTQ packs int4 weights");
  require_multiple_of_8("in_features", q.in);
  GptqTensors g;
  // qweight [in/8, out]: word (r, o) holds input channels 8r..8r+7 of output o.
  g.qweight.resize(size_t(q.in / 8 * q.out));
  for (int64_t r = 0; r < q.in / 8; ++r)
    for (int64_t o = 0; o < q.out; ++o) {
      uint32_t w = 0;
      for (int j = 0; j < 8; ++j) w |= uint32_t(q.codes[size_t(o * q.in + 8 * r + j)]) << (4 * j);
      g.qweight[size_t(r * q.out + o)] = static_cast<int32_t>(w);
    }
  std::vector<uint8_t> stored(q.zeros.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    if (v1 && q.zeros[i] == 0)
      throw std::invalid_argument("GPTQ v1 stores zero − 1 in 4 bits: a zero point of 0 cannot be stored (use gptq_v2)");
    stored[i] = static_cast<uint8_t>(q.zeros[i] - (v1 ? 1 : 0));
  }
  g.qzeros = pack_cols(stored.data(), q.n_groups(), q.out, kPlainOrder);
  g.scales = q.scales;
  g.g_idx.resize(size_t(q.in));
  for (int64_t k = 0; k < q.in; ++k) g.g_idx[size_t(k)] = q.group_of(k);
  return g;
}

QuantLinear unpack_gptq(const GptqTensors& g, int64_t out, int64_t in, int group_size, bool v1) {
  QuantLinear q = int4_linear(out, in, group_size);
  require_multiple_of_8("in_features", in);
  require_size("qweight", g.qweight.size(), in / 8 * out);
  require_size("qzeros", g.qzeros.size(), q.n_groups() * out / 8);
  require_size("scales", g.scales.size(), q.n_groups() * out);
  if (!g.g_idx.empty()) require_size("g_idx", g.g_idx.size(), in);
  q.codes.resize(size_t(out * in));
  for (int64_t r = 0; r < in / 8; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t w = static_cast<uint32_t>(g.qweight[size_t(r * out + o)]);
      for (int j = 0; j < 8; ++j) q.codes[size_t(o * in + 8 * r + j)] = static_cast<uint8_t>((w >> (4 * j)) & 0xfu);
    }
  q.zeros = unpack_cols(g.qzeros.data(), q.n_groups(), out, kPlainOrder);
  if (v1)
    for (uint8_t& z : q.zeros) z = static_cast<uint8_t>(z + 1);  // v1: 15 + 1 = 16, as AutoGPTQ's kernels read it
  // g_idx equal to k / group_size is plain grouping: keep it implicit.
  bool plain = true;
  for (int64_t k = 0; k < int64_t(g.g_idx.size()); ++k) plain = plain && g.g_idx[size_t(k)] == k / group_size;
  if (!plain) q.g_idx = g.g_idx;
  q.scales = g.scales;
  q.validate();
  return q;
}

CtInt4Tensors pack_ct_int4(const QuantLinear& q, bool symmetric) {
  q.validate();
  if (q.kind != QuantLinear::Kind::int4) throw std::invalid_argument("compressed-tensors int4 packs int4 weights");
  require_multiple_of_8("in_features", q.in);
  CtInt4Tensors t;
  t.weight_packed = pack_cols(q.codes.data(), q.out, q.in, kPlainOrder);  // word (o, c): channels 8c..8c+7
  const int64_t ng = q.n_groups();
  t.weight_scale.resize(size_t(q.out * ng));
  for (int64_t g = 0; g < ng; ++g)
    for (int64_t o = 0; o < q.out; ++o) t.weight_scale[size_t(o * ng + g)] = q.scales[size_t(g * q.out + o)];
  if (symmetric) {
    for (uint8_t z : q.zeros)
      if (z != 8) throw std::invalid_argument("a symmetric compressed-tensors int4 weight has every zero point 8 (got " +
                                              std::to_string(int(z)) + ")");
  } else {
    require_multiple_of_8("out_features", q.out);
    // [n_groups, out] packed along out is GPTQ's qzeros; compressed-tensors stores its transpose.
    const std::vector<int32_t> by_group = pack_cols(q.zeros.data(), ng, q.out, kPlainOrder);
    t.weight_zero_point.resize(by_group.size());
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t r = 0; r < q.out / 8; ++r) t.weight_zero_point[size_t(r * ng + g)] = by_group[size_t(g * (q.out / 8) + r)];
  }
  if (!q.g_idx.empty()) t.weight_g_idx = q.g_idx;
  return t;
}

QuantLinear unpack_ct_int4(const CtInt4Tensors& t, int64_t out, int64_t in, int group_size) {
  QuantLinear q = int4_linear(out, in, group_size);
  require_multiple_of_8("in_features", in);
  const int64_t ng = q.n_groups();
  require_size("weight_packed", t.weight_packed.size(), out * in / 8);
  require_size("weight_scale", t.weight_scale.size(), out * ng);
  if (!t.weight_g_idx.empty()) require_size("weight_g_idx", t.weight_g_idx.size(), in);
  q.codes = unpack_cols(t.weight_packed.data(), out, in, kPlainOrder);
  q.scales.resize(size_t(ng * out));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t g = 0; g < ng; ++g) q.scales[size_t(g * out + o)] = t.weight_scale[size_t(o * ng + g)];
  if (t.weight_zero_point.empty()) {
    q.zeros.assign(size_t(ng * out), 8);
  } else {
    require_multiple_of_8("out_features", out);
    require_size("weight_zero_point", t.weight_zero_point.size(), out / 8 * ng);
    std::vector<int32_t> by_group(t.weight_zero_point.size());
    for (int64_t r = 0; r < out / 8; ++r)
      for (int64_t g = 0; g < ng; ++g) by_group[size_t(g * (out / 8) + r)] = t.weight_zero_point[size_t(r * ng + g)];
    q.zeros = unpack_cols(by_group.data(), ng, out, kPlainOrder);
  }
  bool plain = true;
  for (int64_t k = 0; k < int64_t(t.weight_g_idx.size()); ++k) plain = plain && t.weight_g_idx[size_t(k)] == k / group_size;
  if (!plain) q.g_idx = t.weight_g_idx;
  q.validate();
  return q;
}

}  // namespace servelab
