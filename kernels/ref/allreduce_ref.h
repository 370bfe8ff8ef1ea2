#pragma once
// Plain C++ reference of the all-reduce (sum) of 16-bit floats that kernels/custom_allreduce.cu
// computes: out[i] = round(sum over ranks r = 0..n-1, in that order, of float(in_r[i])), the sum
// in float, one rounding to the storage type at the end (round to nearest even). With 2 ranks this
// is also what NCCL's bf16 / fp16 sum gives (one float add, one rounding).
#include <cstdint>
#include <vector>

namespace servelab::kernels::ref {

/// bf16 (raw bits) <-> float; float -> bf16 rounds to nearest even (NaN kept a quiet NaN).
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

/// ins[r] is rank r's input (raw bf16 bits), all the same length; returns the sum every rank gets.
/// negative_zero_as_positive: each input -0.0 is summed as +0.0 (the `lamport` variant sends -0.0
/// as +0.0: -0.0 marks a slot not yet written), so only a sum of negative zeros differs (+0.0).
std::vector<uint16_t> all_reduce_sum_bf16(const std::vector<std::vector<uint16_t>>& ins,
                                          bool negative_zero_as_positive = false);

}  // namespace servelab::kernels::ref
