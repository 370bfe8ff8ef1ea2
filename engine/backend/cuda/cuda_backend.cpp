#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend_impl.h"
#include "kernels/gemm_rows.h"
#include "engine/model/quant_checkpoint.h"
#include "engine/model/weights.h"

namespace servelab {

void CudaBackendOptions::validate() const {
  if (device < 0) throw std::invalid_argument("device must be >= 0 (got " + std::to_string(device) + ")");
  if (!(tp_timeout_s > 0.0))
    throw std::invalid_argument("tp_timeout_s must be > 0 seconds (got " + std::to_string(tp_timeout_s) + ")");
  if (tp_spin_us < 0) throw std::invalid_argument("tp_spin_us must be >= 0 (got " + std::to_string(tp_spin_us) + ")");
  if (tp_all_reduce_max_bytes < 16 || tp_all_reduce_max_bytes > (int64_t(1) << 30) || tp_all_reduce_max_bytes % 16)
    throw std::invalid_argument("all_reduce_max_bytes must be a multiple of 16 in [16, 1 GiB] (got " +
                                std::to_string(tp_all_reduce_max_bytes) + ")");
  if (tp_all_reduce == TpAllReduce::custom && dtype != DType::bf16)
    throw std::invalid_argument(std::string("all_reduce: custom sums bf16 only (dtype is ") + to_string(dtype) +
                                "); use all_reduce: auto or nccl");
  if (decode.gemv_waves < 0)
    throw std::invalid_argument("decode.gemv_waves must be >= 0 (got " + std::to_string(decode.gemv_waves) + ")");
  if (decode.gemv_loop < 0 || decode.gemv_loop > 3)
    throw std::invalid_argument("decode.gemv_loop must be 0..3 (got " + std::to_string(decode.gemv_loop) + ")");
  if (dtype != DType::bf16 && dtype != DType::f16)
    throw std::invalid_argument(std::string("dtype must be bf16 or f16 on the cuda backend (got ") + to_string(dtype) + ")");
  if (quantization != Quantization::none && dtype != DType::bf16)
    throw std::invalid_argument(std::string("quantization ") + to_string(quantization) +
                                " runs with dtype bf16 on the cuda backend (got " + to_string(dtype) + ")");
  if (quantization != Quantization::none && batch_invariant)
    throw std::invalid_argument(std::string("quantization ") + to_string(quantization) +
                                " with batch_invariant: decode rows take quant_gemv and prefill rows the FP8 or bf16 "
                                "GEMM, so a row's result depends on its batch; turn one of them off");
  if (residual_scale) residual_scale->validate("residual_scale");
  if (kv_cache_dtype == KvCacheDType::fp8 && verify_rows_kernel)
    throw std::invalid_argument("kv_cache_dtype fp8 with verify_rows_kernel: the multi-row verification kernel reads "
                                "bf16/f16 K/V only; turn verify_rows_kernel off (verification steps then take the "
                                "one-row decode form)");
  if (verify_rows_queries != 0 && verify_rows_queries != 4 && verify_rows_queries != 8)
    throw std::invalid_argument("verify_rows_queries must be 0, 4 or 8 (got " + std::to_string(verify_rows_queries) + ")");
  if (verify_graph_max_rows < 0)
    throw std::invalid_argument("verify_graph_max_rows must be >= 0 (got " + std::to_string(verify_graph_max_rows) + ")");
  if (dtype == DType::f16 && !kernels::fp16_kernels_built())
    throw std::invalid_argument("dtype f16: this servelab was built without the fp16 kernels "
                                "(-DSERVELAB_KERNELS_FP16=OFF); rebuild with it ON or use dtype bf16");
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_device_description(int device) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.200s, %.1f GiB, sm_%d%d, %d SMs", p.name, double(p.totalGlobalMem) / (1ull << 30),
                p.major, p.minor, p.multiProcessorCount);
  return buf;
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

namespace {
void select_device(const CudaBackendOptions& o) {
  o.validate();
  const int n = cuda_device_count();
  if (n == 0)
    throw std::runtime_error("backend cuda: no CUDA device is visible (cudaGetDeviceCount found none); "
                             "use backend: cpu or sim on this machine");
  if (o.device >= n)
    throw std::invalid_argument("device " + std::to_string(o.device) + " does not exist: this machine has " +
                                std::to_string(n) + " CUDA device(s), 0.." + std::to_string(n - 1));
  CUDA_CHECK(cudaSetDevice(o.device));
}
}  // namespace

std::unique_ptr<CudaBackend> CudaBackend::random(const ModelConfig& config, uint64_t seed, CudaBackendOptions options) {
  select_device(options);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->w = cuda::DeviceWeights::random(config, seed, options.dtype);
  if (options.residual_scale) cuda::scale_residual_branches(impl->w, *options.residual_scale);
  impl->setup();
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

std::unique_ptr<CudaBackend> CudaBackend::load(const std::string& dir, CudaBackendOptions options) {
  select_device(options);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (const std::optional<QuantScheme> scheme = read_quant_scheme((std::filesystem::path(dir) / "config.json").string())) {
    // A quantized checkpoint runs in its own format: its Linears as stored, the rest in bf16.
    if (options.quantization != Quantization::none && options.quantization != scheme->method)
      throw std::invalid_argument(std::string("quantization ") + to_string(options.quantization) + ": " + dir +
                                  " is a " + scheme->describe() + " checkpoint");
    if (options.residual_scale)
      throw std::invalid_argument(dir + ": residual_scale synthesizes weights; a quantized checkpoint's are as stored");
    // The Linears as stored only, a layer at a time, each packed as it is read (the host holds one
    // layer's codes unpacked at a time): no fp32 copy of them in host memory, no bf16 one on the device.
    std::vector<cuda::PackedQuantLayer>& packed = impl->checkpoint_linears;
    const ModelWeights host = ModelWeights::load_streamed(dir, [&](int layer, std::vector<QuantLinear>&& linears) {
      if (size_t(layer) != packed.size()) throw std::logic_error("CudaBackend::load: a layer's Linears out of order");
      packed.push_back(cuda::pack_quant_layer(std::span<const QuantLinear, 7>(linears.data(), 7)));
    });
    if (packed.size() != size_t(host.config.n_layers))
      throw std::logic_error("CudaBackend::load: " + std::to_string(packed.size()) + " layers of quantized Linears for " +
                             std::to_string(host.config.n_layers));
    impl->checkpoint_scheme = host.quant;
    impl->options.quantization = host.quant.method;  // what the backend reports and runs
    impl->options.fp8_per_channel = host.quant.fp8_scales == Fp8WeightScales::per_channel;
    bool reordered = false;
    for (const cuda::PackedQuantLayer& layer : impl->checkpoint_linears) reordered = reordered || !layer[2].row_order.empty();
    if (reordered)
      for (const cuda::PackedQuantLayer& layer : impl->checkpoint_linears) impl->ffn_orders.push_back(layer[2].row_order);
    impl->w = cuda::DeviceWeights::from_host(host, options.dtype);
  } else {
    impl->w = cuda::DeviceWeights::load(dir, options.dtype);
  }
  if (options.residual_scale) cuda::scale_residual_branches(impl->w, *options.residual_scale);
  impl->setup();
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

const ModelConfig& CudaBackend::config() const { return impl_->c(); }
const CudaBackendOptions& CudaBackend::options() const { return impl_->options; }
int64_t CudaBackend::weight_bytes() const { return impl_->w.bytes + (impl_->qw ? impl_->qw->bytes : 0); }
int64_t CudaBackend::last_step_input_bytes() const { return int64_t(impl_->last_upload_bytes); }
int64_t CudaBackend::graph_captures() const { return impl_->graph_captures; }
int64_t CudaBackend::verification_steps_graphed() const { return impl_->verification_steps_graphed; }
void CudaBackend::reserve_steps(const StepLimits& limits) { impl_->reserve(limits); }
std::vector<int> CudaBackend::decode_row_buckets() const {
  if (!impl_->options.cuda_graphs || impl_->options.batch_invariant) return {};
  return {std::begin(cuda_impl::kGraphBuckets), std::end(cuda_impl::kGraphBuckets)};
}

WarmShapes CudaBackend::warm_shapes(const StepLimits& limits) const {
  WarmShapes w;
  if (limits.max_rows >= 2) w.step_rows = kernels::gemm_rows_buckets(2, limits.max_rows);
  if (decode_row_buckets().empty() || limits.max_seqs < 1) return w;
  for (int b : cuda_impl::kGraphBuckets) {
    w.decode_batches.push_back(std::min(b, limits.max_seqs));
    if (b >= limits.max_seqs) break;
  }
  const int top = std::min(std::max(limits.max_context, 1), cuda_impl::kGraphMaxContext);
  for (int c = cuda_impl::context_bucket(1); ; c *= 2) {
    w.decode_contexts.push_back(std::min(c, top));
    if (c >= top) break;
  }
  return w;
}

KvCacheSpec CudaBackend::kv_cache_spec() const {
  KvCacheSpec s = cuda_kv_cache_spec(config(), impl_->options.dtype, impl_->options.kv_cache_dtype);
  s.n_kv_heads = impl_->local_kv_heads;  // this rank's (all of them on one GPU)
  return s;
}

void CudaBackend::init_kv(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("CudaBackend::init_kv: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  if (n_slots > (int64_t(1) << 31) - 1)
    throw std::invalid_argument("CudaBackend::init_kv: n_slots (" + std::to_string(n_slots) + ") must be < 2^31");
  Impl& m = *impl_;
  m.drop_graphs();  // they baked in the old arena's addresses
  ++m.epoch;
  m.arena.reset();
  // FP8 arenas are whole pages of 16 slots (kernels/kv_fp8.h): up to 15 slots of padding each.
  const int64_t arena_slots = m.kv_fp8 ? k::fp8_kv_arena_slots(n_slots) : n_slots;
  m.arena.grow(size_t(arena_slots) * size_t(kv_bytes_per_slot()), "the KV cache (lower kv_cache_bytes or gpu_memory_utilization)");
  CUDA_CHECK(cudaMemset(m.arena.get(), 0, m.arena.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  m.n_slots = n_slots;
  m.arena_slots = arena_slots;
  m.kv8_scratch_cap = n_slots;
  const int n_arenas = 2 * config().n_layers;
  std::vector<void*> ptrs(n_arenas);
  for (int l = 0; l < config().n_layers; ++l) {
    ptrs[2 * l] = m.k_arena(l);
    ptrs[2 * l + 1] = m.v_arena(l);
  }
  m.arena_ptrs.grow(ptrs.size() * sizeof(void*), "arena pointers");
  CUDA_CHECK(cudaMemcpy(m.arena_ptrs.get(), ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
}

StepOutput CudaBackend::execute(const Step& step) {
  if (step.want_logprobs) throw std::invalid_argument("CudaBackend: logprobs are not supported (caps().logprobs)");
  const size_t vocab = size_t(config().vocab_size);
  const kernels::StepInput& in = step.in;
  in.validate();  // the draws' arrays are of one length before they are read below
  if (in.draft_probs.size() % vocab != 0)
    throw std::invalid_argument("CudaBackend: step.in.draft_probs holds " + std::to_string(in.draft_probs.size()) +
                                " floats, not whole rows of the vocabulary (" + std::to_string(vocab) + ")");
  for (size_t i = 0; i < in.draft_dist.size(); ++i) {
    const int d = in.draft_dist[i];
    if (d < 0) continue;
    if ((size_t(d) + 1) * vocab > in.draft_probs.size())
      throw std::invalid_argument("CudaBackend: step.in.draft_dist[" + std::to_string(i) + "] = " + std::to_string(d) +
                                  " is past draft_probs' " + std::to_string(in.draft_probs.size() / vocab) + " rows");
    if (in.draft_token[i] < 0 || size_t(in.draft_token[i]) >= vocab)
      throw std::invalid_argument("CudaBackend: step.in.draft_token[" + std::to_string(i) + "] is outside the vocabulary");
  }
  Impl& m = *impl_;
  m.step_timed = false;
  m.run_step(step);
  StepOutput result;
  const int n = step.n_rows() > 0 ? m.n_samples : 0;
  if (n > 0)
    CUDA_CHECK(cudaMemcpyAsync(m.tokens_host.get(), m.tokens.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               m.stream));
  if (n > 0 && step.want_draw_probs) {
    result.draw_probs.resize(size_t(n) * vocab);
    CUDA_CHECK(cudaMemcpyAsync(result.draw_probs.data(), m.draw_probs_dev.get(), result.draw_probs.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, m.stream));
  }
  if (m.step_timed) CUDA_CHECK(cudaEventRecord(m.step_end, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (n > 0) result.tokens.assign(m.tokens_host.get<int32_t>(), m.tokens_host.get<int32_t>() + n);
  if (m.step_timed) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, m.step_begin, m.step_end));
    result.device_s = double(ms) * 1e-3;
  }
  return result;
}

std::vector<float> CudaBackend::logits(const Step& step) {
  Impl& m = *impl_;
  m.run_step(step);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const size_t vocab = config().vocab_size;
  const std::vector<int32_t>& rows = step.in.sample_rows;
  std::vector<float> out;
  for (size_t draw = 0; draw < rows.size(); ++draw) {
    if (draw > 0 && rows[draw] == rows[draw - 1]) continue;  // n parallel samples share their row
    const size_t at = out.size();
    out.resize(at + vocab);
    CUDA_CHECK(cudaMemcpy(out.data() + at, m.logits.get<float>() + draw * vocab, vocab * sizeof(float),
                          cudaMemcpyDeviceToHost));
  }
  return out;
}

BackendCaps CudaBackend::caps() const {
  BackendCaps c;
  c.device_memory = true;
  c.weight_dtypes = {DType::bf16, DType::f16};
  c.kv_dtypes = {DType::bf16, DType::f16};
  c.kv_cache_dtypes = {KvCacheDType::auto_dtype, KvCacheDType::fp8};  // fp8: kernels/kv_fp8.h
  c.lora = true;  // after reserve_loras (the engine calls it when lora.enabled)
  c.draft_probs = true;  // rejection sampling against the drafts' q in the sampler (kernels/sampling.h)
  c.draw_probs = true;   // a draft model's q (Step::want_draw_probs)
  return c;
}

void CudaBackend::reserve_loras(int max_loras, int max_lora_rank) {
  Impl& m = *impl_;
  m.lora.reserve(config(), max_loras, max_lora_rank, m.dt, m.ffn_orders);
  m.ensure_lora_scratch();
}

void CudaBackend::load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) {
  impl_->lora.load(slot, adapter, impl_->stream);  // copied: the slot keeps no reference
}

void CudaBackend::stage_lora(std::shared_ptr<const LoraAdapter> adapter, double) { impl_->lora.stage(std::move(adapter)); }
bool CudaBackend::lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double) {
  return impl_->lora.ready(adapter);
}

int64_t CudaBackend::lora_pool_bytes() const { return impl_->lora.reserved() ? impl_->lora.bytes() : 0; }
int64_t CudaBackend::lora_slot_bytes() const { return impl_->lora.slot_bytes(); }
cuda::LoraImageCache::Stats CudaBackend::lora_image_stats() const { return impl_->lora.image_stats(); }

CudaBackend::CublasLtQueries CudaBackend::cublaslt_queries() const {
  const Impl& m = *impl_;
  return {m.gemm ? m.gemm->heuristic_queries() : 0, m.lora_gemm ? m.lora_gemm->heuristic_queries() : 0};
}

void CudaBackend::set_lora_kernels(const kernels::LoraSgmvConfig& config) {
  if (config.shrink_target_blocks < 1)
    throw std::invalid_argument("CudaBackend::set_lora_kernels: shrink_target_blocks " +
                                std::to_string(config.shrink_target_blocks) + " must be >= 1");
  if (config.in_product_shrink_blocks < 1 || config.in_product_chunks < 1)
    throw std::invalid_argument("CudaBackend::set_lora_kernels: in_product_shrink_blocks " +
                                std::to_string(config.in_product_shrink_blocks) + " and in_product_chunks " +
                                std::to_string(config.in_product_chunks) + " must be >= 1");
  if (config.grid_blocks_per_sm < 0)
    throw std::invalid_argument("CudaBackend::set_lora_kernels: grid_blocks_per_sm " +
                                std::to_string(config.grid_blocks_per_sm) + " must be >= 0");
  if (config.gemm_min_rows < 0 || config.gemm_max_runs < 0)
    throw std::invalid_argument("CudaBackend::set_lora_kernels: gemm_min_rows " + std::to_string(config.gemm_min_rows) +
                                " and gemm_max_runs " + std::to_string(config.gemm_max_runs) + " must be >= 0");
  if (config.product_sm_reserve < 0 || config.run_shrink_sms < 0 || config.sm_reserve_max_run_rows < 0)
    throw std::invalid_argument("CudaBackend::set_lora_kernels: product_sm_reserve " +
                                std::to_string(config.product_sm_reserve) + ", run_shrink_sms " +
                                std::to_string(config.run_shrink_sms) + " and sm_reserve_max_run_rows " +
                                std::to_string(config.sm_reserve_max_run_rows) + " must be >= 0");
  impl_->lora_kernels = config;
  impl_->drop_graphs();  // the graphs baked in the old launches
}

std::string CudaBackend::device_description() const { return cuda_device_description(impl_->options.device); }

std::optional<int64_t> CudaBackend::kv_bytes_for_memory_share(double utilization, int max_tokens, int max_seqs) const {
  return kv_bytes_for_utilization(utilization, max_tokens, max_seqs);
}

int64_t CudaBackend::kv_bytes_for_utilization(double utilization, int max_tokens, int max_samples) const {
  if (!(utilization > 0.0 && utilization <= 1.0))
    throw std::invalid_argument("gpu_memory_utilization must be in (0, 1] (got " + std::to_string(utilization) + ")");
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const Impl& m = *impl_;
  const int64_t scratch_now = int64_t(m.kv8_k_scratch.bytes() + m.kv8_v_scratch.bytes());
  const int64_t in_use = int64_t(total_b - free_b) - int64_t(m.arena.bytes()) - scratch_now;
  const int64_t act = m.activation_bytes(max_tokens, max_samples);
  int64_t budget = int64_t(utilization * double(total_b)) - in_use - act;
  if (m.kv_fp8)  // the prefill dequantization scratch comes out of the same budget (kv_fp8_scratch.h)
    budget = cuda::split_kv8_budget(budget, kv_bytes_per_slot(), cuda::kv8_scratch_bytes_per_position(m.local_kv_dim(), 2),
                                    int64_t(std::max(max_samples, 1)) * config().max_position)
                 .kv_bytes;
  if (budget < kv_bytes_per_slot())
    throw std::invalid_argument("gpu_memory_utilization " + std::to_string(utilization) + " leaves no room for the KV cache: " +
                                std::to_string(utilization * double(total_b) / 1e9) + " GB allowed, " +
                                std::to_string(in_use / 1e9) + " GB in use (weights " + std::to_string(weight_bytes() / 1e9) +
                                " GB), " + std::to_string(act / 1e9) + " GB for activations");
  return budget;
}

void CudaBackend::Impl::ensure_lora_scratch() {
  if (!lora.reserved() || rows_capacity == 0) return;
  if (!lora_gemm) lora_gemm = std::make_unique<k::LoraGemm>();
  prepare_lora_gemm(rows_capacity);
  if (!lora_fused) lora_fused = std::make_unique<k::LoraFusedGemm>();
  // Used by eager steps only (never baked into a graph): growing them needs no new epoch.
  const size_t xa = size_t(rows_capacity) * k::kLoraMaxSegments * size_t(lora.pool(0, cuda::LoraGroup::qkv).max_rank) * 2;
  if (xa > lora_xa.bytes()) lora_xa.grow(xa, "the LoRA scratch");
  if (size_t(rows_capacity) * 4 > lora_left_dev.bytes()) lora_left_dev.grow(size_t(rows_capacity) * 4, "the LoRA scratch");
  if (!lora_side) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&lora_side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&lora_fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&lora_join, cudaEventDisableTiming));
  }
  const size_t partial = size_t(rows_capacity) * lora.max_partial_floats_per_row() * sizeof(float);
  const size_t plan =
      (4 + 4 * size_t(k::lora_max_tiles(rows_capacity, lora.n_slots())) + 3 * size_t(rows_capacity) +
       size_t(lora_gemv_counts())) *
      sizeof(int32_t);
  const size_t delta = size_t(rows_capacity) * size_t(std::max(2 * local_ffn, qkv_width())) * 2;
  const size_t xa_rows = size_t(rows_capacity) * k::kLoraMaxSegments *
                         size_t(lora.pool(0, cuda::LoraGroup::qkv).max_rank) * sizeof(float);
  if (partial <= lora_partial.bytes() && delta <= lora_delta.bytes() && xa_rows <= lora_xa_rows.bytes() &&
      plan == planned_lora_bytes)
    return;
  if (partial > lora_partial.bytes()) lora_partial.grow(partial, "the LoRA scratch");
  if (delta > lora_delta.bytes()) lora_delta.grow(delta, "the LoRA scratch");
  if (xa_rows > lora_xa_rows.bytes()) {
    lora_xa_rows.grow(xa_rows, "the LoRA scratch");
    CUDA_CHECK(cudaMemset(lora_xa_rows.get(), 0, xa_rows));  // finite for LoraSgmvConfig::empty_plan's consumers
  }
  if (plan > lora_plan_buf.bytes()) lora_plan_buf.grow(plan, "the LoRA scratch");
  // The shrink's tile counters start at 0 (each launch leaves them so); the rest is per step.
  CUDA_CHECK(cudaMemset(lora_plan_buf.get(), 0, plan));
  planned_lora_bytes = plan;
  ++epoch;
}

void CudaBackend::Impl::prepare_lora_gemm(int rows) {
  if (!lora_gemm || !lora.reserved() || rows <= lora_gemm_prepared_rows) return;
  lora_gemm->set_shrink_sms(lora_kernels.run_shrink_sms);
  for (int g = 0; g < cuda::kLoraGroups; ++g)
    lora_gemm->prepare(dt, lora.pool(0, cuda::LoraGroup(g)), std::max(1, lora_kernels.gemm_min_rows), rows);
  // The base products as steps with LoRA work beside them ask cuBLASLt for them
  // (LoraSgmvConfig::product_sm_reserve: their own algorithms).
  if (lora_kernels.product_sm_reserve > 0) {
    const int d = c().hidden_size;
    gemm->set_sm_reserve(lora_kernels.product_sm_reserve);
    gemm->prepare(dt, rows, qkv_width(), d, false);
    gemm->prepare(dt, rows, d, dq(), false);
    gemm->prepare(dt, rows, 2 * local_ffn, d, false);
    gemm->prepare(dt, rows, d, local_ffn, false);
    gemm->set_sm_reserve(0);
  }
  lora_gemm_prepared_rows = rows;
}

void CudaBackend::Impl::mark_step_begin() {
  if (!step_begin) {
    CUDA_CHECK(cudaEventCreate(&step_begin));
    CUDA_CHECK(cudaEventCreate(&step_end));
  }
  CUDA_CHECK(cudaEventRecord(step_begin, stream));
  step_timed = true;
}

/// run_step after the plan: graph or eager (a CUDA graph per bucket of plain decode and small
/// verification steps, captured on its second use).
void CudaBackend::Impl::run_planned(const cuda::BlockTableStep* tables) {
  const k::StepInput& in = plan->in;
  Geometry g;
  g.kind = in.kv_kind;
  g.block_size = in.block_size;
  g.lora = step_lora;
  lora.settle(false);  // an adapter's copy that has finished gives its image back
  const int bucket = graph_bucket(in.n_seqs());
  const bool paged = in.kv_kind == k::KvLayoutKind::paged;
  if (options.cuda_graphs && !options.batch_invariant && bucket > 0 && in.max_context() <= kGraphMaxContext &&
      cuda::bucketable(*plan) && (!tables || tables->updates.size() <= size_t(kGraphMaxTableUpdates))) {
    const int context = context_bucket(in.max_context());
    const int stride = paged ? (context + in.block_size - 1) / in.block_size : 0;
    g.layout = cuda::bucket_layout(*plan, bucket, stride, tables, planned_spans());
    g.row_groups = step_groups;
    g.rows = g.tokens = g.seqs = g.samples = bucket;
    g.max_context = context;
    g.decode = true;
    g.graph = true;
    ensure_rows(bucket);
    ensure_samples(bucket);
    ensure_decode_workspace(bucket);
    if (!graph_packed.get()) {  // the largest layout any graph can use
      Step probe;
      probe.in.decode_only = true;
      probe.in.kv_kind = k::KvLayoutKind::paged;
      const int largest = kGraphBuckets[std::size(kGraphBuckets) - 1];
      cuda::BlockTableStep most;  // persistent tables: the most changes a graph step carries
      most.rows.resize(largest);
      most.updates.resize(kGraphMaxTableUpdates);
      // full tables: block size 1, longest context
      const std::vector<int32_t> spans_room;  // room for the row spans (verification steps)
      graph_packed.grow(cuda::bucket_layout(probe, largest, kGraphMaxContext, tables ? &most : nullptr, &spans_room).total + 1024,
                        "the graph step input");
    }
    stage(g, graph_packed, tables);
    if (g.lora) lora.wait_copy(stream);  // the graph reads every layer's pool: the whole of a load's copy first
    GraphEntry& entry = graphs[GraphKey{bucket, context, int(in.kv_kind), paged ? in.block_size : 0, g.lora, !g.late,
                                        g.layout.has_row_spans, g.draw_probs}];
    if (entry.exec && entry.epoch != epoch) {
      CUDA_CHECK(cudaGraphExecDestroy(entry.exec));
      entry = GraphEntry{};
    }
    if (!entry.exec && entry.eager_runs == 0) {
      ++entry.eager_runs;
      enqueue_step(g);
      return;
    }
    if (!entry.exec) {
      cudaGraph_t graph = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue_forward(g);
        if (!g.late) enqueue_draws(g);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      const cudaError_t e = cudaGraphInstantiate(&entry.exec, graph, 0);
      cudaGraphDestroy(graph);
      CUDA_CHECK(e);
      entry.epoch = epoch;
      ++graph_captures;
    }
    mark_step_begin();
    CUDA_CHECK(cudaGraphLaunch(entry.exec, stream));
    if (g.late) send_late_masks_and_draw(g);
    return;
  }
  g.layout = cuda::compact_layout(*plan, tables, planned_spans());
  g.row_groups = step_groups;
  g.rows = plan->n_rows();
  g.tokens = in.n_tokens();
  g.seqs = in.n_seqs();
  g.samples = in.n_samples();
  g.max_context = in.max_context();
  g.decode = in.decode_only && !options.batch_invariant;
  g.decode_prefix = g.decode || g.layout.has_row_spans ? 0 : mixed.decode_prefix(in.query_start, in.context_lens);
  if (kv_fp8 && !g.decode) {  // prefill attention reads the step's sequences dequantized
    int64_t total = 0;
    for (int32_t c : in.context_lens) total += c;
    g.total_context = total;
    ensure_kv8_scratch(total, g.seqs);
  }
  ensure_rows(g.rows);
  ensure_samples(std::max(g.samples, 1));
  if (g.decode) ensure_decode_workspace(g.seqs);
  else if (g.decode_prefix > 0) ensure_decode_workspace(g.decode_prefix);
  packed.grow(g.layout.total, "the step input");
  stage(g, packed, tables);
  enqueue_step(g);
}

}  // namespace servelab
