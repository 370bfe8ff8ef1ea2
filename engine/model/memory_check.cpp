#include "engine/model/memory_check.h"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>

namespace servelab {

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<int64_t>(pages) * page;
}

double fp32_weight_bytes(const ModelConfig& c) {
  // The same count as ModelConfig::n_params(), in double.
  const double d = c.hidden_size, dq = double(c.n_heads) * (c.n_heads > 0 ? c.hidden_size / c.n_heads : 0);
  const double dkv = double(c.n_kv_heads) * (c.n_heads > 0 ? c.hidden_size / c.n_heads : 0);
  const double ffn = c.intermediate_size, v = c.vocab_size;
  double per_layer = d * dq + 2 * d * dkv + dq * d + 3 * d * ffn + 2 * d;
  if (c.attention_bias) per_layer += dq + 2 * dkv;
  double total = v * d + double(c.n_layers) * per_layer + d;
  if (!c.tie_embeddings) total += v * d;
  return total * 4.0;
}

double linear_params(const ModelConfig& c) {
  const double d = c.hidden_size, dq = double(c.n_heads) * (c.n_heads > 0 ? c.hidden_size / c.n_heads : 0);
  const double dkv = double(c.n_kv_heads) * (c.n_heads > 0 ? c.hidden_size / c.n_heads : 0);
  return double(c.n_layers) * (d * dq + 2 * d * dkv + dq * d + 3 * d * double(c.intermediate_size));
}

void check_bytes_fit(const ModelConfig& config, double need, const std::string& for_what, const std::string& what,
                     int64_t memory_bytes) {
  if (memory_bytes < 0) memory_bytes = physical_memory_bytes();
  if (memory_bytes == 0 || need <= static_cast<double>(memory_bytes)) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "model %s needs %.1f GiB for %s (%.3g parameters), more than this machine's %.1f GiB of memory",
                config.name.c_str(), need / kGiB, for_what.c_str(), fp32_weight_bytes(config) / 4.0,
                static_cast<double>(memory_bytes) / kGiB);
  throw std::runtime_error(what + ": " + buf);
}

void check_weights_fit(const ModelConfig& config, const std::string& what, int64_t memory_bytes) {
  check_bytes_fit(config, fp32_weight_bytes(config), "its fp32 weights", what, memory_bytes);
}

}  // namespace servelab
