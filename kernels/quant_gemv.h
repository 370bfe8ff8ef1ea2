#pragma once
// Skinny products over quantized weights for decode (M = 1–16 rows): y[M, N] = x[M, K] ·
// dequant(w)[N, K]ᵀ (+ y), x bf16, fp32 accumulate, fp32 or bf16 output (the cuda backend's
// activations), the weights dequantized in registers as they stream in (W8A16 FP8 and W4A16
// INT4: the decode win is fewer weight bytes).
// Five kernels, selectable (QuantGemvArgs::kernel, or SERVELAB_QUANT_GEMV=auto|warp|mma|stream|steps|
// packed in the environment) so one run can measure them side by side:
// - packed (quant_gemv_packed.cu): INT4 only, M = 1-8, over the weights repacked into the mma
//   fragments' order (int4_pack.h: QuantGemvArgs::w_packed, w_packed_groups), the steps kernel's
//   work split, loads into registers a step ahead (or through a per-warp cp.async ring); asked for
//   by name only (measured slower than steps over llama2-7b's decode products on an H200);
// - steps (quant_gemv_steps.cu, the plan of gemv_plan.h): the bf16 gemv's shape, M = 1-16 (one or
//   two 8-row column tiles): a block's warps take K steps of its 32 rows in turn, x read straight
//   from global memory; FP8, and INT4 with groups of a power of two from 128;
// - stream (quant_gemv_stream.cu, work split in quant_gemv_stream_plan.h): tensor cores, weights
//   streamed into registers by many small blocks; FP8 and INT4 with groups of a multiple of 128;
// - mma (quant_gemv_mma.cu, quant_gemv_plan.h): tensor cores, a cp.async ring, one block an SM;
// - warp (quant_gemv.cu): a warp per output row on CUDA cores; takes every product (INT4's
//   smaller groups, long K without a workspace).
// auto picks per format and M the kernel measured fastest on an H200 (quant_gemv_auto_kernel);
// a kernel asked for that cannot take the product falls back along packed -> steps -> stream -> mma -> warp. Each
// kernel gives a row the same result whatever M is (its plan ignores M); auto may pick different
// kernels for different M, whose sums differ in rounding.
// Kernel layouts (a loader repacks checkpoint layouts into these once):
//   fp8:  codes uint8 [N, K] E4M3; scales fp32 [N] (per channel) or [1] (per tensor).
//   int4: codes uint8 [N, K/2], byte j of a row = k 2j (low nibble) and 2j+1 (high nibble);
//         scales and zeros fp32 [K / group_size, N] (w = (q − zero) · scale). GPTQ act order is
//         applied by permuting K of w and x beforehand (as Marlin and exllama reorder), not here.
//         Zeros are integers 0..15 (as AWQ and GPTQ store them): the kernel subtracts them in bf16.
// Requirements: K a multiple of 16, group_size a multiple of 16, x_stride a multiple of 8, x and
// w 16-byte aligned.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemv_plan.h"

