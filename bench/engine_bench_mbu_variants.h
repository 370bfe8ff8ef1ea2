#pragma once
// engine_bench --mbu's decode-path variants (bench/engine_bench.cpp): the cuda backend's
// DecodePathOptions under each name, as the figures in results/gpu/README.md were measured.
#include <stdexcept>
#include <string>

#include "engine/backend/cuda/cuda_backend.h"

namespace servelab::bench {

/// A decode path of the cuda backend (CudaBackendOptions::decode, cuda_backend.h): gemv (off |
/// unsplit | all), PDL (programmatic dependent launch), SiLU (gate|up and SiLU·mul in one gemv
/// launch), waves (gemv splits K below this many waves of resident blocks; 0 never), loop (gemv's
/// loop: bit 0 rolling pipeline, bit 1 L2::256B hint), rope (RoPE and the K/V write in the q|k|v
/// gemv's epilogue).
struct MbuVariant {
  const char* name;
  const char* gemv;
  bool pdl, silu;
  int waves, loop;
  bool rope = true;  ///< q|k|v, RoPE and the K/V write in one gemv launch
  int attn_pdl = 0;  ///< decode attention's PDL mode (DecodePathOptions::attention_pdl)
};
constexpr MbuVariant kMbuVariants[] = {
    {"before", "off", false, false, 2, 0},       // cuBLASLt for every product, plain launches
    {"plain", "off", false, false, 2, 0},        // the same, not recorded as decode_step_mbu_before
    {"pdl", "off", true, false, 2, 0},           // PDL beside cuBLASLt (since 2026-11-23 the backend
                                                 // turns PDL off without gemv: this equals "plain")
    {"unsplit", "unsplit", true, true, 2, 0},    // gemv where it needs no K split, fused SiLU, PDL
    {"unsplit_v3", "unsplit", true, true, 2, 3},
    {"all_w1", "all", true, true, 1, 0},         // gemv for every decode product, K split below 1 wave
    {"all_w1_v1", "all", true, true, 1, 1},
    {"all_w1_v2", "all", true, true, 1, 2},
    {"all_w1_v3", "all", true, true, 1, 3},
    {"all_w2_v3", "all", true, true, 2, 3},
    {"all_w0_v3", "all", true, true, 0, 3},      // K split only below n_sms / 2 blocks (none here)
    {"all_w1_v3_nopdl", "all", false, true, 1, 3},
    {"after_nopdl", "all", false, true, 0, 3},   // the default without PDL
    {"after", "all", true, true, 0, 3},          // the default (cuda_backend_impl.h)
    {"after_norope", "all", true, true, 0, 3, false},  // the default with RoPE/KV write a kernel of its own (the step
                                                       // before 2026-11-30)
    {"after_attn1", "all", true, true, 0, 3, true, 1},  // decode attention with PDL, the O product started at once
    {"after_attn2", "all", true, true, 0, 3, true, 2},  // ... the O product started once attention is done with its K/V
};

inline const MbuVariant& find_variant(const std::string& name) {
  for (const MbuVariant& v : kMbuVariants)
    if (name == v.name) return v;
  throw std::invalid_argument("unknown decode-path variant '" + name + "'");
}

inline DecodePathOptions decode_path(const MbuVariant& v) {
  using Gemv = DecodePathOptions::Gemv;
  const std::string g = v.gemv;
  return DecodePathOptions{.gemv = g == "off" ? Gemv::off : g == "unsplit" ? Gemv::unsplit : Gemv::all,
                           .gemv_waves = v.waves,
                           .gemv_loop = v.loop,
                           .fuse_gate_up_silu = v.silu,
                           .fuse_qkv_rope = v.rope,
                           .attention_pdl = v.attn_pdl,
                           .pdl = v.pdl};
}

}  // namespace servelab::bench
