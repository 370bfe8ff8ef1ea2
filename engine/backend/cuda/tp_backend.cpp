#include "engine/backend/cuda/tp_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/backend/cuda/cuda_backend_impl.h"
#include "engine/backend/cuda/tp_comm.h"
#include "engine/backend/cuda/tp_plan.h"
#include "engine/backend/cuda/tp_rank_pool.h"
#include "engine/backend/cuda/tp_weights.h"
#include "engine/model/hf_config.h"
#include "kernels/custom_allreduce.h"

namespace servelab {

/// The one friend of CudaBackend (cuda_backend.h): reaches a rank's Impl.
struct TpAccess {
  using Impl = CudaBackend::Impl;
  static Impl& impl(const CudaBackend& b) { return *b.impl_; }
  static std::unique_ptr<CudaBackend> wrap(std::unique_ptr<Impl> impl) {
    return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
  }
};

struct TpCudaBackend::Impl {
  cuda::TpPlan plan;
  CudaBackendOptions options;
  std::vector<std::unique_ptr<cuda::TpRank>> tps;
  std::vector<std::unique_ptr<CudaBackend>> ranks;
  std::vector<uint32_t> late_masks;  // the step's late token masks, filled once for every rank
  std::unique_ptr<cuda::RankPool> pool;
  /// Our all-reduce's peer buffers on every rank (null with all_reduce: nccl or dtype f16): made
  /// once at start, so captured graphs keep valid addresses; shared by the ranks' TpRank::custom.
  std::unique_ptr<kernels::CustomAllReduce> custom;
  std::atomic<bool> failed{false};  // a rank failed in this step: the others stop waiting
  std::string broken;               // why the communicators were aborted (then every call throws)

  ~Impl() {
    if (!pool) return;
    if (custom && !broken.empty()) custom->abort();  // a kernel still waiting for a peer ends now
    try {
      pool->run([&](int r) {
        cudaSetDevice(r);
        if (r < int(ranks.size())) ranks[r].reset();
        if (r < int(tps.size()) && tps[r]) {
          cuda::tp_destroy_comm(*tps[r], !broken.empty());
          tps[r].reset();  // its gather buffer, freed with the rank's device current
        }
      });
    } catch (...) {
    }
  }

  TpAccess::Impl& rank(int r) const { return TpAccess::impl(*ranks[r]); }
  int n() const { return plan.n_ranks; }
  std::vector<int> devices() const {
    std::vector<int> d(n());
    for (int r = 0; r < n(); ++r) d[r] = r;
    return d;
  }

  void check_usable() const {
    if (!broken.empty())
      throw std::runtime_error("backend cuda (tensor_parallel " + std::to_string(n()) +
                               "): unusable after a failed step (" + broken + ")");
  }

  /// Waits for rank r's stream under the watchdog (cuda::tp_wait_stream): gives up (throws) when
  /// another rank failed or options.tp_timeout_s passes, so that no thread stays blocked on a
  /// collective whose peer never launched; run_collective then aborts the communicators.
  void wait(int r) { cuda::tp_wait_stream(*tps[r], rank(r).stream, "the step"); }

  /// The last resort of RankPool::run for collective work: well past every rank's own watchdog.
  double hard_deadline_s() const { return 3.0 * options.tp_timeout_s + 30.0; }

  /// Runs `task` on every rank; a failure aborts the communicators (a collective may be half
  /// done) and marks the backend unusable.
  void run_collective(const std::function<void(int)>& task) {
    check_usable();
    failed = false;
    try {
      pool->run(
          [&](int r) {
            try {
              CUDA_CHECK(cudaSetDevice(r));
              task(r);
            } catch (...) {
              failed = true;
              throw;
            }
          },
          hard_deadline_s());
    } catch (const std::exception& e) {
      broken = e.what();
      try {
        pool->run([&](int r) { cuda::tp_destroy_comm(*tps[r], /*abort=*/true); });
      } catch (...) {
      }
      throw;
    }
  }

