#include "kernels/ref/allreduce_ref.h"

#include <cstring>
#include <stdexcept>

namespace servelab::kernels::ref {

float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}

std::vector<uint16_t> all_reduce_sum_bf16(const std::vector<std::vector<uint16_t>>& ins, bool negative_zero_as_positive) {
  if (ins.empty()) return {};
  const size_t n = ins[0].size();
  for (const auto& v : ins)
    if (v.size() != n) throw std::invalid_argument("all_reduce_sum_bf16: ranks' inputs differ in length");
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    auto in = [&](size_t r) {
      const uint16_t b = ins[r][i];
      return bf16_to_float(negative_zero_as_positive && b == 0x8000 ? uint16_t(0) : b);
    };
    float s = in(0);  // starting from rank 0's value, not 0 (keeps -0 as NCCL does)
    for (size_t r = 1; r < ins.size(); ++r) s += in(r);
    out[i] = float_to_bf16(s);
  }
  return out;
}

}  // namespace servelab::kernels::ref
