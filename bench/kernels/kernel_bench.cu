// kernel_bench: validates the shipped kernels against the CPU references, then times them with
// CUDA events after warm-up (median of repeats, inputs rotated so repeats do not run from L2),
// and prints achieved GB/s and TFLOP/s next to ceilings measured in the same run: a large
// device-to-device copy and a large cuBLASLt bf16 GEMM on random data.
//   kernel_bench [--json FILE] [--quick] [--sweep] [--decode-only | --prefill-only] [--only SHAPE] [--commit SHA]
// --sweep, DECODE_VARIANTS and DECODE_SHAPES: the decode columns (decode_attn_bench.cu).
// --decode-only: validation, the copy ceiling and paged decode attention only. --only "b1 ctx1024
// gqa4": that decode shape alone. --prefill-only: validation, the ceilings and prefill attention
// (prefill_attn_bench.cu) only.
// The decode weight products of llama2-7b (M = 1 and 8) are timed through Gemm with its skinny
// kernel (gemv.cu) and with cuBLASLt alone, side by side.
// JSON: a list of {name, value, unit, peer_or_ceiling, ratio, shape, device, date, commit}.
// --quant-only: validation, the ceilings, the quantized decode products and the FP8 GEMM rows
// (issue 26) only. --fp8kv: validation, the copy ceiling and decode attention over an FP8 KV cache
// beside bf16 KV (decode_fp8_bench.cu) only; --arena lays its batches out otherwise than the engine's
// tables after a churn (shuffled blocks, or identity: each sequence one contiguous run).
// Exit status: 0 ok, 1 a validation failed, 2 bad usage.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/half.h"
#include "kernels/attention.h"
#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "bench/kernels/paged_batch.cuh"
#include "kernels/common.cuh"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/sampling.h"

using namespace servelab;
using namespace servelab::kernels;
using namespace servelab::kernels::bench;