  /// One step on every rank: planned once here, then packed, uploaded and run by each rank.
  /// `after(r)` runs on rank r's thread once its stream is done.
  void step(const Step& planned, const std::function<void(int)>& after) {
    check_usable();
    TpAccess::Impl& lead = rank(0);
    const cuda::BlockTableStep* tables = lead.plan_step(planned);  // host only; throws on bad input
    if (planned.n_rows() == 0) return;
    const bool with_tables = tables != nullptr;
    // Late token masks: filled once here, before the ranks start, and read by every rank (the
    // ranks' forwards do not overlap them under tensor parallelism). A filler that throws fails
    // the step before any rank runs.
    const uint32_t* masks = nullptr;
    try {
      masks = planned.in.has_late_masks() ? planned.host_masks(late_masks) : nullptr;
    } catch (...) {
      if (with_tables) lead.drop_block_table();
      throw;
    }
    try {
      run_collective([&](int r) {
        TpAccess::Impl& m = rank(r);
        m.filled_masks = masks;
        if (r > 0) {  // the plan, not rebuilt: copied from the lead (read-only there meanwhile)
          m.plan = lead.plan;
          m.n_samples = lead.n_samples;
          m.step_spans = lead.step_spans;  // a verification step's row spans (multi-row attention)
          m.step_groups = lead.step_groups;
          if (lead.step_spans) m.flat_spans = lead.flat_spans;
          if (with_tables) m.table_step = lead.table_step;
        }
        m.run_tables(with_tables ? &m.table_step : nullptr);
        after(r);
      });
    } catch (...) {
      if (with_tables) lead.drop_block_table();
      throw;
    }
  }
};

namespace {

using WeightsFn = std::function<cuda::DeviceWeights(const cuda::TpPlan&, int)>;

void check_devices(const CudaBackendOptions& o, int n_ranks) {
  o.validate();
  if (n_ranks > 1 && !cuda::tp_have_nccl())
    throw std::runtime_error("backend cuda: tensor_parallel " + std::to_string(n_ranks) +
                             " needs NCCL, and this servelab was built without it (nccl.h / libnccl were not found "
                             "at configure time, or -DSERVELAB_NCCL=OFF)");
  if (o.device != 0)
    throw std::invalid_argument("device must be 0 with tensor_parallel " + std::to_string(n_ranks) +
                                " (rank r runs on device r; got " + std::to_string(o.device) + ")");
  const int have = cuda_device_count();
  if (have < n_ranks)
    throw std::runtime_error("backend cuda: tensor_parallel " + std::to_string(n_ranks) + " needs " +
                             std::to_string(n_ranks) + " CUDA devices (ranks on devices 0.." +
                             std::to_string(n_ranks - 1) + "); this machine has " + std::to_string(have));
}

}  // namespace

bool tp_nccl_available() { return cuda::tp_have_nccl(); }

TpCudaBackend::TpCudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TpCudaBackend::~TpCudaBackend() = default;


std::unique_ptr<TpCudaBackend> TpCudaBackend::random(const ModelConfig& config, uint64_t seed, int n_ranks,
                                                     CudaBackendOptions options) {
  const WeightsFn weights = [seed, dt = options.dtype](const cuda::TpPlan& p, int r) {
    return cuda::shard_random(p, r, seed, dt);
  };
  return std::unique_ptr<TpCudaBackend>(new TpCudaBackend(build(config, n_ranks, options, &weights)));
}

std::unique_ptr<TpCudaBackend> TpCudaBackend::load(const std::string& dir, int n_ranks, CudaBackendOptions options) {
  const ModelConfig config = read_hf_config(dir + "/config.json");
  const WeightsFn weights = [dir, dt = options.dtype](const cuda::TpPlan& p, int r) {
    return cuda::shard_load(dir, p, r, dt);
  };
  return std::unique_ptr<TpCudaBackend>(new TpCudaBackend(build(config, n_ranks, options, &weights)));
}

std::unique_ptr<TpCudaBackend::Impl> TpCudaBackend::build(const ModelConfig& config, int n_ranks,
                                                          const CudaBackendOptions& o, const void* weights_fn) {
  const WeightsFn& weights = *static_cast<const WeightsFn*>(weights_fn);
  if (o.residual_scale)
    throw std::invalid_argument("model.residual_scale runs on one GPU so far (tensor_parallel " + std::to_string(n_ranks) +
                                " shards the scaled projections)");
  check_devices(o, n_ranks);
  auto impl = std::make_unique<TpCudaBackend::Impl>();
  impl->plan = cuda::TpPlan::make(config, n_ranks);
  impl->options = o;
  impl->tps.resize(n_ranks);
  impl->ranks.resize(n_ranks);
  impl->pool = std::make_unique<cuda::RankPool>(n_ranks, o.tp_spin_us);
  const cuda::TpPlan& plan = impl->plan;
  // Weights and buffers first (a rank that fails here leaves no peer waiting in NCCL init)...
  impl->pool->run([&](int r) {
    CUDA_CHECK(cudaSetDevice(r));
    auto m = std::make_unique<TpAccess::Impl>();
    m->options = o;
    m->options.device = r;
    m->w = weights(plan, r);
    m->local_heads = plan.heads;
    m->local_kv_heads = plan.kv_heads;
    m->local_ffn = plan.ffn;
    m->local_vocab = plan.vocab;
    auto tp = std::make_unique<cuda::TpRank>();
    tp->rank = r;
    tp->n_ranks = n_ranks;
    tp->vocab = config.vocab_size;
    tp->local_vocab = plan.vocab;
    tp->dtype = o.dtype;
    tp->timeout_s = o.tp_timeout_s;
    tp->peer_failed = &impl->failed;
    m->tp = tp.get();
    m->setup();
    impl->tps[r] = std::move(tp);
    impl->ranks[r] = TpAccess::wrap(std::move(m));
  });
  // ...then one communicator per rank: non-blocking set-up on every rank thread at once, each
  // polled under the watchdog (a rank that fails or never joins ends set-up everywhere with an error).
  const std::string id = cuda::tp_unique_id();
  impl->failed = false;
  try {
    impl->pool->run(
        [&](int r) {
          try {
            CUDA_CHECK(cudaSetDevice(r));
            cuda::tp_init_comm(*impl->tps[r], id);
          } catch (...) {
            impl->failed = true;
            throw;
          }
        },
        impl->hard_deadline_s());
  } catch (const std::exception& e) {
    impl->broken = e.what();  // ~Impl aborts the communicators that did come up
    throw;
  }
  // NCCL connects its peers lazily, at the first collective: one small all-reduce now, under the
  // watchdog, so that happens before our peer mappings exist (as bench/kernels/allreduce_bench.cu
  // orders it) and not inside the first step.
  impl->run_collective([&](int r) {
    cuda::DeviceBuffer warm(64, "the NCCL warm-up all-reduce");
    CUDA_CHECK(cudaMemsetAsync(warm.get(), 0, 64, impl->rank(r).stream));
    cuda::tp_all_reduce(*impl->tps[r], warm.get(), 32, impl->rank(r).stream);
    impl->wait(r);
  });
  // Our all-reduce's peer buffers and peer access, once, from this thread (it visits every device).
  if (n_ranks > 1 && o.tp_all_reduce != TpAllReduce::nccl && o.dtype == DType::bf16) {
    try {
      using kernels::CustomAllReduce;
      impl->custom =
          std::make_unique<CustomAllReduce>(impl->devices(), o.tp_all_reduce_max_bytes, CustomAllReduce::kDefaultBlocks,
                                            CustomAllReduce::kDefaultThreads, o.tp_lamport_max_bytes);
    } catch (const std::runtime_error& e) {  // e.g. GPUs without peer access: auto falls back to NCCL
      if (o.tp_all_reduce == TpAllReduce::custom)
        throw std::runtime_error(std::string("all_reduce: custom: ") + e.what());
      std::fprintf(stderr, "servelab: all_reduce auto: NCCL for every message (%s)\n", e.what());
    }
  }
  if (impl->custom) {
    // The kernel gives up on a peer within the watchdog's time, a little before the step's wait
    // does (which starts earlier): that wait then reports the kernel's own error, naming the rank
    // that never came. A wait that times out first aborts the kernel (tp_destroy_comm) instead.
    impl->custom->set_spin_timeout_ns(uint64_t(0.8 * o.tp_timeout_s * 1e9));
    for (auto& tp : impl->tps) {
      tp->custom = impl->custom.get();
      tp->custom_max_bytes = o.tp_all_reduce_max_bytes;
      tp->custom_only = o.tp_all_reduce == TpAllReduce::custom;
      tp->fuse_add_norm = o.tp_fuse_all_reduce_norm;
      tp->push_from_product = o.tp_push_from_product;
      tp->lamport_eager = o.tp_lamport_eager;
    }
  }
  return impl;
}

const ModelConfig& TpCudaBackend::config() const { return impl_->plan.model; }
KvCacheSpec TpCudaBackend::kv_cache_spec() const { return impl_->ranks.at(0)->kv_cache_spec(); }

int64_t TpCudaBackend::weight_bytes() const {
  int64_t most = 0;
  for (const auto& r : impl_->ranks) most = std::max(most, r->weight_bytes());
  return most;
}

void TpCudaBackend::init_kv(int64_t n_slots) {
  impl_->run_collective([&](int r) { impl_->ranks[r]->init_kv(n_slots); });
}

std::vector<int> TpCudaBackend::decode_row_buckets() const { return impl_->ranks.at(0)->decode_row_buckets(); }

void TpCudaBackend::reserve_steps(const StepLimits& limits) {
  impl_->run_collective([&](int r) { impl_->ranks[r]->reserve_steps(limits); });
}

StepOutput TpCudaBackend::execute(const Step& step) {
  if (step.want_logprobs) throw std::invalid_argument("TpCudaBackend: logprobs are not supported (caps().logprobs)");
  if (!step.in.draft_probs.empty())
    throw std::invalid_argument("TpCudaBackend: draft distributions (rejection sampling) are not supported (caps().draft_probs)");
  Impl& m = *impl_;
  StepOutput result;
  m.step(step, [&](int r) {
    TpAccess::Impl& x = m.rank(r);
    const int n = x.n_samples;
    if (r == 0 && n > 0)  // every rank sampled the same tokens from the same logits: rank 0's
      CUDA_CHECK(cudaMemcpyAsync(x.tokens_host.get(), x.tokens.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                 x.stream));
    m.wait(r);
    if (r == 0 && n > 0) result.tokens.assign(x.tokens_host.get<int32_t>(), x.tokens_host.get<int32_t>() + n);
  });
  return result;
}

std::vector<float> TpCudaBackend::logits(const Step& step) {
  Impl& m = *impl_;
  std::vector<float> out;
  m.step(step, [&](int r) {
    m.wait(r);
    if (r != 0) return;
    TpAccess::Impl& x = m.rank(0);
    const size_t vocab = config().vocab_size;
    const std::vector<int32_t>& rows = step.in.sample_rows;
    for (size_t draw = 0; draw < rows.size(); ++draw) {
      if (draw > 0 && rows[draw] == rows[draw - 1]) continue;  // n parallel samples share their row
      const size_t at = out.size();
      out.resize(at + vocab);
      CUDA_CHECK(cudaMemcpy(out.data() + at, x.logits.get<float>() + draw * vocab, vocab * sizeof(float),
                            cudaMemcpyDeviceToHost));
    }
  });
  return out;
}

BackendCaps TpCudaBackend::caps() const {
  BackendCaps c;
  c.tensor_parallel = impl_->n();
  c.device_memory = true;
  c.weight_dtypes = {DType::bf16, DType::f16};
  c.kv_dtypes = {DType::bf16, DType::f16};
  return c;
}

void TpCudaBackend::reserve_loras(int, int) {
  throw std::invalid_argument("LoRA adapters run on the cuda backend with tensor_parallel 1 only (got tensor_parallel " +
                              std::to_string(impl_->n()) + ")");
}

void TpCudaBackend::load_lora(int, std::shared_ptr<const LoraAdapter>) { reserve_loras(0, 0); }

std::string TpCudaBackend::device_description() const {
  return impl_->ranks.at(0)->device_description() + ", tensor_parallel " + std::to_string(impl_->n());
}

std::optional<int64_t> TpCudaBackend::kv_bytes_for_memory_share(double utilization, int max_tokens, int max_seqs) const {
  return kv_bytes_for_utilization(utilization, max_tokens, max_seqs);
}

std::vector<std::pair<int64_t, double>> TpCudaBackend::time_all_reduce(const std::vector<int64_t>& message_bytes) {
  std::vector<std::pair<int64_t, double>> out;
  for (const AllReduceTiming& t : all_reduce_timings(message_bytes)) out.emplace_back(t.bytes, t.seconds);
  return out;
}

void TpCudaBackend::copy_slots(std::span<const KvCopy> copies) {
  impl_->run_collective([&](int r) { impl_->ranks[r]->copy_slots(copies); });
}

std::unique_ptr<HostKvPool> TpCudaBackend::make_host_pool(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("TpCudaBackend::make_host_pool: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  const int64_t rank_slot = kv_bytes_per_slot();
  const size_t bytes = size_t(n_slots) * size_t(rank_slot) * size_t(impl_->n());
  void* host = nullptr;
  // Portable: every rank's device maps it (unified addressing: the same pointer on each).
  const cudaError_t e = cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("TpCudaBackend: cannot allocate " + std::to_string(bytes) +
                             " bytes of pinned host memory for the swap pool (" + cudaGetErrorString(e) +
                             "); lower engine.swap_space");
  }
  void* device = nullptr;
  if (cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess || device != host) {
    (void)cudaGetLastError();
    cudaFreeHost(host);
    throw std::runtime_error("TpCudaBackend: the swap pool's pinned memory is not mapped at the same address on the GPUs");
  }
  return std::make_unique<HostKvPool>(host, device, n_slots, rank_slot * impl_->n(), true,
                                      [](void* p) { cudaFreeHost(p); });
}

namespace {
/// Rank r's region of a TpCudaBackend pool as a pool of its own (not owning the memory).
HostKvPool rank_view(const HostKvPool& pool, int rank, int n_ranks) {
  const int64_t rank_slot = pool.bytes_per_slot() / n_ranks;
  const size_t offset = size_t(rank) * size_t(pool.n_slots()) * size_t(rank_slot);
  return HostKvPool(pool.data() + offset, static_cast<std::byte*>(pool.device_view()) + offset, pool.n_slots(), rank_slot,
                    pool.pinned(), nullptr);
}
}  // namespace

void TpCudaBackend::swap_out(std::span<const KvSwap> runs, HostKvPool& pool) {
  if (!pool.device_view() || pool.bytes_per_slot() != kv_bytes_per_slot() * impl_->n())
    throw std::invalid_argument("TpCudaBackend::swap_out: the host pool was not made by this backend");
  impl_->run_collective([&](int r) {
    HostKvPool view = rank_view(pool, r, impl_->n());
    impl_->ranks[r]->swap_out(runs, view);
  });
}

void TpCudaBackend::swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) {
  if (!pool.device_view() || pool.bytes_per_slot() != kv_bytes_per_slot() * impl_->n())
    throw std::invalid_argument("TpCudaBackend::swap_in: the host pool was not made by this backend");
  impl_->run_collective([&](int r) {
    const HostKvPool view = rank_view(pool, r, impl_->n());
    impl_->ranks[r]->swap_in(runs, view);
  });
}

