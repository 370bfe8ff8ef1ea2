#pragma once
// Refusing a model that cannot fit before allocating it: a clear error with the figures instead of
// std::bad_alloc (or the OOM killer) half-way through loading.
#include <cstdint>
#include <string>

#include "engine/model/config.h"

namespace servelab {

/// This machine's physical memory in bytes (sysconf), or 0 when unknown.
int64_t physical_memory_bytes();

/// Bytes of the model's weights held as fp32 (what the CPU backend keeps), computed in double so
/// absurd configs do not overflow.
double fp32_weight_bytes(const ModelConfig& config);

/// Parameters of the decoder Linears alone (q, k, v, o, gate, up, down of every layer; no biases).
double linear_params(const ModelConfig& config);

/// Throws std::runtime_error("WHAT: model NAME needs 1234.5 GiB for its fp32 weights (N
/// parameters), more than this machine's 7.8 GiB of memory") when the fp32 weights exceed
/// `memory_bytes` (default: physical_memory_bytes(); 0 = unknown, no check).
void check_weights_fit(const ModelConfig& config, const std::string& what, int64_t memory_bytes = -1);

/// The same for `need` bytes held for `for_what` ("its quantized Linears packed, one layer
/// unpacked and the other tensors in fp32").
void check_bytes_fit(const ModelConfig& config, double need, const std::string& for_what, const std::string& what,
                     int64_t memory_bytes = -1);

}  // namespace servelab
