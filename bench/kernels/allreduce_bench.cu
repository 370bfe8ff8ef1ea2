// All-reduce benchmark (issue 25, item 3): NCCL's in-place-free bf16 sum all-reduce against our
// one-shot peer-memory kernels (kernels/custom_allreduce.h, push and pull variants) on the GPUs of
// one process, 4 KiB .. 64 MiB. Every implementation is first bit-checked against the plain C++
// reference (kernels/ref/allreduce_ref.h) on fresh random inputs (outputs poisoned first), then
// timed as CUDA graphs of `ops` back-to-back calls per rank (the engine replays its decode steps
// from graphs), replayed `reps` times after warm-up, the median of 5 such measurements, slowest
// rank; NCCL also eagerly (one thread launching every rank in a group, as nccl-tests does).
// Standalone (CUDA runtime + NCCL), built by scripts/gpu-tp-check.sh with nvcc:
//   allreduce_bench [--ranks N] [--init initall|group|threads_nb] [--json PATH] [--max-mib M]
// Bus bandwidth is NCCL's convention: bytes / time × 2(N-1)/N.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/custom_allreduce.h"
#include "kernels/ref/allreduce_ref.h"

using servelab::kernels::CustomAllReduce;
namespace ref = servelab::kernels::ref;

#define CK(x)                                                                                         \
  do {                                                                                                \
    cudaError_t e_ = (x);                                                                             \
    if (e_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)
#define NK(x)                                                                                         \
  do {                                                                                                \
    ncclResult_t r_ = (x);                                                                            \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_));         \
      std::exit(3);                                                                                   \
    }                                                                                                 \
  } while (0)

namespace {

int n_ranks = 2;
std::vector<ncclComm_t> comms;
std::vector<cudaStream_t> streams;
std::vector<uint16_t*> ins, outs;
CustomAllReduce* g_car = nullptr;  // created after NCCL's first all-reduce (see main)

void wait_comms() {
  for (ncclComm_t c : comms) {
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) NK(ncclCommGetAsyncError(c, &st));
    NK(st);
  }
}

void init_nccl(const std::string& mode) {
  comms.assign(n_ranks, nullptr);
  if (mode == "initall") {
    std::vector<int> devs(n_ranks);
    for (int r = 0; r < n_ranks; ++r) devs[r] = r;
    NK(ncclCommInitAll(comms.data(), n_ranks, devs.data()));
    return;
  }
  ncclUniqueId id;
  NK(ncclGetUniqueId(&id));
  if (mode == "group") {
    NK(ncclGroupStart());
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      NK(ncclCommInitRank(&comms[r], n_ranks, id, r));
    }
    NK(ncclGroupEnd());
    return;
  }
  std::vector<std::thread> ts;  // threads_nb: TpCudaBackend's way after the fix
  for (int r = 0; r < n_ranks; ++r)
    ts.emplace_back([&, r] {
      CK(cudaSetDevice(r));
      ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
      c.blocking = 0;
      NK(ncclCommInitRankConfig(&comms[r], n_ranks, id, r, &c));
      ncclResult_t st = ncclInProgress;
      while (st == ncclInProgress) {
        NK(ncclCommGetAsyncError(comms[r], &st));
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      NK(st);
    });
  for (auto& t : ts) t.join();
}

enum class Impl { nccl, push, pull, lamport };

void enqueue(Impl impl, int64_t n, int r) {
  if (impl == Impl::nccl)
    NK(ncclAllReduce(ins[r], outs[r], size_t(n), ncclBfloat16, ncclSum, comms[r], streams[r]));
  else
    g_car->run(r, ins[r], outs[r], n, streams[r],
               impl == Impl::push      ? CustomAllReduce::Variant::push
               : impl == Impl::lamport ? CustomAllReduce::Variant::lamport
                                       : CustomAllReduce::Variant::pull);
}

/// One call on every rank (NCCL in a group: one thread drives every device).
void once(Impl impl, int64_t n) {
  if (impl == Impl::nccl) NK(ncclGroupStart());
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    enqueue(impl, n, r);
  }
  if (impl == Impl::nccl) {
    NK(ncclGroupEnd());
    wait_comms();
  }
}

void sync_all() {
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(streams[r]));
  }
}