int64_t TpCudaBackend::kv_bytes_for_utilization(double utilization, int max_tokens, int max_samples) const {
  std::vector<int64_t> budget(impl_->n());
  impl_->pool->run([&](int r) {  // cudaMemGetInfo reads the calling thread's device
    CUDA_CHECK(cudaSetDevice(r));
    budget[r] = impl_->ranks[r]->kv_bytes_for_utilization(utilization, max_tokens, max_samples);
  });
  return *std::min_element(budget.begin(), budget.end());
}

std::vector<AllReduceTiming> TpCudaBackend::all_reduce_timings(std::span<const int64_t> message_bytes, int repeats,
                                                               bool in_graph) {
  Impl& m = *impl_;
  repeats = std::max(1, repeats);
  int64_t largest = 16;
  for (int64_t b : message_bytes) largest = std::max(largest, b);
  std::vector<std::vector<double>> seconds(m.n(), std::vector<double>(message_bytes.size()));
  // The ranks' threads meet before each timed launch, so no rank's time includes waiting for a
  // peer whose host thread launched late (each rank times its own stream). Bounded: a rank that
  // does not come within 1 s is not waited for (the timing suffers, nothing hangs).
  std::atomic<int> arrived{0};
  auto align = [&, round = std::vector<int>(m.n(), 0)](int r) mutable {
    const int target = m.n() * ++round[r];
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (arrived.load() < target && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  };
  m.run_collective([&](int r) {
    cuda::DeviceBuffer buf(size_t(largest), "the all-reduce benchmark buffer");
    cudaStream_t s = m.rank(r).stream;
    CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, buf.bytes(), s));  // zeros: repeated sums stay finite
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    auto release = [&] {
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      exec = nullptr;
      graph = nullptr;
    };
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    try {
      for (size_t i = 0; i < message_bytes.size(); ++i) {
        // Whole 16-byte groups (every size a step sends is one), so ours can take it.
        const int64_t n = std::max<int64_t>(8, message_bytes[i] / 16 * 8);
        for (int w = 0; w < 3; ++w) cuda::tp_all_reduce(*m.tps[r], buf.get(), n, s);
        m.wait(r);
        auto timed = [&](const auto& enqueue) {
          align(r);
          CUDA_CHECK(cudaEventRecord(start, s));
          enqueue();
          CUDA_CHECK(cudaEventRecord(stop, s));
          m.wait(r);
          float ms = 0.0f;
          CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          return ms * 1e-3 / repeats;
        };
        if (!in_graph) {
          seconds[r][i] = timed([&] {
            for (int k = 0; k < repeats; ++k) cuda::tp_all_reduce(*m.tps[r], buf.get(), n, s);
          });
          continue;
        }
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < repeats; ++k) cuda::tp_all_reduce(*m.tps[r], buf.get(), n, s);
        CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_CHECK(cudaGraphLaunch(exec, s));  // untimed
        m.wait(r);
        std::vector<double> t;
        for (int k = 0; k < 5; ++k) t.push_back(timed([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }));
        std::sort(t.begin(), t.end());
        seconds[r][i] = t[2];
        release();
      }
    } catch (...) {
      cudaStreamEndCapture(s, &graph);  // a capture left open would poison the stream
      (void)cudaGetLastError();
      release();
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      throw;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  });
  std::vector<AllReduceTiming> out;
  const double factor = 2.0 * (m.n() - 1) / m.n();
  for (size_t i = 0; i < message_bytes.size(); ++i) {
    AllReduceTiming t;
    t.bytes = message_bytes[i];
    for (int r = 0; r < m.n(); ++r) t.seconds = std::max(t.seconds, seconds[r][i]);
    t.bus_gb_s = t.seconds > 0 ? double(t.bytes) / t.seconds * factor / 1e9 : 0.0;
    out.push_back(t);
  }
  return out;
}

std::string TpCudaBackend::all_reduce_path() const {
  const CudaBackendOptions& o = impl_->options;
  if (!impl_->custom) return "NCCL";
  if (o.tp_all_reduce == TpAllReduce::custom) return "ours (peer memory) for every message";
  return "ours (peer memory) up to " + std::to_string(o.tp_all_reduce_max_bytes) + " bytes, NCCL above" +
         (o.tp_fuse_all_reduce_norm ? ", fused with the residual add and norm" : "") +
         (o.tp_fuse_all_reduce_norm && o.tp_push_from_product ? ", pushed from the products" : "");
}

std::string TpCudaBackend::describe() const {
  const std::string ar = "all-reduce " + all_reduce_path();
  return "NCCL " + cuda::tp_nccl_version() + ", " + std::to_string(impl_->n()) + " ranks on devices 0.." +
         std::to_string(impl_->n() - 1) + " (" + cuda_device_description(0) + "), " + ar;
}

}  // namespace servelab
