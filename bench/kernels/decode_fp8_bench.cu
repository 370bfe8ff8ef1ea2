// kernel_bench --fp8kv: paged decode attention over an FP8 KV cache (decode_attention_fp8,
// kernels/kv_fp8.h) beside bf16 KV on the same block tables (the engine's layout after a seeded
// churn, PagedBatch), in interleaved rounds: GQA 1 / 4 / 8 (32 query heads, head_dim 128),
// batches 1 / 32 / 128, contexts 1k / 4k. Each row's GB/s counts the bytes that kernel reads (FP8:
// codes and scales, 132 bytes a row; bf16: 256) plus q and out, against the copy ceiling; bf16
// is timed with its default kernel (tensor cores for GQA >= 2) and, for GQA >= 2, its CUDA-core
// kernel; FP8 with the Fp8KvDecode variants, each with its own split and workspace: the default
// (by_env unset: by shape), mma2 (tensor cores, registers, 2 steps a pass), mma_async4 (a ring
// of cp.async stages a warp, 4 blocks an SM; mma_async and mma_async3, for 2 and 3, are not timed
// since 2026-12-03), mma_async4f (mma_async4 with the codes to f16 by cvt), mma_bulk (mma_async4f
// with each stage filled by two bulk copies), mma_regs (the f16 arithmetic with each step's codes
// loaded into registers 2 steps ahead, 2 blocks an SM), shift_mask (CUDA cores; prmt gives the same bits and
// measured the same time, 0.94-1.03x, results/gpu/quant/h200-2026-11-29-9ab3082-fp8kv2). The FP8 arena holds valid random codes (no NaN) and
// positive scales; `--only "b32 ctx4096 gqa1"` times that shape alone (for a profiler). The kernels' numerics are tested in tests/kernels_gpu/kv_fp8_gpu_test.cpp.
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "bench/kernels/paged_batch.cuh"
#include "kernels/attention.h"
#include "kernels/kv_fp8.h"

namespace servelab::kernels::bench {
namespace decode_fp8_bench_detail {

/// Every slot: n_kv rows of random E4M3 codes without NaN (bit pattern S.1111.111), and positive
/// scales around 1/64, in the arena's layout (kv_fp8.h).
__global__ void fill_fp8_arena(uint8_t* arena, int64_t n_slots, Fp8KvLayout lay, int n_kv, uint64_t seed) {
  const int hd = lay.head_dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_slots * n_kv * hd; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t slot = i / (int64_t(n_kv) * hd);
    const int h = int(i / hd % n_kv), c = int(i % hd);
    uint64_t x = (uint64_t(i) + seed) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    uint8_t code = uint8_t(x >> 32);
    if ((code & 0x7f) == 0x7f) code &= 0xfe;
    arena[lay.codes_at(slot, h) + c] = code;
  }
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_slots * n_kv; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / n_kv, h = i % n_kv;
    *reinterpret_cast<float*>(arena + lay.scale_at(s, int(h))) = 0.015625f * (1.0f + float((i * 7919) % 64) / 64.0f);
  }
}

}  // namespace decode_fp8_bench_detail