/// Fresh random inputs (no zeros), poisoned outputs, one call, every rank's output against the
/// reference: returns the number of mismatching elements over all ranks (0 = bit-exact).
int64_t check(Impl impl, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<std::vector<uint16_t>> h(n_ranks, std::vector<uint16_t>(n));
  for (auto& v : h)
    for (auto& x : v) {
      float f = d(rng);
      if (f == 0.0f) f = 1.0f;
      x = ref::float_to_bf16(f);
    }
  const std::vector<uint16_t> want = ref::all_reduce_sum_bf16(h);
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(ins[r], h[r].data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(outs[r], 0xff, n * 2));  // NaN poison
  }
  once(impl, n);
  sync_all();
  int64_t bad = 0;
  std::vector<uint16_t> got(n);
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(got.data(), outs[r], n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; ++i) bad += got[i] != want[i];
  }
  return bad;
}

/// Median over 5 measurements of the per-call time (slowest rank), calls as graphs of `ops`.
double time_graph(Impl impl, int64_t n, int ops, int reps) {
  std::vector<cudaGraphExec_t> execs(n_ranks);
  // Capture every rank's stream at once (NCCL needs its group's streams captured together).
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
  }
  for (int k = 0; k < ops; ++k) {
    if (impl == Impl::nccl) NK(ncclGroupStart());
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      enqueue(impl, n, r);
    }
    if (impl == Impl::nccl) {
      NK(ncclGroupEnd());
      wait_comms();  // a non-blocking communicator takes no new call while one is in progress
    }
  }
  std::vector<cudaGraph_t> graphs(n_ranks);
  for (int r = 0; r < n_ranks; ++r) {  // end every capture before instantiating (not allowed mid-capture)
    CK(cudaSetDevice(r));
    CK(cudaStreamEndCapture(streams[r], &graphs[r]));
  }
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
    CK(cudaGraphDestroy(graphs[r]));
  }
  std::vector<cudaEvent_t> a(n_ranks), b(n_ranks);
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaEventCreate(&a[r]));
    CK(cudaEventCreate(&b[r]));
  }
  auto launch_all = [&] {
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaGraphLaunch(execs[r], streams[r]));
    }
  };
  for (int w = 0; w < 3; ++w) launch_all();
  sync_all();
  std::vector<double> samples;
  for (int m = 0; m < 5; ++m) {
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaEventRecord(a[r], streams[r]));
    }
    for (int i = 0; i < reps; ++i) launch_all();
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaEventRecord(b[r], streams[r]));
    }
    sync_all();
    double worst = 0;
    for (int r = 0; r < n_ranks; ++r) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a[r], b[r]));
      worst = std::max(worst, double(ms) * 1e3 / (double(ops) * reps));
    }
    samples.push_back(worst);
  }
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaGraphExecDestroy(execs[r]));
    CK(cudaEventDestroy(a[r]));
    CK(cudaEventDestroy(b[r]));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