namespace servelab::kernels {

enum class QuantWeightKind { fp8_e4m3, int4 };

/// Rows the steps kernel takes: one column tile of 8 rows of x, or two (9-16 rows).
constexpr int kQuantGemvStepsMaxRows = 16;
enum class QuantGemvKernel { auto_select, warp, mma, stream, steps, packed };

/// "auto", "warp", "mma", "stream", "steps", "packed"; parse throws std::invalid_argument naming the bad value.
const char* to_string(QuantGemvKernel k);
QuantGemvKernel parse_quant_gemv_kernel(const char* s);

struct QuantGemvArgs {
  QuantWeightKind kind = QuantWeightKind::fp8_e4m3;
  const void* x = nullptr;        ///< bf16 [m, x_stride]
  int64_t x_stride = 0;           ///< elements between rows of x (>= k)
  const uint8_t* w = nullptr;     ///< codes (layouts above)
  const float* scales = nullptr;
  const float* zeros = nullptr;   ///< int4 only
  /// int4, optional: the same matrix in int4_pack.h's fragment layout (pack_int4_fragments), which
  /// the packed kernel reads (codes; 16-byte group records). Null: that kernel is not taken.
  const uint8_t* w_packed = nullptr;
  const void* w_packed_groups = nullptr;
  int n_scales = 0;               ///< fp8: 1 (per tensor) or n (per channel)
  int group_size = 128;           ///< int4
  void* y = nullptr;              ///< fp32 [m, n], or bf16 when out_bf16
  bool out_bf16 = false;
  int m = 0, n = 0, k = 0;
  bool accumulate = false;        ///< y += product
  /// > 0: fused SiLU·mul (steps and packed kernels only, bf16 out, no accumulate): w is the merged
  /// [gate; up] projection, n = 2 · silu_ffn, and y [m, silu_ffn] = silu(gate) · up, each half
  /// rounded to bf16 first (the bits of the product stored, then kernels::silu_mul).
  int silu_ffn = 0;
  /// head_dim > 0: the q|k|v product with RoPE and the K/V write in the epilogue (steps kernel
  /// only, bf16 out, no accumulate, n the q|k|v width; gemv_rope_kv.cuh): y gets q, the caches
  /// k and v, the bits of the product stored and then kernels::rope_kv_write.
  gemv::RopeKv rope;
  /// Which kernel: auto_select takes SERVELAB_QUANT_GEMV when set, else quant_gemv_auto_kernel.
  QuantGemvKernel kernel = QuantGemvKernel::auto_select;
  /// stream and steps kernels' split target, blocks a multiprocessor (1..4; 0: their defaults, 2 and
  /// 1): a tuning knob kernel_bench sweeps.
  int stream_blocks_per_sm = 0;
  /// steps kernel: steps a warp loads before computing them (1 or 2; 0: quant_gemv_steps_in_flight,
  /// FP8 2 up to 8 rows and 1 above, INT4 1): a tuning knob kernel_bench sweeps.
  int steps_in_flight = 0;
  /// steps kernel, INT4: 16-byte code vectors a lane a step (1: 128-value warp steps, half the
  /// registers, three blocks an SM at 1-8 rows; 2: 256-value steps, two blocks; 0:
  /// quant_gemv_steps_vectors's rule): a tuning knob kernel_bench sweeps. FP8 always takes 2.
  int steps_vectors = 0;
  /// packed kernel: 1, no ring, each warp's next step loaded into registers (the default: 0), or
  /// 2..4 shared-memory stages of a per-warp cp.async ring: a tuning knob kernel_bench sweeps.
  int packed_stages = 0;
  /// Split-K workspace (optional: without it no product is split, and a long K may then take the
  /// slower warp-per-row kernel). partials: quant_gemv_workspace_floats(n, k) floats; counters:
  /// quant_gemv_workspace_counters(n) ints, zero before the first launch (they reset themselves).
  float* partials = nullptr;
  int64_t partial_capacity = 0;   ///< floats at partials
  int32_t* counters = nullptr;
  int counter_capacity = 0;       ///< ints at counters
};

/// Workspace that covers every product of at most max_n outputs and max_k depth on this device.
int64_t quant_gemv_workspace_floats(int max_n, int max_k);
int quant_gemv_workspace_counters(int max_n);

/// Throws std::invalid_argument naming the field when the arguments break the requirements.
void validate(const QuantGemvArgs& a);

/// The kernel auto picks for the format at m rows (the H200 measurement, docs/quantization.md).
QuantGemvKernel quant_gemv_auto_kernel(QuantWeightKind kind, int m);

/// The steps kernel's default steps_in_flight for the format at m rows (it does not change the
/// sums), and INT4's default steps_vectors for n outputs on n_sms multiprocessors: 1 where the
/// product has more than two waves of 32-row blocks (QKV, gate|up, the LM head), 2 where fewer
/// (O, down: one vector's three blocks an SM leave slots empty); SERVELAB_QUANT_STEPS_VECTORS=1|2
/// in the environment sets it for a run. The vectors set the plan; the rule ignores M, so a row's
/// bits do not depend on M.
int quant_gemv_steps_in_flight(QuantWeightKind kind, int m);
int quant_gemv_steps_vectors(int n, int n_sms);

/// SERVELAB_QUANT_GEMV's kernel, read once (auto_select when unset).
QuantGemvKernel quant_gemv_env_kernel();

/// The kernel quant_gemv runs for a (after auto and the fall-backs).
QuantGemvKernel quant_gemv_kernel_for(const QuantGemvArgs& a);

/// Runs the product (m in [1, 16]) on the stream (with programmatic dependent launch: the weight
/// loads start before the kernel that writes x has finished).
void quant_gemv(const QuantGemvArgs& a, cudaStream_t stream);

}  // namespace servelab::kernels
