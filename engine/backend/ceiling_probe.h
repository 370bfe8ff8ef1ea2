#pragma once
// The cpu backend's ceilings, measured in a fraction of a second at the start of a run: a copy
// of buffers far larger than the caches (memory bandwidth) and a square fp32 GEMM through the
// same pooled OpenBLAS path the forward uses (compute peak). A run's roofline efficiency
// (loadgen/roofline_meter.h) prices its steps at these when no measured ceilings are given.
#include <string>

namespace servelab {

/// What a probe measured.
struct ProbedCeilings {
  double copy_bytes_s = 0.0;  ///< (read + written) bytes per second of the best copy
  double gemm_flops = 0.0;    ///< 2·n³ / seconds of the best n×n×n GEMM
  std::string detail;         ///< "copy 2x64 MiB, sgemm 768^3, 2 threads, best of 5"
};

/// Options of probe_cpu_ceilings; the defaults take about 0.3 s on 2 cores.
struct CeilingProbeOptions {
  int threads = 0;                  ///< 0 = all cores, as the cpu backend's `threads`
  int copy_mib = 64;                ///< each of the two buffers
  int gemm_n = 768;                 ///< the GEMM's M = N = K
  int repeats = 5;                  ///< the best of these is kept
  void validate() const;            ///< throws std::invalid_argument naming the field
};

/// Measures the cpu backend's copy bandwidth and GEMM peak on this machine. Throws
/// std::invalid_argument on bad options.
ProbedCeilings probe_cpu_ceilings(const CeilingProbeOptions& options = {});

}  // namespace servelab