/// NCCL eagerly: `ops` grouped calls back to back, events around them; median of 5.
double time_eager_nccl(int64_t n, int ops) {
  std::vector<cudaEvent_t> a(n_ranks), b(n_ranks);
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaEventCreate(&a[r]));
    CK(cudaEventCreate(&b[r]));
  }
  for (int w = 0; w < 5; ++w) once(Impl::nccl, n);
  sync_all();
  std::vector<double> samples;
  for (int m = 0; m < 5; ++m) {
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaEventRecord(a[r], streams[r]));
    }
    for (int k = 0; k < ops; ++k) once(Impl::nccl, n);
    for (int r = 0; r < n_ranks; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaEventRecord(b[r], streams[r]));
    }
    sync_all();
    double worst = 0;
    for (int r = 0; r < n_ranks; ++r) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a[r], b[r]));
      worst = std::max(worst, double(ms) * 1e3 / ops);
    }
    samples.push_back(worst);
  }
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaEventDestroy(a[r]));
    CK(cudaEventDestroy(b[r]));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::string init = "threads_nb", json;
  int64_t max_mib = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--ranks") n_ranks = std::atoi(next().c_str());
    else if (a == "--init") init = next();
    else if (a == "--json") json = next();
    else if (a == "--max-mib") max_mib = std::atoll(next().c_str());
    else {
      std::fprintf(stderr, "usage: allreduce_bench [--ranks N] [--init initall|group|threads_nb] [--json PATH] [--max-mib M]\n");
      return 1;
    }
  }
  int have = 0;
  CK(cudaGetDeviceCount(&have));
  if (have < n_ranks) {
    std::printf("allreduce_bench: %d devices, %d ranks asked: skipped\n", have, n_ranks);
    return 0;
  }
  const int64_t max_bytes = max_mib << 20;
  init_nccl(init);
  int ver = 0;
  ncclGetVersion(&ver);
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  streams.resize(n_ranks);
  ins.resize(n_ranks);
  outs.resize(n_ranks);
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CK(cudaMalloc(&ins[r], max_bytes));
    CK(cudaMalloc(&outs[r], max_bytes));
  }
  std::vector<int> devs(n_ranks);
  for (int r = 0; r < n_ranks; ++r) devs[r] = r;
  // NCCL connects lazily at its first collective: let it do so before our peer mappings exist.
  check(Impl::nccl, 4096, 7);
  CustomAllReduce car(devs, max_bytes);
  g_car = &car;
  std::printf("allreduce_bench: %d x %s, NCCL %d, init %s\n", n_ranks, prop.name, ver, init.c_str());
  std::printf("%10s %12s %12s %12s %12s %12s %10s %8s %s\n", "bytes", "nccl_eager", "nccl_graph", "push_graph", "pull_graph",
              "lamport_graph", "busbw_nccl", "speedup", "mismatches(nccl,push,pull,lamport)");
  std::string rows;
  const double factor = 2.0 * (n_ranks - 1) / n_ranks;
  for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 2) {
    const int64_t n = bytes / 2;
    const int ops = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 4;
    const int reps = bytes <= (1 << 20) ? 20 : 5;
    const int64_t bad_nccl = check(Impl::nccl, n, uint32_t(bytes) * 3 + 1);
    const int64_t bad_push = check(Impl::push, n, uint32_t(bytes) * 3 + 2);
    const int64_t bad_pull = check(Impl::pull, n, uint32_t(bytes) * 3 + 3);
    const double eager = time_eager_nccl(n, ops);
    const double g_nccl = time_graph(Impl::nccl, n, ops, reps);
    const double g_push = time_graph(Impl::push, n, ops, reps);
    const double g_pull = time_graph(Impl::pull, n, ops, reps);
    const bool has_lamport = bytes <= car.lamport_max_bytes();  // inputs have no zeros: the plain reference holds
    const int64_t bad_lamport = has_lamport ? check(Impl::lamport, n, uint32_t(bytes) * 3 + 4) : -1;
    const double g_lamport = has_lamport ? time_graph(Impl::lamport, n, ops, reps) : 0.0;
    const double best_custom = has_lamport ? std::min({g_push, g_pull, g_lamport}) : std::min(g_push, g_pull);
    const double busbw = double(bytes) / (g_nccl * 1e-6) * factor / 1e9;
    std::printf("%10lld %10.2fus %10.2fus %10.2fus %10.2fus %10.2fus %8.1fGB/s %7.2fx %lld,%lld,%lld,%lld\n",
                (long long)bytes, eager, g_nccl, g_push, g_pull, g_lamport, busbw, g_nccl / best_custom,
                (long long)bad_nccl, (long long)bad_push, (long long)bad_pull, (long long)bad_lamport);
    std::fflush(stdout);
    char buf[768];
    std::snprintf(buf, sizeof buf,
                  "%s    {\"bytes\": %lld, \"nccl_eager_us\": %.3f, \"nccl_graph_us\": %.3f, \"push_graph_us\": %.3f, "
                  "\"pull_graph_us\": %.3f, \"lamport_graph_us\": %.3f, \"nccl_busbw_gb_s\": %.2f, "
                  "\"nccl_eager_busbw_gb_s\": %.2f, \"push_busbw_gb_s\": %.2f, \"speedup_best_custom_vs_nccl_graph\": %.3f, "
                  "\"mismatches\": {\"nccl\": %lld, \"push\": %lld, \"pull\": %lld, \"lamport\": %lld}}",
                  rows.empty() ? "" : ",\n", (long long)bytes, eager, g_nccl, g_push, g_pull, g_lamport, busbw,
                  double(bytes) / (eager * 1e-6) * factor / 1e9, double(bytes) / (g_push * 1e-6) * factor / 1e9,
                  g_nccl / best_custom, (long long)bad_nccl, (long long)bad_push, (long long)bad_pull,
                  (long long)bad_lamport);
    rows += buf;
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f) {
      std::fprintf(f,
                   "{\n  \"device\": \"%s\", \"ranks\": %d, \"nccl_version\": %d, \"init\": \"%s\", \"dtype\": \"bf16\",\n"
                   "  \"timing\": \"median of 5; each: CUDA graph of N back-to-back calls per rank replayed R times, "
                   "slowest rank, per call; nccl_eager: grouped calls from one thread\",\n  \"sizes\": [\n%s\n  ]\n}\n",
                   prop.name, n_ranks, ver, init.c_str(), rows.c_str());
      std::fclose(f);
    }
  }
  for (int r = 0; r < n_ranks; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(streams[r]));
    ncclCommDestroy(comms[r]);
  }
  return 0;
}
