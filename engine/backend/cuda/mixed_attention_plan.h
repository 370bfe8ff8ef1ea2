#pragma once
// Where a mixed step's decodes take their attention (plain C++, tested without a GPU).
//
// The prefill attention kernel (kernels/attention_prefill_wgmma.cu) gives every sequence one block
// per 128-row query tile and KV head, one block an SM at a time, each as slow as the keys it reads,
// whatever its real rows: a decode's tile holds `group` real rows of 128 and costs as much as a
// chunk's tile of the same context. Beside a chunk whose tiles fill a wave, a few decodes start a
// second wave of full-length tiles (an H200, llama3-8b, context 3,773: the chunk of 501 rows alone
// 60 µs a layer in that kernel, with 2 decodes 112 µs; results/sim-validation/mixed-2026-11-30/),
// and a wave of decode tiles is bound by their K/V, which no other tile shares. The decode kernel
// splits a decode's context over the whole GPU and streams its K/V at the memory's rate, but pays
// that for every decode where their tiles may have been free (a chunk of 125 rows leaves most SMs
// idle). mixed_decode_prefix prices both ways and picks.
#include <cstdint>
#include <span>
#include <vector>

namespace servelab::cuda {

/// Where a mixed step's decodes take their attention (CudaBackendOptions::mixed_decodes,
/// `backend.mixed_decodes` in a scenario): auto_select by mixed_decode_prefix, or always one kernel.
enum class MixedDecodes { auto_select, prefill_kernel, decode_kernel };
const char* to_string(MixedDecodes m);  ///< "auto", "prefill", "decode"

/// The costs the choice weighs (defaults fitted on an H200, bf16, head_dim 128: results/sim-
/// validation/mixed-2026-11-30/, call 7; an H100's slower memory slows both paths' K/V reads, and
/// the choice there is not yet measured).
struct MixedAttentionCosts {
  int n_sms = 132;
  int n_kv_heads = 8;            ///< this rank's KV heads
  int group = 4;                 ///< query heads per KV head (packed into the tile's rows)
  int head_dim = 128;
  int tile_rows = 128;           ///< the prefill kernel's query rows a block (kBM)
  double tile_ns_per_key = 13.6; ///< a prefill block's compute time per key it reads
  double tile_ns_fixed = 2000;   ///< and its fixed cost
  double prefill_bytes_per_ns = 3000; ///< the prefill kernel's K/V read rate (a wave's distinct bytes)
  double decode_bytes_per_ns = 3300;  ///< the decode kernel's K/V read rate
  double decode_ns_fixed = 4000;      ///< its launch and split combine
  int kv_bytes = 2;              ///< bytes a K or V element
};

/// Modelled time (ns) of the prefill kernel over these sequences: blocks (tile × KV head) longest
/// first in waves of n_sms, a wave as long as its longest block's compute (from its last key,
/// causal) or its K/V bytes at prefill_bytes_per_ns, whichever is more (a sequence's tiles of one
/// head share their keys through L2: each counts its share).
double prefill_attention_ns(const MixedAttentionCosts& c, std::span<const int32_t> q_lens,
                            std::span<const int32_t> context_lens);

/// Modelled time (ns) of the decode kernel over one-row sequences of these keys: their K/V at
/// decode_bytes_per_ns, plus decode_ns_fixed.
double decode_attention_ns(const MixedAttentionCosts& c, std::span<const int32_t> context_lens);

/// How many of the step's leading one-row sequences (the scheduler's decodes, ahead of its chunks)
/// should run through the decode kernel: all of them when that is modelled cheaper than keeping
/// them in the prefill kernel beside the rest, else 0 (also 0 when no multi-row sequence follows
/// them). q_lens[s] = sequence s's rows, context_lens[s] = its keys including them.
int mixed_decode_prefix(const MixedAttentionCosts& c, std::span<const int32_t> q_lens,
                        std::span<const int32_t> context_lens);

/// The cuda backend's choice, set up once and asked for each eager step that is not decode-only.
class MixedDecodePlanner {
 public:
  MixedDecodePlanner() = default;  ///< never moves a decode
  /// `allowed`: the backend may move decodes at all (not batch-invariant, no FP8 KV cache). auto
  /// prices only where `modelled` (the prefill kernel the costs describe runs: wgmma, head_dim
  /// 128); decode_kernel moves them wherever allowed.
  MixedDecodePlanner(MixedDecodes mode, bool allowed, bool modelled, const MixedAttentionCosts& costs);
  /// The leading one-row sequences to run through the decode kernel in a step of these sequences
  /// (query_start: n_seqs + 1 row offsets; context_lens: n_seqs keys); 0 when none follow a chunk.
  int decode_prefix(std::span<const int32_t> query_start, std::span<const int32_t> context_lens);

 private:
  MixedDecodes mode_ = MixedDecodes::prefill_kernel;
  MixedAttentionCosts costs_;
  std::vector<int32_t> q_lens_;  // scratch
};

}  // namespace servelab::cuda
