#include "engine/backend/ceiling_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/cpu_gemm.h"
#include "engine/backend/thread_pool.h"
#include "engine/require.h"

namespace servelab {

void CeilingProbeOptions::validate() const {
  require(threads >= 0, "ceiling probe threads", ">= 0", threads);
  require(copy_mib >= 1 && copy_mib <= 4096, "ceiling probe copy_mib", "in [1, 4096]", copy_mib);
  require(gemm_n >= 16 && gemm_n <= 8192, "ceiling probe gemm_n", "in [16, 8192]", gemm_n);
  require(repeats >= 1, "ceiling probe repeats", ">= 1", repeats);
}

ProbedCeilings probe_cpu_ceilings(const CeilingProbeOptions& o) {
  o.validate();
  configure_openblas();
  const int n_threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  ThreadPool pool(n_threads);
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };

  // Copy: each thread copies its slice, as the forward streams weights from every core.
  const size_t bytes = size_t(o.copy_mib) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // written once: every page is mapped before timing
  const int64_t n_chunks = int64_t(n_threads) * 4;
  const size_t chunk = (bytes + size_t(n_chunks) - 1) / size_t(n_chunks);
  double best_copy_s = 1e30;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = clock::now();
    pool.parallel_for(n_chunks, 1, [&](int, int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const size_t off = size_t(c) * chunk;
        if (off < bytes) std::memcpy(dst.data() + off, src.data() + off, std::min(chunk, bytes - off));
      }
    });
    best_copy_s = std::min(best_copy_s, seconds_since(t0));
  }

  // GEMM: the forward's own path (pooled single-threaded OpenBLAS items).
  const int n = o.gemm_n;
  std::vector<float> a(size_t(n) * n, 0.5f), w(size_t(n) * n, 0.25f), out(size_t(n) * n, 0.0f);
  parallel_gemm_nt(pool, a.data(), n, n, w.data(), n, out.data(), false);  // warm-up: packing buffers, page faults
  double best_gemm_s = 1e30;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = clock::now();
    parallel_gemm_nt(pool, a.data(), n, n, w.data(), n, out.data(), false);
    best_gemm_s = std::min(best_gemm_s, seconds_since(t0));
  }

  ProbedCeilings c;
  c.copy_bytes_s = 2.0 * static_cast<double>(bytes) / std::max(best_copy_s, 1e-9);
  c.gemm_flops = 2.0 * double(n) * double(n) * double(n) / std::max(best_gemm_s, 1e-9);
  c.detail = "probe: copy 2x" + std::to_string(o.copy_mib) + " MiB, sgemm " + std::to_string(n) + "^3, " +
             std::to_string(n_threads) + " threads, best of " + std::to_string(o.repeats);
  return c;
}

}  // namespace servelab
