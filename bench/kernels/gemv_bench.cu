// kernel_bench's skinny-GEMM part: the gemv kernel (kernels/gemv.cu) validated against gemm_ref,
// and llama2-7b's decode weight products timed through Gemm with gemv, with cuBLASLt alone and
// with the mix (gemv where its plan needs no K split), in one run.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "kernels/gemm.h"
#include "kernels/int4_pack.h"
#include "kernels/int4_quant.h"
#include "kernels/quant_gemv.h"
#include "kernels/ref/ops_ref.h"

namespace servelab::kernels::bench {

/// The skinny GEMM (Gemm::run at M <= 8) against gemm_ref on a small awkward shape (K splits and
/// a partial K step on any GPU).
bool validate_gemv() {
  const int m = 8, n = 100, k = 4104;
  Buf x(size_t(m) * k * 2), w(size_t(n) * k * 2), y(size_t(m) * n * 4);
  fill_random(x.p, int64_t(m) * k, 21);
  fill_random(w.p, int64_t(n) * k, 22);
  CUDA_CHECK(cudaMemset(y.p, 0xFF, y.bytes));
  Gemm gemm(false);
  gemm.run(ScalarType::bf16, x.p, w.p, y.p, m, n, k, true, nullptr);
  std::vector<float> got(size_t(m) * n), ref(got.size());
  CUDA_CHECK(cudaMemcpy(got.data(), y.p, y.bytes, cudaMemcpyDeviceToHost));
  const std::vector<float> xf = to_float_bf16(x, size_t(m) * k), wf = to_float_bf16(w, size_t(n) * k);
  gemm_ref(xf.data(), wf.data(), m, n, k, ref.data());
  const double e = rel_err(got, ref);
  std::printf("  validate gemv M8 N100 K4104 (%d splits): rel err %.2e\n", gemm.gemv_plan(n, k).splits, e);
  return e < 1e-3;
}

/// llama2-7b's decode products (y = x · wᵀ, bf16) at M = 1 and 8 through Gemm, once with the
/// skinny kernel and once cuBLASLt alone, in CUDA graphs; weights rotated over copies that
/// outgrow L2 four times. GB/s counts w + x + y once. Also the weight stream of a whole decode
/// step at M = 1 (32 layers of the four products + the LM head) from the same timings.
void bench_gemv(int64_t l2, double copy_gbs) {
  struct Shape {
    const char* name;
    int n, k, per_step;  // per_step: times the product runs in a decode step
  };
  const Shape shapes[] = {{"qkv", 12288, 4096, 32}, {"o", 4096, 4096, 32}, {"gate_up", 22016, 4096, 32},
                          {"down", 4096, 11008, 32}, {"lm_head", 32000, 4096, 1}};
  Gemm gemm(false);
  gemm.set_gemv_waves(0);    // the cuda backend's settings (cuda_backend_impl.h): no K split for these
  gemm.set_gemv_variant(3);  // shapes, rolling pipeline + L2::256B hint (the "mix" then equals gemv)
  for (int m : {1, 8}) {
    double step_ms[3] = {0, 0, 0}, step_bytes = 0;
    for (const Shape& sh : shapes) {
      const int64_t w_elems = int64_t(sh.n) * sh.k;
      const int n_rot = int(std::min<int64_t>(8, 4 * l2 / (w_elems * 2) + 1));
      Buf w(size_t(w_elems) * 2 * n_rot), x(size_t(m) * sh.k * 2), y(size_t(m) * sh.n * 4);
      fill_random(w.p, w_elems * n_rot, 31);
      fill_random(x.p, int64_t(m) * sh.k, 32);
      const bool fp32_out = !std::strcmp(sh.name, "lm_head");  // logits are float
      const double bytes = 2.0 * (double(w_elems) + double(m) * sh.k) + (fp32_out ? 4.0 : 2.0) * m * sh.n;
      const std::string shape = std::string(sh.name) + " " + std::to_string(sh.n) + "x" + std::to_string(sh.k) +
                                " M" + std::to_string(m);
      double gbs[3] = {0, 0, 0};
      for (int use : {0, 1, 2}) {  // cuBLASLt alone, the skinny kernel alone, the backend's mix
        gemm.set_use_gemv(use >= 1);
        gemm.set_gemv_split_k(use == 1);
        const double ms = time_graph_ms([&](int i, cudaStream_t st) {
          gemm.run(ScalarType::bf16, x.p, w.get<char>() + size_t(i % n_rot) * w_elems * 2, y.p, m, sh.n, sh.k,
                   fp32_out, st);
        }, 20, 15);
        gbs[use] = bytes / (ms * 1e-3) / 1e9;
        step_ms[use] += ms * sh.per_step;
      }
      step_bytes += bytes * sh.per_step;
      const gemv::Plan plan = gemm.gemv_plan(sh.n, sh.k);
      record("cublaslt_skinny_bf16", shape, gbs[0], "GB/s", "d2d_copy", copy_gbs);
      record("gemv_bf16", shape + " (" + std::to_string(plan.splits) + " splits)", gbs[1], "GB/s", "d2d_copy", copy_gbs);
      record("gemv_bf16_vs_cublaslt", shape, gbs[1], "GB/s", "cublaslt_skinny_bf16", gbs[0]);
    }
    const std::string shape = "llama2-7b decode step M" + std::to_string(m) + " (32 layers + lm_head)";
    record("decode_products_cublaslt", shape, step_bytes / (step_ms[0] * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
    record("decode_products_gemv", shape, step_bytes / (step_ms[1] * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
    record("decode_products_mixed", shape + ", gemv where unsplit", step_bytes / (step_ms[2] * 1e-3) / 1e9, "GB/s",
           "decode_products_cublaslt", step_bytes / (step_ms[0] * 1e-3) / 1e9);
    std::printf("  decode-step products at M%d: %.3f ms cuBLASLt, %.3f ms gemv (%.2fx), %.3f ms mixed (%.2fx)\n", m,
                step_ms[0], step_ms[1], step_ms[0] / step_ms[1], step_ms[2], step_ms[0] / step_ms[2]);
  }
}

/// llama2-7b's decode products (issue 26's decode target) at M = 1, 2, 4, 8 and 16: bf16 through
/// Gemm as the cuda backend runs them (gemv up to 8 rows, cuBLASLt above), FP8 E4M3 (per-channel
/// scales) and INT4 (group 128, scales and zeros) through quant_gemv, each in CUDA graphs over
/// weight copies that outgrow L2; quant_gemv once per kernel (warp, mma, stream, steps, and for
/// INT4 packed over the same codes repacked: side by side; steps also with its other in-flight
/// count and INT4's one-vector steps, packed also through its ring of 2 and 3 stages) and once as auto
/// dispatches it. The figure is each run's GB/s over the bytes it reads (codes, scales, zeros, x, y) as a fraction of the copy, and auto's time against bf16's on the same
/// shape (the speedup; Marlin's near-ideal for INT4 is 3.87x). Per format and M the kernel with
/// the least decode-step time is printed (what quant_gemv_auto_kernel should say). Codes, scales
/// and zeros are random bits (never time zeros), and quant_gemv gets its split-K workspace as the
/// cuda backend gives it.
void bench_quant_gemv(int64_t l2, double copy_gbs) {
  struct Shape {
    const char* name;
    int n, k, per_step;
  };
  const Shape shapes[] = {{"qkv", 12288, 4096, 32}, {"o", 4096, 4096, 32}, {"gate_up", 22016, 4096, 32},
                          {"down", 4096, 11008, 32}, {"lm_head", 32000, 4096, 1}};
  // The steps kernel with two vectors a lane a step: its format's default in-flight count
  // (quant_gemv_steps_in_flight: FP8 two steps in flight a warp, INT4 one) and the other count; at
  // M 9-16 it runs two column tiles. INT4 also with one vector a lane a step (steps_v1: 1 in
  // flight, three blocks an SM at M <= 8; steps_v1f2: 2 in flight). The packed kernel (INT4 only,
  // over int4_pack.h's layout, M <= 8) at its default (loads into registers a step ahead) and
  // through its cp.async ring of 2 and 3 stages. auto_gather (INT4): act-order GPTQ's product, x's
  // columns gathered into the codes' order (kernels::gather_columns, a random permutation) by one
  // launch before auto's; auto_gather_o: that gather on o_proj only, as the cuda backend runs act
  // order since the norms and gate|up's rows took the other three (docs/quantization.md). auto last.
  struct Variant {
    const char* name;
    QuantGemvKernel kernel;
    int in_flight;  // steps: 0 the format's default, -1 the other count; packed: its stages (0: default)
  };
  const Variant variants[] = {{"warp", QuantGemvKernel::warp, 0},      {"mma", QuantGemvKernel::mma, 0},
                              {"stream", QuantGemvKernel::stream, 0},  {"steps", QuantGemvKernel::steps, 0},
                              {"steps_other", QuantGemvKernel::steps, -1}, {"packed", QuantGemvKernel::packed, 0},
                              {"packed_s2", QuantGemvKernel::packed, 2}, {"packed_s3", QuantGemvKernel::packed, 3},
                              {"steps_v1", QuantGemvKernel::steps, 1}, {"steps_v1f2", QuantGemvKernel::steps, 2},
                              {"auto_gather", QuantGemvKernel::auto_select, 0},
                              {"auto_gather_o", QuantGemvKernel::auto_select, 0}, {"auto", QuantGemvKernel::auto_select, 0}};
  constexpr int kKernels = 13;
  Gemm gemm(false);
  gemm.set_gemv_waves(0);
  gemm.set_gemv_variant(3);
  const int group = 128;
  for (int m : {1, 2, 4, 8, 16}) {
    double step_bf16 = 0, step_ms[2][kKernels] = {};
    for (const Shape& sh : shapes) {
      const int64_t w_elems = int64_t(sh.n) * sh.k;
      const int n_rot = int(std::min<int64_t>(8, 4 * l2 / w_elems + 1));
      Buf wb(size_t(w_elems) * 2 * n_rot), w8(size_t(w_elems) * n_rot), w4(size_t(w_elems / 2) * n_rot);
      Buf x(size_t(m) * sh.k * 2), y(size_t(m) * sh.n * 4), xg(size_t(m) * sh.k * 2), perm(size_t(sh.k) * 4);
      {
        std::vector<int32_t> p(size_t(sh.k));
        for (int i = 0; i < sh.k; ++i) p[size_t(i)] = i;
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (int i = sh.k - 1; i > 0; --i) {  // Fisher-Yates, splitmix-style steps
          r = r * 6364136223846793005ull + 1442695040888963407ull;
          std::swap(p[size_t(i)], p[size_t((r >> 33) % uint64_t(i + 1))]);
        }
        CUDA_CHECK(cudaMemcpy(perm.p, p.data(), perm.bytes, cudaMemcpyHostToDevice));
      }
      const int n_groups = sh.k / group;
      Buf s8(size_t(sh.n) * 4), s4(size_t(n_groups) * sh.n * 4), z4(size_t(n_groups) * sh.n * 4);
      const int4_pack::Layout lay{sh.n, sh.k, group};
      Buf w4p(size_t(lay.code_bytes()) * n_rot), g4p(size_t(lay.group_bytes()));
      fill_random(wb.p, w_elems * n_rot, 41);
      fill_random(x.p, int64_t(m) * sh.k, 42);
      fill_random(w8.p, int64_t(w8.bytes / 2), 43);  // random bf16 bits: random codes
      fill_random(w4.p, int64_t(w4.bytes / 2), 44);
      fill_random_f32_kernel<<<4096, 256>>>(s8.get<float>(), int64_t(s8.bytes / 4), 45, 0.01f);
      fill_random_f32_kernel<<<4096, 256>>>(s4.get<float>(), int64_t(s4.bytes / 4), 46, 0.01f);
      fill_random_f32_kernel<<<4096, 256>>>(z4.get<float>(), int64_t(z4.bytes / 4), 47, 8.0f);
      CUDA_CHECK_LAUNCH();
      for (int i = 0; i < n_rot; ++i)  // the same codes in the packed kernel's layout (what the cuda backend loads)
        pack_int4_fragments(w4.get<uint8_t>() + size_t(i) * (w_elems / 2), s4.get<float>(), z4.get<float>(), sh.n, sh.k,
                            group, w4p.get<uint8_t>() + size_t(i) * lay.code_bytes(), g4p.p, nullptr);
      const int64_t ws_floats = quant_gemv_workspace_floats(sh.n, sh.k);
      const int ws_counters = quant_gemv_workspace_counters(sh.n);
      Buf partials(size_t(ws_floats) * 4), counters(size_t(ws_counters) * 4);
      CUDA_CHECK(cudaMemset(counters.p, 0, counters.bytes));
      gemm.set_use_gemv(true);
      gemm.set_gemv_split_k(false);
      const double ms_bf16 = time_graph_ms([&](int i, cudaStream_t st) {
        gemm.run(ScalarType::bf16, x.p, wb.get<char>() + size_t(i % n_rot) * w_elems * 2, y.p, m, sh.n, sh.k, true, st);
      }, 20, 15);
      step_bf16 += ms_bf16 * sh.per_step;
      const std::string shape = std::string(sh.name) + " " + std::to_string(sh.n) + "x" + std::to_string(sh.k) +
                                " M" + std::to_string(m);
      for (int q : {0, 1}) {
        QuantGemvArgs a;
        a.kind = q == 0 ? QuantWeightKind::fp8_e4m3 : QuantWeightKind::int4;
        a.x = x.p;
        a.x_stride = sh.k;
        a.scales = q == 0 ? s8.get<float>() : s4.get<float>();
        a.zeros = q == 0 ? nullptr : z4.get<float>();
        a.n_scales = q == 0 ? sh.n : n_groups * sh.n;
        a.group_size = group;
        a.y = y.get<float>();
        a.m = m, a.n = sh.n, a.k = sh.k;
        a.partials = partials.get<float>();
        a.partial_capacity = ws_floats;
        a.counters = counters.get<int32_t>();
        a.counter_capacity = ws_counters;
        const size_t w_bytes = q == 0 ? size_t(w_elems) : size_t(w_elems / 2);
        const uint8_t* base = q == 0 ? w8.get<uint8_t>() : w4.get<uint8_t>();
        a.w = base;
        if (q == 1) {
          a.w_packed = w4p.get<uint8_t>();
          a.w_packed_groups = g4p.p;
        }
        validate(a);
        const double bytes = double(w_bytes) + 4.0 * (q == 0 ? sh.n : 2.0 * n_groups * sh.n) + 2.0 * m * sh.k + 4.0 * m * sh.n;
        const std::string fmt = q == 0 ? "fp8" : "int4";
        for (int v = 0; v < kKernels; ++v) {
          const bool packed = variants[v].kernel == QuantGemvKernel::packed;
          const bool v1 = std::string(variants[v].name).rfind("steps_v1", 0) == 0;  // INT4, one vector a step
          if (packed && (q == 0 || m > 8)) continue;  // INT4 at M <= 8 only (else it falls back to steps)
          if (v1 && q == 0) continue;
          const std::string vname = variants[v].name;
          const bool gather = vname == "auto_gather" || (vname == "auto_gather_o" && std::string(sh.name) == "o");
          if ((vname == "auto_gather" || vname == "auto_gather_o") && q == 0) continue;
          a.kernel = variants[v].kernel;
          a.steps_vectors = v1 ? 1 : variants[v].kernel == QuantGemvKernel::steps ? 2 : 0;
          a.steps_in_flight = packed || v1 ? (v1 ? variants[v].in_flight : 0)
                              : variants[v].in_flight >= 0 ? variants[v].in_flight
                                                           : 3 - quant_gemv_steps_in_flight(a.kind, m);
          a.packed_stages = packed ? variants[v].in_flight : 0;
          const double ms = time_graph_ms([&](int i, cudaStream_t st) {
            QuantGemvArgs b = a;
            if (gather) {
              gather_columns(x.p, perm.get<int32_t>(), xg.p, m, sh.k, st);
              b.x = xg.p;
            }
            b.w = base + size_t(i % n_rot) * w_bytes;
            if (b.w_packed) b.w_packed = w4p.get<uint8_t>() + size_t(i % n_rot) * lay.code_bytes();
            quant_gemv(b, st);
          }, 20, 15);
          step_ms[q][v] += ms * sh.per_step;
          const bool is_auto = vname == "auto";
          const std::string name = "quant_gemv_" + fmt + (is_auto ? "" : std::string("_") + variants[v].name);
          record(name, shape + (is_auto ? std::string(" (") + to_string(quant_gemv_kernel_for(a)) + ")" : ""),
                 bytes / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
          if (is_auto) record("quant_gemv_" + fmt + "_vs_bf16", shape, ms_bf16 / ms, "x", "-", 0);
        }
      }
    }
    const std::string shape = "llama2-7b decode step M" + std::to_string(m) + " (32 layers + lm_head)";
    for (int q : {0, 1}) {
      const char* fmt = q == 0 ? "fp8" : "int4";
      record(std::string("decode_products_") + fmt + "_vs_bf16", shape, step_bf16 / step_ms[q][kKernels - 1], "x", "-", 0);
      int best = 0;
      std::string line;
      for (int v = 0; v < kKernels - 1; ++v) {
        if (step_ms[q][v] <= 0) continue;  // not timed (packed: INT4 at M <= 8)
        if (step_ms[q][v] < step_ms[q][best]) best = v;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s %.3f, ", variants[v].name, step_ms[q][v]);
        line += buf;
      }
      std::printf("  quantized decode-step products at M%d, %s: %.3f ms bf16; %sauto %.3f ms (%.2fx bf16); fastest %s\n", m,
                  fmt, step_bf16, line.c_str(), step_ms[q][kKernels - 1], step_bf16 / step_ms[q][kKernels - 1],
                  variants[best].name);
      if (q == 1) {  // act order: what the gather launches add to the step's products
        const double gathered = step_ms[q][kKernels - 3], folded = step_ms[q][kKernels - 2];
        std::printf("  act-order INT4 at M%d: a gather before each product %.3f ms (%.2fx auto's, %.2fx bf16); "
                    "o_proj's only (the folds) %.3f ms (%.2fx auto's, %.2fx bf16)\n", m, gathered,
                    gathered / step_ms[q][kKernels - 1], step_bf16 / gathered, folded, folded / step_ms[q][kKernels - 1],
                    step_bf16 / folded);
        record("decode_products_int4_act_order_vs_int4", shape, gathered / step_ms[q][kKernels - 1], "x", "-", 0);
        record("decode_products_int4_act_order_folded_vs_int4", shape, folded / step_ms[q][kKernels - 1], "x", "-", 0);
      }
    }
  }
}

}  // namespace servelab::kernels::bench