namespace {

/// Decode and prefill on small shapes against attention_ref: the numbers below time checked code.
bool validate(std::mt19937_64& rng, int n_sms) {
  bool ok = true;
  for (int group : {1, 4}) {
    PagedBatch b(3, 300, 8, 8 / group, 0, rng);
    DecodeAttentionArgs a = b.decode_args(0, SplitPolicy{}, n_sms);
    a.split.fixed_split_len = 64;  // exercise the split path too
    const size_t need = decode_attention_workspace_bytes(3, 8, 128, 5);
    b.ws = std::make_unique<Buf>(need);
    CUDA_CHECK(cudaMemset(b.ws->p, 0, need));
    a.workspace = b.ws->get<float>();
    a.workspace_bytes = need;
    CUDA_CHECK(cudaMemset(b.out->p, 0xFF, b.out->bytes));
    decode_attention(a, nullptr);
    // Host copies for the reference.
    const std::vector<float> kf = to_float_bf16(*b.k, b.n_slots * b.n_kv * 128), vf = to_float_bf16(*b.v, b.n_slots * b.n_kv * 128);
    const std::vector<float> qf = to_float_bf16(*b.q, 3 * 8 * 128), got = to_float_bf16(*b.out, 3 * 8 * 128);
    std::vector<int32_t> tables(3 * b.blocks_per_seq), lens(3, 300), qs = {0, 1, 2, 3};
    CUDA_CHECK(cudaMemcpy(tables.data(), b.tables->p, tables.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> ref(qf.size());
    AttentionRefArgs r;
    r.q = qf.data();
    r.k_cache = kf.data();
    r.v_cache = vf.data();
    r.shape = KvShape{b.n_slots, b.n_kv, 128};
    r.n_heads = 8;
    r.n_seqs = 3;
    r.query_start = qs.data();
    r.context_lens = lens.data();
    r.kv = a.kv;
    r.kv.block_tables = tables.data();
    r.scale = a.scale;
    r.out = ref.data();
    attention_ref(r);
    const double e = rel_err(got, ref);
    std::printf("  validate decode group %d: rel err %.2e\n", group, e);
    ok = ok && e < 1e-2;

    // Prefill: the same KV, 300 query rows of sequence 0 (q drawn fresh).
    Buf pq(size_t(300) * 8 * 128 * 2), pout(size_t(300) * 8 * 128 * 2);
    fill_random(pq.p, 300 * 8 * 128, rng());
    CUDA_CHECK(cudaMemset(pout.p, 0xFF, pout.bytes));
    std::vector<int32_t> pqs = {0, 300};
    Buf dqs(8);
    CUDA_CHECK(cudaMemcpy(dqs.p, pqs.data(), 8, cudaMemcpyHostToDevice));
    PrefillAttentionArgs p;
    p.q = pq.p;
    p.q_row_stride = 8 * 128;
    p.k_cache = b.k->p;
    p.v_cache = b.v->p;
    p.shape = r.shape;
    p.n_heads = 8;
    p.n_seqs = 1;
    p.n_tokens = 300;
    p.query_start = dqs.get<int32_t>();
    p.context_lens = b.ctx_lens->get<int32_t>();
    p.kv = a.kv;
    p.scale = a.scale;
    p.out = pout.p;
    p.out_row_stride = 8 * 128;
    prefill_attention(p, nullptr);
    const std::vector<float> pqf = to_float_bf16(pq, 300 * 8 * 128), pgot = to_float_bf16(pout, 300 * 8 * 128);
    CUDA_CHECK(cudaMemset(pout.p, 0xFF, pout.bytes));
    prefill_attention_mma(p, nullptr);
    const std::vector<float> pgot_mma = to_float_bf16(pout, 300 * 8 * 128);
    std::vector<float> pref(pqf.size());
    r.q = pqf.data();
    r.n_seqs = 1;
    r.query_start = pqs.data();
    r.out = pref.data();
    attention_ref(r);
    const double pe = rel_err(pgot, pref), pe_mma = rel_err(pgot_mma, pref);
    std::printf("  validate prefill group %d (%s): rel err %.2e (mma %.2e)\n", group, prefill_wgmma_supported(128) ? "wgmma" : "mma", pe,
                pe_mma);
    ok = ok && pe < 1e-2 && pe_mma < 1e-2;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "kernel_bench.json";
  std::string commit = "unknown", only, arena = "engine";
  bool quick = false, sweep = false, decode_only = false, prefill_only = false, quant_only = false, verify_rows = false;
  bool fp8kv = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    else if (!std::strcmp(argv[i], "--decode-only")) decode_only = true;
    else if (!std::strcmp(argv[i], "--prefill-only")) prefill_only = true;
    else if (!std::strcmp(argv[i], "--quant-only")) quant_only = true;
    else if (!std::strcmp(argv[i], "--verify-rows")) verify_rows = true;
    else if (!std::strcmp(argv[i], "--fp8kv")) fp8kv = decode_only = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--arena") && i + 1 < argc) arena = argv[++i];
    else {
      std::fprintf(stderr, "usage: kernel_bench [--json FILE] [--quick] [--sweep] [--decode-only | --prefill-only | --quant-only | --verify-rows | --fp8kv] [--only SHAPE] [--arena engine|shuffled|identity] [--commit SHA]\n");
      return 2;
    }
  }
  if (arena != "engine" && arena != "shuffled" && arena != "identity") {
    std::fprintf(stderr, "kernel_bench: --arena must be engine, shuffled or identity (got '%s')\n", arena.c_str());
    return 2;
  }
  try {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int n_sms = prop.multiProcessorCount;
    const int64_t l2 = prop.l2CacheSize;
    std::printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, n_sms, l2 / 1e6);
    std::mt19937_64 rng(12345);
    if (verify_rows) {  // issue 27's verification attention only, no validation or ceilings
      bench_decode_rows(rng, n_sms, 0.0);  // a printed table (no JSON)
      return 0;
    }

    std::printf("validation against the CPU references:\n");
    const bool valid_attention = validate(rng, n_sms), valid_gemv = decode_only || prefill_only || validate_gemv();
    const bool valid_fp8 = decode_only || validate_fp8_gemm();
    const bool valid = valid_attention && valid_gemv && valid_fp8;
    if (!valid) std::printf("VALIDATION FAILED\n");

    std::printf("ceilings:\n");
    double copy_gbs = 0, gemm_tflops = 0;
    {
      const size_t bytes = size_t(1) << 31;
      Buf a(bytes), b(bytes);
      fill_random(a.p, bytes / 2, 1);
      const double ms = time_ms([&](int) { CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); }, 20);
      copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;  // bytes read + bytes written
      record("d2d_copy", "2 GiB", copy_gbs, "GB/s", "-", 0);
    }
    if (!decode_only) {
      const int n = 8192;
      Buf x(size_t(n) * n * 2), w(size_t(n) * n * 2), y(size_t(n) * n * 2);
      fill_random(x.p, int64_t(n) * n, 2);
      fill_random(w.p, int64_t(n) * n, 3);
      Gemm gemm(false);
      const double ms = time_ms([&](int) { gemm.run(ScalarType::bf16, x.p, w.p, y.p, n, n, n, false, nullptr); }, 10);
      gemm_tflops = 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
      record("cublaslt_gemm_bf16", "8192x8192x8192", gemm_tflops, "TFLOP/s", "-", 0);
    }

    if (fp8kv) {  // issue 26's FP8 KV rows only: decode attention over FP8 beside bf16 KV
      std::printf("paged decode attention, FP8 KV cache beside bf16 KV (head_dim 128, block 16):\n");
      bench_decode_attention_fp8(rng, n_sms, l2, copy_gbs, only,
                                 arena == "shuffled" ? ArenaOrder::shuffled : arena == "identity" ? ArenaOrder::identity : ArenaOrder::engine);
      decode_only = prefill_only = true;  // nothing below runs
    }
    if (quant_only) {  // issue 26's rows only: the quantized decode products and the FP8 GEMM
      std::printf("decode weight products over quantized weights (llama2-7b; quant_gemv vs bf16):\n");
      bench_quant_gemv(l2, copy_gbs);
      std::printf("FP8 E4M3 GEMM (cuBLASLt) vs bf16:\n");
      bench_fp8_gemm(gemm_tflops, copy_gbs);
      decode_only = prefill_only = true;  // nothing below runs
    }
    if (!decode_only && !prefill_only) {
      std::printf("decode weight products (llama2-7b, bf16; gemv vs cuBLASLt):\n");
      bench_gemv(l2, copy_gbs);
      std::printf("decode weight products over quantized weights (llama2-7b; quant_gemv vs bf16):\n");
      bench_quant_gemv(l2, copy_gbs);
      std::printf("FP8 E4M3 GEMM (cuBLASLt) vs bf16:\n");
      bench_fp8_gemm(gemm_tflops, copy_gbs);
    }

    if (!prefill_only) bench_decode_attention({quick, sweep, only}, rng, n_sms, l2, copy_gbs);

    if (!decode_only) {
    bench_prefill_attention(quick, rng, n_sms, gemm_tflops);

    if (!prefill_only) std::printf("element-wise kernels (256 rows, d 4096, ffn 11008):\n");
    if (!prefill_only) {
      const int r = 256, d = 4096, ffn = 11008, n_rot = 8;
      Buf x(size_t(n_rot) * r * d * 2), res(size_t(r) * d * 2), w(d * 2), out(size_t(r) * d * 2);
      fill_random(x.p, int64_t(n_rot) * r * d, 4);
      fill_random(res.p, int64_t(r) * d, 5);
      fill_random(w.p, d, 6);
      auto xr = [&](int i) { return x.get<char>() + size_t(i % n_rot) * r * d * 2; };
      const double rb = double(r) * d * 2;
      double ms = time_ms([&](int i) { add_rms_norm(ScalarType::bf16, xr(i), res.p, w.p, out.p, r, d, 1e-5f, nullptr); }, 50);
      record("add_rms_norm_fused", "256x4096", 4 * rb / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      ms = time_ms([&](int i) {
        residual_add(ScalarType::bf16, xr(i), res.p, int64_t(r) * d, nullptr);
        rms_norm(ScalarType::bf16, res.p, w.p, out.p, r, d, 1e-5f, nullptr);
      }, 50);
      record("add_rms_norm_unfused", "256x4096 (same bytes counted)", 4 * rb / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      Buf gu(size_t(n_rot) * r * 2 * ffn * 2), act(size_t(r) * ffn * 2);
      fill_random(gu.p, int64_t(n_rot) * r * 2 * ffn, 7, 3.0f);
      ms = time_ms([&](int i) { silu_mul(ScalarType::bf16, gu.get<char>() + size_t(i % n_rot) * r * 2 * ffn * 2, act.p, r, ffn, nullptr); }, 50);
      record("silu_mul_fused", "256x11008", 3.0 * r * ffn * 2 / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      ms = time_ms([&](int i) { silu_then_mul(ScalarType::bf16, gu.get<char>() + size_t(i % n_rot) * r * 2 * ffn * 2, act.p, r, ffn, nullptr); }, 50);
      record("silu_mul_unfused", "256x11008 (same bytes counted)", 3.0 * r * ffn * 2 / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
    }
    if (!prefill_only) {
      const int t = 256, nh = 32, nkv = 8, hd = 128, stride = (nh + 2 * nkv) * hd;
      Buf qkv(size_t(t) * stride * 2), kc(size_t(t) * nkv * hd * 2), vc(size_t(t) * nkv * hd * 2);
      fill_random(qkv.p, int64_t(t) * stride, 8);
      std::vector<int32_t> pos(t);
      std::vector<int64_t> slots(t);
      std::iota(pos.begin(), pos.end(), 100);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      const std::vector<float> inv = rope_inv_freq(500000.0f, hd);
      Buf dpos(t * 4), dslots(t * 8), dinv(inv.size() * 4);
      CUDA_CHECK(cudaMemcpy(dpos.p, pos.data(), t * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dslots.p, slots.data(), t * 8, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dinv.p, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));
      QkvArgs a;
      a.qkv = qkv.p;
      a.qkv_row_stride = stride;
      a.n_tokens = t;
      a.n_heads = nh;
      a.n_kv_heads = nkv;
      a.head_dim = hd;
      a.positions = dpos.get<int32_t>();
      a.inv_freq = dinv.get<float>();
      a.slot_mapping = dslots.get<int64_t>();
      a.k_cache = kc.p;
      a.v_cache = vc.p;
      const double bytes = double(t) * (stride + (nh + 2 * nkv) * hd) * 2;  // read qkv, write q, k, v
      double ms = time_ms([&](int) { rope_kv_write(a, nullptr); }, 50);
      record("rope_kv_write_fused", "256 tokens 32/8 heads", bytes / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      ms = time_ms([&](int) {
        rope_inplace(a, nullptr);
        kv_write(a, nullptr);
      }, 50);
      record("rope_kv_write_unfused", "256 tokens 32/8 heads", bytes / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
    }
    if (!prefill_only) {
      const int n = 256, vocab = 128256;
      Buf logits(size_t(n) * vocab * 4), temp(n * 4), topk(n * 4), topp(n * 4), seed(n * 8), key(n * 8), pos(n * 4),
          tok(n * 4);
      fill_random_f32_kernel<<<4096, 256>>>(logits.get<float>(), int64_t(n) * vocab, 9, 8.0f);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaMemset(seed.p, 0, n * 8));
      CUDA_CHECK(cudaMemset(key.p, 0, n * 8));
      CUDA_CHECK(cudaMemset(pos.p, 0, n * 4));
      SampleArgs a;
      a.logits = logits.get<float>();
      a.n_rows = n;
      a.vocab = vocab;
      a.temperature = temp.get<float>();
      a.top_k = topk.get<int32_t>();
      a.top_p = topp.get<float>();
      a.seed = seed.get<uint64_t>();
      a.seq_key = key.get<uint64_t>();
      a.position = pos.get<int32_t>();
      a.tokens = tok.get<int32_t>();
      const double bytes = double(n) * vocab * 4;
      for (int mode = 0; mode < 2; ++mode) {
        const std::vector<float> t(n, mode ? 0.8f : 0.0f), p(n, mode ? 0.9f : 1.0f);
        const std::vector<int32_t> k(n, mode ? 50 : 0);
        CUDA_CHECK(cudaMemcpy(temp.p, t.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(topp.p, p.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(topk.p, k.data(), n * 4, cudaMemcpyHostToDevice));
        const double ms = time_ms([&](int) { sample_tokens(a, nullptr); }, 20);
        record(mode ? "sample_topk50_topp0.9" : "sample_greedy", "256 rows x 128256", bytes / (ms * 1e-3) / 1e9,
               "GB/s", "d2d_copy", copy_gbs);
      }
    }

    }  // !decode_only

    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
      out.push_back({{"name", r.name}, {"value", r.value}, {"unit", r.unit}, {"peer_or_ceiling", r.ceiling_name},
                     {"ratio", r.ceiling > 0 ? r.value / r.ceiling : 0.0}, {"shape", r.shape}, {"device", prop.name},
                     {"date", date}, {"commit", commit}});
    std::ofstream(json_path) << out.dump(2) << "\n";
    std::printf("wrote %s (%zu figures)%s\n", json_path.c_str(), rows.size(), valid ? "" : "; VALIDATION FAILED");
    return valid ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_bench: %s\n", e.what());
    return 1;
  }
}
