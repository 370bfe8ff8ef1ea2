#include <stdexcept>
#include <string>

#include "engine/kv/kv_manager.h"

namespace servelab {

double KvBreakdown::utilization() const {
  const int64_t u = used();
  return u > 0 ? static_cast<double>(stored) / static_cast<double>(u) : 0.0;
}

const char* to_string(KvKind k) { return k == KvKind::naive ? "naive" : "paged"; }

const char* to_string(NaiveReserve r) {
  switch (r) {
    case NaiveReserve::max: return "max";
    case NaiveReserve::pow2: return "pow2";
    case NaiveReserve::oracle: return "oracle";
  }
  return "?";
}

void KvConfig::validate() const {
  if (kind == KvKind::paged && (block_size < 1 || block_size > 4096))
    throw std::invalid_argument("kv.block_size must be in [1, 4096] (got " + std::to_string(block_size) + ")");
  if (max_model_len < 1)
    throw std::invalid_argument("kv.max_model_len must be >= 1 (got " + std::to_string(max_model_len) + ")");
}

}  // namespace servelab
