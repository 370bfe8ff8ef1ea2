#pragma once
// sm_90's bulk copies (cp.async.bulk, global -> shared, one lane issues a contiguous run of bytes)
// counted by a shared-memory mbarrier's transaction bytes: the ring of the FP8 KV decode kernel
// (attention_decode_fp8_async.cu).
// A ring stage: bar_init once (one arrival), then per fill bar_expect(bytes) from the issuing lane
// and the copies; readers bar_wait on the fill's parity (fill i of a stage: parity i & 1).
// Below sm_90 these compile to nothing (bulk_g2s traps): launchers check the device first.
#include <cstdint>

namespace servelab::kernels::bulk {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SERVELAB_BULK_COPY 1
#else
#define SERVELAB_BULK_COPY 0
#endif

/// Copies bytes (a multiple of 16; src and dst 16-byte aligned) from global src to shared dst,
/// completing bytes of transactions on the mbarrier at shared address bar.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if SERVELAB_BULK_COPY
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  __trap();
#endif
}
/// One arrival a phase (the issuing lane's bar_expect).
__device__ __forceinline__ void bar_init(uint32_t bar) {
#if SERVELAB_BULK_COPY
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
#endif
}
/// After the initializing lane's bar_inits, before any copy counts on them.
__device__ __forceinline__ void bar_init_fence() {
#if SERVELAB_BULK_COPY
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/// The issuing lane's arrival, expecting tx bytes of copies in this phase.
__device__ __forceinline__ void bar_expect(uint32_t bar, uint32_t tx) {
#if SERVELAB_BULK_COPY
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(tx) : "memory");
#endif
}
/// Waits until the phase of the given parity has completed (its copies have landed).
__device__ __forceinline__ void bar_wait(uint32_t bar, int parity) {
#if SERVELAB_BULK_COPY
  asm volatile(
      "{\n.reg .pred P1;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

}  // namespace servelab::kernels::bulk