void bench_decode_attention_fp8(std::mt19937_64& rng, int n_sms, int64_t l2, double copy_gbs, const std::string& only,
                                ArenaOrder order) {
  using namespace decode_fp8_bench_detail;
  constexpr int kHd = 128, kHeads = 32;
  for (int group : {1, 4, 8})
    for (int batch : {1, 32, 128})
      for (int ctx : {1024, 4096}) {
        if (!only.empty() && only != "b" + std::to_string(batch) + " ctx" + std::to_string(ctx) + " gqa" + std::to_string(group))
          continue;
        const int n_kv = kHeads / group;
        PagedBatch pb(batch, ctx, kHeads, n_kv, l2, rng, order);
        const int64_t sb = fp8_kv_slot_bytes(n_kv, kHd);
        const Fp8KvLayout lay = Fp8KvLayout::of(n_kv, kHd);
        Buf k8(size_t(fp8_kv_arena_slots(pb.n_slots) * sb)), v8(k8.bytes);
        fill_fp8_arena<<<2048, 256>>>(k8.get<uint8_t>(), pb.n_slots, lay, n_kv, rng());
        fill_fp8_arena<<<2048, 256>>>(v8.get<uint8_t>(), pb.n_slots, lay, n_kv, rng());
        CUDA_CHECK_LAUNCH();
        // Columns: bf16 default, bf16 CUDA cores (GQA only), then the FP8 variants and cuts.
        constexpr int kFp8 = 7, kCols = 2 + kFp8;
        const Fp8KvDecode fv[kFp8] = {Fp8KvDecode::by_env,      Fp8KvDecode::mma2,     Fp8KvDecode::mma_async4,
                                      Fp8KvDecode::mma_async4f, Fp8KvDecode::mma_bulk, Fp8KvDecode::mma_regs,
                                      Fp8KvDecode::shift_mask};
        const SplitPolicy fsp[kFp8] = {};
        std::vector<std::vector<DecodeAttentionArgs>> args(kCols);
        for (int r = 0; r < pb.n_rot; ++r) {
          args[0].push_back(pb.decode_args(r, SplitPolicy{}, n_sms));
          if (group > 1) args[1].push_back(pb.decode_args(r, SplitPolicy{}, n_sms, false));
        }
        // FP8: a zeroed workspace per column, for its cut.
        DecodeSplit fs[kFp8];
        std::vector<std::unique_ptr<Buf>> ws;
        for (int k = 0; k < kFp8; ++k) {
          fs[k] = decode_attention_fp8_split(pb.decode_args(0, fsp[k], n_sms, false), n_sms, fv[k]);
          ws.push_back(std::make_unique<Buf>(decode_attention_workspace_bytes(batch, kHeads, kHd, fs[k].n_splits)));
          CUDA_CHECK(cudaMemset(ws.back()->p, 0, ws.back()->bytes));
          for (int r = 0; r < pb.n_rot; ++r) {
            DecodeAttentionArgs a = pb.decode_args(r, fsp[k], n_sms, false);
            a.k_cache = k8.p;
            a.v_cache = v8.p;
            a.workspace = ws.back()->get<float>();
            a.workspace_bytes = ws.back()->bytes;
            args[2 + k].push_back(a);
          }
        }
        std::vector<std::unique_ptr<GraphTimer>> timers;
        std::vector<GraphTimer*> tp;
        std::vector<int> cols;
        for (int c = 0; c < kCols; ++c) {
          if (args[c].empty()) continue;
          auto& list = args[c];
          const int n_rot = pb.n_rot;
          if (c >= 2) {
            const Fp8KvDecode v = fv[c - 2];
            timers.push_back(std::make_unique<GraphTimer>([&list, n_rot, v](int i, cudaStream_t st) { decode_attention_fp8(list[i % n_rot], st, v); }, 20));
          } else {
            timers.push_back(std::make_unique<GraphTimer>([&list, n_rot](int i, cudaStream_t st) { decode_attention(list[i % n_rot], st); }, 20));
          }
          tp.push_back(timers.back().get());
          cols.push_back(c);
        }
        const std::vector<double> med = time_rounds(tp, 15);
        const double qo = 2.0 * batch * kHeads * kHd * 2;
        const double bf16_bytes = double(batch) * ctx * n_kv * kHd * 2 * 2 + qo;
        const double fp8_bytes = double(batch) * ctx * n_kv * (kHd + 4) * 2 + qo;
        const std::string shape = "b" + std::to_string(batch) + " ctx" + std::to_string(ctx) + " gqa" + std::to_string(group);
        static const char* const kNames[kCols] = {
            "decode_attn_bf16kv",        "decode_attn_bf16kv_cudacore", "decode_attn_fp8kv",
            "decode_attn_fp8kv_mma2",    "decode_attn_fp8kv_async4",    "decode_attn_fp8kv_async4f",
            "decode_attn_fp8kv_bulk",    "decode_attn_fp8kv_regs",      "decode_attn_fp8kv_cudacore"};
        double ms_of[kCols] = {};
        for (size_t k = 0; k < cols.size(); ++k) {
          const int c = cols[k];
          const double ms = med[k];
          ms_of[c] = ms;
          const DecodeSplit used = c >= 2 ? fs[c - 2] : decode_attention_split(args[c][0], n_sms);
          const std::string cut = " (" + std::to_string(used.n_splits) + " splits" + (used.tensor_cores ? " mma" : "") + ")";
          record(kNames[c], shape + cut + " " + std::to_string(ms * 1e3).substr(0, 6) + " us",
                 (c >= 2 ? fp8_bytes : bf16_bytes) / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
        }
        for (int c = 2; c < kCols; ++c)
          record(std::string(kNames[c]) + "_time", shape + " / bf16 kernel time", ms_of[c] / ms_of[0], "x", "-", 0);
      }
}

}  // namespace servelab::kernels::bench
