#pragma once
// Which all-reduce the tensor-parallel cuda backend runs after its row-parallel products (the O and
// down products): plain C++, shared by CudaBackendOptions, BackendSpec and the scenario parser.
//   auto   our one-shot all-reduce over CUDA peer memory (kernels/custom_allreduce.h) for messages
//          of at most all_reduce_max_bytes (decode steps' hidden states), NCCL above (prefill);
//   nccl   NCCL for every message (no peer buffers);
//   custom ours for every message (one larger than all_reduce_max_bytes is an error).
// Ours sums bf16 only: with dtype f16, auto runs NCCL and custom is refused.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace servelab {

enum class TpAllReduce { auto_select, nccl, custom };

/// The measured crossover on 2 x H200 (tp_bench at 33f1fd3, results/gpu/tp/README.md): inside
/// CUDA graphs ours is faster than NCCL up to 4 MiB (1.48x at 2.5 MiB, 1.19x at 4 MiB) and slower
/// from 8 MiB on (0.94x).
inline constexpr int64_t kTpCustomAllReduceDefaultMaxBytes = int64_t(4) << 20;

inline const char* to_string(TpAllReduce m) {
  switch (m) {
    case TpAllReduce::nccl: return "nccl";
    case TpAllReduce::custom: return "custom";
    default: return "auto";
  }
}

/// "auto" | "nccl" | "custom"; anything else throws std::invalid_argument listing them.
inline TpAllReduce parse_tp_all_reduce(const std::string& s) {
  if (s == "auto") return TpAllReduce::auto_select;
  if (s == "nccl") return TpAllReduce::nccl;
  if (s == "custom") return TpAllReduce::custom;
  throw std::invalid_argument("all_reduce: unknown value '" + s + "' (auto, nccl or custom)");
}

}  // namespace servelab
