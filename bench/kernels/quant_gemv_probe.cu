// quant_gemv_probe: one quantized decode product, launched eagerly a few times, for Nsight Compute
// (scripts/gpu-quant-ncu.sh profiles one launch: ncu --launch-skip 2 --launch-count 1):
//   quant_gemv_probe fp8|int4 N K M KERNEL [LAUNCHES]   (KERNEL: auto, warp, mma, stream, steps: quant_gemv.h)
// Random codes, scales and zeros (never zeros), the split-K workspace the cuda backend gives,
// weight copies rotated so no launch reads them from L2; prints the median eager time.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "kernels/quant_gemv.h"

using namespace servelab::kernels;
using namespace servelab::kernels::bench;

int main(int argc, char** argv) {
  if (argc < 6 || (std::strcmp(argv[1], "fp8") && std::strcmp(argv[1], "int4"))) {
    std::fprintf(stderr, "usage: quant_gemv_probe fp8|int4 N K M KERNEL [LAUNCHES]\n");
    return 2;
  }
  try {
    const bool int4 = !std::strcmp(argv[1], "int4");
    const int n = std::atoi(argv[2]), k = std::atoi(argv[3]), m = std::atoi(argv[4]);
    const QuantGemvKernel kernel = parse_quant_gemv_kernel(argv[5]);
    const int launches = argc > 6 ? std::atoi(argv[6]) : 5, group = 128, n_rot = 4;
    const size_t w_bytes = int4 ? size_t(n) * k / 2 : size_t(n) * k;
    Buf w(w_bytes * n_rot), x(size_t(m) * k * 2), y(size_t(m) * n * 4);
    Buf scales(int4 ? size_t(k / group) * n * 4 : size_t(n) * 4), zeros(int4 ? size_t(k / group) * n * 4 : 16);
    fill_random(w.p, int64_t(w.bytes / 2), 43);  // random bf16 bits: random codes
    fill_random(x.p, int64_t(m) * k, 42);
    fill_random_f32_kernel<<<1024, 256>>>(scales.get<float>(), int64_t(scales.bytes / 4), 46, 0.01f);
    fill_random_f32_kernel<<<1024, 256>>>(zeros.get<float>(), int64_t(zeros.bytes / 4), 47, 8.0f);
    CUDA_CHECK_LAUNCH();
    const int64_t ws_floats = quant_gemv_workspace_floats(n, k);
    const int ws_counters = quant_gemv_workspace_counters(n);
    Buf partials(size_t(ws_floats) * 4), counters(size_t(ws_counters) * 4);
    CUDA_CHECK(cudaMemset(counters.p, 0, counters.bytes));
    QuantGemvArgs a;
    a.kind = int4 ? QuantWeightKind::int4 : QuantWeightKind::fp8_e4m3;
    a.x = x.p, a.x_stride = k, a.scales = scales.get<float>(), a.zeros = int4 ? zeros.get<float>() : nullptr;
    a.n_scales = int4 ? (k / group) * n : n, a.group_size = group, a.y = y.p, a.m = m, a.n = n, a.k = k;
    a.partials = partials.get<float>(), a.partial_capacity = ws_floats;
    a.counters = counters.get<int32_t>(), a.counter_capacity = ws_counters;
    a.kernel = kernel;
    a.w = w.get<uint8_t>();
    validate(a);
    const double ms = time_ms([&](int i) {
      QuantGemvArgs b = a;
      b.w = w.get<uint8_t>() + size_t(i % n_rot) * w_bytes;
      quant_gemv(b, nullptr);
    }, launches, 2);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double bytes = double(w_bytes) + double(scales.bytes) + (int4 ? double(zeros.bytes) : 0) + 2.0 * m * k + 4.0 * m * n;
    std::printf("%s %dx%d M%d %s (%s): %.2f us eager median, %.0f GB/s\n", argv[1], n, k, m, to_string(kernel),
                to_string(quant_gemv_kernel_for(a)), ms * 1e3, bytes / (ms * 1e-3) / 1e9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_gemv_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
