#include <stdexcept>

#include "engine/model/config.h"

namespace servelab {

const char* to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

size_t dtype_size(DType d) { return d == DType::f32 ? 4 : 2; }

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "F32") return DType::f32;
  if (s == "f16" || s == "float16" || s == "F16") return DType::f16;
  if (s == "bf16" || s == "bfloat16" || s == "BF16") return DType::bf16;
  throw std::invalid_argument("unknown dtype '" + s + "' (expected bf16, f16 or f32)");
}

}  // namespace servelab
