// Issue 25's diagnosis: which ways of setting up NCCL communicators for 2 GPUs in ONE process
// finish on the GPU machine. Standalone (CUDA runtime + NCCL only); built by scripts/gpu-tp-check.sh
// with nvcc and run once per mode under `timeout`, so a mode that hangs costs only its timeout:
//   tp_init_repro MODE [n_ranks]
// MODE: threads      one std::thread per rank: cudaSetDevice(r), ncclCommInitRank (TpCudaBackend's
//                    pattern before the fix)
//       threads_cuda the same after CUDA work on each rank thread first (stream, malloc, mapped
//                    pinned memory, cudaDeviceSynchronize), as the backend's rank set-up does
//       threads_nb   one thread per rank, ncclCommInitRankConfig with blocking = 0, polled
//       group        one thread: ncclGroupStart, cudaSetDevice(r) + ncclCommInitRank per rank, ncclGroupEnd
//       initall      ncclCommInitAll
//       serial       one thread, ncclCommInitRank for rank 0 then rank 1 (expected to hang: rank 0
//                    waits for rank 1; a control that the timeout works)
// Then one bf16 all-reduce of 1 Mi elements per rank (rank r holds r+1; sum checked), destroy.
// Prints "MODE ok init_s=.. allreduce_ok=1" or an error; exit status 0 on success.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)
#define NK(x)                                                                                     \
  do {                                                                                            \
    ncclResult_t r_ = (x);                                                                        \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                              \
      std::fprintf(stderr, "%s:%d %s: %s (%s)\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_), \
                   ncclGetLastError(nullptr));                                                    \
      std::exit(3);                                                                               \
    }                                                                                             \
  } while (0)

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void log(const char* fmt, const char* mode, int r, double t0) {
  std::fprintf(stderr, "[%8.3f] %s rank %d: %s\n", now_s() - t0, mode, r, fmt);
}

static void busy_cuda_work(int r) {
  CK(cudaSetDevice(r));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* d;
  CK(cudaMalloc(&d, 64 << 20));
  CK(cudaMemsetAsync(d, 1, 64 << 20, s));
  void* h;
  CK(cudaHostAlloc(&h, 1 << 20, cudaHostAllocMapped));
  CK(cudaDeviceSynchronize());
}

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const std::string mode = argc > 1 ? argv[1] : "threads";
  const int n = argc > 2 ? std::atoi(argv[2]) : 2;
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  if (have < n) {
    std::printf("%s skipped: %d devices\n", mode.c_str(), have);
    return 0;
  }
  const double t0 = now_s();
  std::vector<ncclComm_t> comms(n, nullptr);
  ncclUniqueId id;
  NK(ncclGetUniqueId(&id));
  const char* m = mode.c_str();
  if (mode == "threads" || mode == "threads_cuda" || mode == "threads_nb") {
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        if (mode == "threads_cuda") busy_cuda_work(r);
        CK(cudaSetDevice(r));
        log("init start", m, r, t0);
        if (mode == "threads_nb") {
          ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
          c.blocking = 0;
          NK(ncclCommInitRankConfig(&comms[r], n, id, r, &c));
          ncclResult_t st = ncclInProgress;
          while (st == ncclInProgress) {
            NK(ncclCommGetAsyncError(comms[r], &st));
            if (now_s() - t0 > 50) {
              log("non-blocking init still in progress after 50 s: abort", m, r, t0);
              ncclCommAbort(comms[r]);
              std::exit(4);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          NK(st);
        } else {
          NK(ncclCommInitRank(&comms[r], n, id, r));
        }
        log("init done", m, r, t0);
      });
    for (auto& t : ts) t.join();
  } else if (mode == "group") {
    NK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      CK(cudaSetDevice(r));
      NK(ncclCommInitRank(&comms[r], n, id, r));
    }
    NK(ncclGroupEnd());
  } else if (mode == "initall") {
    std::vector<int> devs(n);
    for (int r = 0; r < n; ++r) devs[r] = r;
    NK(ncclCommInitAll(comms.data(), n, devs.data()));
  } else if (mode == "serial") {
    for (int r = 0; r < n; ++r) {
      CK(cudaSetDevice(r));
      log("init start (serial)", m, r, t0);
      NK(ncclCommInitRank(&comms[r], n, id, r));
    }
  } else {
    std::fprintf(stderr, "unknown mode %s\n", m);
    return 1;
  }
  const double init_s = now_s() - t0;
  // One all-reduce per rank on its own thread (non-blocking comms may return ncclInProgress).
  const size_t count = size_t(1) << 20;
  std::vector<__nv_bfloat16*> bufs(n);
  std::vector<cudaStream_t> ss(n);
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&ss[r], cudaStreamNonBlocking));
    CK(cudaMalloc(&bufs[r], count * 2));
    std::vector<__nv_bfloat16> h(count, __float2bfloat16(float(r + 1)));
    CK(cudaMemcpy(bufs[r], h.data(), count * 2, cudaMemcpyHostToDevice));
  }
  NK(ncclGroupStart());
  for (int r = 0; r < n; ++r) NK(ncclAllReduce(bufs[r], bufs[r], count, ncclBfloat16, ncclSum, comms[r], ss[r]));
  NK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) NK(ncclCommGetAsyncError(comms[r], &st));
  }
  for (int r = 0; r < n; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(ss[r]));
    std::vector<__nv_bfloat16> h(count);
    CK(cudaMemcpy(h.data(), bufs[r], count * 2, cudaMemcpyDeviceToHost));
    const float want = float(n * (n + 1) / 2);
    for (size_t i = 0; i < count; i += 4097) ok = ok && __bfloat162float(h[i]) == want;
  }
  for (int r = 0; r < n; ++r) ncclCommDestroy(comms[r]);
  std::printf("%s ok init_s=%.3f allreduce_ok=%d total_s=%.3f\n", m, init_s, int(ok), now_s() - t0);
  return ok ? 0 : 5;
}
