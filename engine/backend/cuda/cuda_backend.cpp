#include "engine/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/backend/cuda/cuda_weights.h"
#include "engine/backend/cuda/device_memory.h"
#include "engine/backend/cuda/step_builder.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/sampling.h"

namespace servelab {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
namespace k = kernels;

namespace {

constexpr k::ScalarType kBf16 = k::ScalarType::bf16;
constexpr int kBatchInvariantSplit = 512;

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

/// Where each StepInput array sits in the packed upload (byte offsets, 16-byte aligned).
struct PackedLayout {
  size_t token_ids, positions, slot_mapping, query_start, context_lens, block_tables, base_slots, sample_rows,
      temperature, top_k, top_p, seed, seq_key, sample_position, total;
};

PackedLayout layout_for(const cuda::StepPlan& p) {
  const k::StepInput& in = p.in;
  PackedLayout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t o = at;
    at += align16(bytes);
    return o;
  };
  l.token_ids = take(sizeof(int32_t) * p.n_rows());  // padding rows read token 0
  l.positions = take(sizeof(int32_t) * in.positions.size());
  l.slot_mapping = take(sizeof(int64_t) * in.slot_mapping.size());
  l.query_start = take(sizeof(int32_t) * in.query_start.size());
  l.context_lens = take(sizeof(int32_t) * in.context_lens.size());
  l.block_tables = take(sizeof(int32_t) * in.block_tables.size());
  l.base_slots = take(sizeof(int64_t) * in.base_slots.size());
  l.sample_rows = take(sizeof(int32_t) * in.sample_rows.size());
  l.temperature = take(sizeof(float) * in.temperature.size());
  l.top_k = take(sizeof(int32_t) * in.top_k.size());
  l.top_p = take(sizeof(float) * in.top_p.size());
  l.seed = take(sizeof(uint64_t) * in.seed.size());
  l.seq_key = take(sizeof(uint64_t) * in.seq_key.size());
  l.sample_position = take(sizeof(int32_t) * in.sample_position.size());
  l.total = at;
  return l;
}

template <typename T>
void put(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

}  // namespace

void CudaBackendOptions::validate() const {
  if (device < 0) throw std::invalid_argument("device must be >= 0 (got " + std::to_string(device) + ")");
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

struct CudaBackend::Impl {
  CudaBackendOptions options;
  cuda::DeviceWeights w;
  cudaStream_t stream = nullptr;
  std::unique_ptr<k::Gemm> gemm;
  int n_sms = 0;

  // KV arena: 2 * n_layers arenas [n_slots, n_kv_heads, head_dim], K then V per layer.
  DeviceBuffer arena;
  DeviceBuffer arena_ptrs;  // [2 * n_layers] device pointers, for copy/gather/scatter
  int64_t n_slots = 0;
  int64_t row_bytes = 0;    // one slot of one arena

  // The step.
  cuda::StepPlan plan;
  PinnedBuffer packed_host;
  DeviceBuffer packed;
  DeviceBuffer inv_freq;    // [head_dim / 2] fp32
  DeviceBuffer h, xn, qkv, attn, delta, gate_up, act;  // [rows, ...] bf16
  int rows_capacity = 0;
  DeviceBuffer xs_delta, xs_h, xs, logits, tokens;     // sampled rows
  int samples_capacity = 0;
  DeviceBuffer decode_ws;
  PinnedBuffer tokens_host;
  // Swap and copy-on-write lists, and the swap buffer (mapped pinned).
  PinnedBuffer index_host;
  PinnedBuffer swap_host;

  ~Impl() {
    if (stream) cudaStreamDestroy(stream);
  }

  const ModelConfig& c() const { return w.config; }
  int dq() const { return c().n_heads * c().head_dim(); }
  int qkv_width() const { return dq() + 2 * c().kv_dim(); }
  void* k_arena(int l) const { return arena.get<uint8_t>() + (2 * int64_t(l)) * n_slots * row_bytes; }
  void* v_arena(int l) const { return arena.get<uint8_t>() + (2 * int64_t(l) + 1) * n_slots * row_bytes; }

  void setup() {
    const ModelConfig& m = c();
    const int hd = m.head_dim();
    if (hd != 32 && hd != 64 && hd != 128)
      throw std::invalid_argument("CudaBackend: head_dim " + std::to_string(hd) +
                                  " is not supported by the attention kernels (32, 64 or 128)");
    if (m.hidden_size % 8 || m.intermediate_size % 8 || m.kv_dim() % 8)
      throw std::invalid_argument("CudaBackend: hidden_size, intermediate_size and kv_dim must be multiples of 8");
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gemm = std::make_unique<k::Gemm>(options.batch_invariant);
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, options.device));
    n_sms = p.multiProcessorCount;
    const std::vector<float> inv = k::rope_inv_freq(m.rope_theta, hd);
    inv_freq.grow(inv.size() * sizeof(float), "RoPE frequencies");
    CUDA_CHECK(cudaMemcpy(inv_freq.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
    row_bytes = int64_t(m.kv_dim()) * 2;
  }

  void ensure_rows(int rows) {
    if (rows <= rows_capacity) return;
    const int n = std::max(rows, std::max(64, rows_capacity * 3 / 2));
    const ModelConfig& m = c();
    const size_t r = size_t(n) * 2;
    h.grow(r * m.hidden_size, "activations");
    xn.grow(r * m.hidden_size, "activations");
    delta.grow(r * m.hidden_size, "activations");
    qkv.grow(r * qkv_width(), "activations");
    attn.grow(r * dq(), "activations");
    gate_up.grow(r * 2 * size_t(m.intermediate_size), "activations");
    act.grow(r * m.intermediate_size, "activations");
    // Padding rows of attn are never written by attention: keep them finite.
    CUDA_CHECK(cudaMemsetAsync(attn.get(), 0, attn.bytes(), stream));
    rows_capacity = n;
  }

  void ensure_samples(int n_samples) {
    if (n_samples <= samples_capacity) return;
    const int n = std::max(n_samples, std::max(16, samples_capacity * 3 / 2));
    const ModelConfig& m = c();
    xs_delta.grow(size_t(n) * m.hidden_size * 2, "sampled rows");
    xs_h.grow(size_t(n) * m.hidden_size * 2, "sampled rows");
    xs.grow(size_t(n) * m.hidden_size * 2, "sampled rows");
    logits.grow(size_t(n) * m.vocab_size * sizeof(float), "logits");
    tokens.grow(size_t(n) * sizeof(int32_t), "sampled tokens");
    tokens_host.grow(size_t(n) * sizeof(int32_t));
    samples_capacity = n;
  }

  /// Activation bytes a step of `rows` rows and `samples` sampled rows allocates.
  int64_t activation_bytes(int rows, int samples) const {
    const ModelConfig& m = c();
    const int64_t per_row = 2ll * (3 * m.hidden_size + qkv_width() + dq() + 3 * int64_t(m.intermediate_size));
    const int64_t per_sample = 2ll * 3 * m.hidden_size + 4ll * m.vocab_size + 4;
    return int64_t(rows) * per_row + int64_t(samples) * per_sample +
           int64_t(k::decode_attention_workspace_bytes(rows, m.n_heads, m.head_dim(), k::kMaxAutoSplits)) +
           (32ll << 20);  // cuBLASLt workspace
  }

  /// Runs the step in `plan` up to the logits of its sample rows (device, [n_samples, vocab]).
  void run_to_logits(const Batch& batch, const KvManager& kv) {
    if (n_slots == 0) throw std::logic_error("CudaBackend::forward: init_kv() was not called");
    cuda::build_step_input(batch, kv, c().vocab_size, plan);
    const k::StepInput& in = plan.in;
    for (int64_t s : in.slot_mapping)
      if (s < 0 || s >= n_slots)
        throw std::out_of_range("CudaBackend: kv slot " + std::to_string(s) + " is outside the arena [0, " +
                                std::to_string(n_slots) + ")");
    const int T = in.n_tokens(), R = plan.n_rows(), S = in.n_seqs(), N = in.n_samples();
    if (R == 0) return;
    ensure_rows(R);
    ensure_samples(std::max(N, 1));

    // One upload of the whole step input.
    const PackedLayout L = layout_for(plan);
    packed_host.grow(L.total);
    packed.grow(L.total, "the step input");
    auto* hb = packed_host.get<uint8_t>();
    put(hb, L.token_ids, in.token_ids);
    std::memset(hb + L.token_ids + sizeof(int32_t) * T, 0, sizeof(int32_t) * plan.n_padding);
    put(hb, L.positions, in.positions);
    put(hb, L.slot_mapping, in.slot_mapping);
    put(hb, L.query_start, in.query_start);
    put(hb, L.context_lens, in.context_lens);
    put(hb, L.block_tables, in.block_tables);
    put(hb, L.base_slots, in.base_slots);
    put(hb, L.sample_rows, in.sample_rows);
    put(hb, L.temperature, in.temperature);
    put(hb, L.top_k, in.top_k);
    put(hb, L.top_p, in.top_p);
    put(hb, L.seed, in.seed);
    put(hb, L.seq_key, in.seq_key);
    put(hb, L.sample_position, in.sample_position);
    CUDA_CHECK(cudaMemcpyAsync(packed.get(), hb, L.total, cudaMemcpyHostToDevice, stream));
    auto* db = packed.get<uint8_t>();
    auto dev = [&](size_t off) { return static_cast<void*>(db + off); };

    const ModelConfig& m = c();
    const int d = m.hidden_size, hd = m.head_dim(), ffn = m.intermediate_size;
    const float eps = m.rms_eps, scale = 1.0f / std::sqrt(float(hd));
    k::KvAddressing addr;
    addr.kind = in.kv_kind;
    addr.block_tables = static_cast<const int32_t*>(dev(L.block_tables));
    addr.block_table_stride = in.block_table_stride;
    addr.block_size = in.block_size;
    addr.base_slots = static_cast<const int64_t*>(dev(L.base_slots));
    const k::KvShape shape{n_slots, m.n_kv_heads, hd};
    const auto* query_start = static_cast<const int32_t*>(dev(L.query_start));
    const auto* context_lens = static_cast<const int32_t*>(dev(L.context_lens));
    const bool use_decode = in.decode_only && !options.batch_invariant;
    if (use_decode) {
      decode_ws.grow(k::decode_attention_workspace_bytes(S, m.n_heads, hd, k::kMaxAutoSplits), "decode workspace");
    }

    k::embedding(kBf16, w.embedding, static_cast<const int32_t*>(dev(L.token_ids)), h.get(), R, d, stream);
    for (int l = 0; l < m.n_layers; ++l) {
      const cuda::DeviceLayer& W = w.layers[l];
      if (l == 0) {
        k::rms_norm(kBf16, h.get(), W.attn_norm, xn.get(), R, d, eps, stream);
      } else if (options.fusion) {
        k::add_rms_norm(kBf16, delta.get(), h.get(), W.attn_norm, xn.get(), R, d, eps, stream);
      } else {
        k::residual_add(kBf16, delta.get(), h.get(), int64_t(R) * d, stream);
        k::rms_norm(kBf16, h.get(), W.attn_norm, xn.get(), R, d, eps, stream);
      }
      gemm->run(kBf16, xn.get(), W.w_qkv, qkv.get(), R, qkv_width(), d, false, stream);

      k::QkvArgs qa;
      qa.qkv = qkv.get();
      qa.qkv_row_stride = qkv_width();
      qa.n_tokens = T;
      qa.n_heads = m.n_heads;
      qa.n_kv_heads = m.n_kv_heads;
      qa.head_dim = hd;
      qa.bias = W.b_qkv;
      qa.positions = static_cast<const int32_t*>(dev(L.positions));
      qa.inv_freq = inv_freq.get<float>();
      qa.slot_mapping = static_cast<const int64_t*>(dev(L.slot_mapping));
      qa.k_cache = k_arena(l);
      qa.v_cache = v_arena(l);
      if (options.fusion) {
        k::rope_kv_write(qa, stream);
      } else {
        k::rope_inplace(qa, stream);
        k::kv_write(qa, stream);
      }

      if (use_decode) {
        k::DecodeAttentionArgs a;
        a.q = qkv.get();
        a.q_row_stride = qkv_width();
        a.query_start = query_start;
        a.k_cache = k_arena(l);
        a.v_cache = v_arena(l);
        a.shape = shape;
        a.n_heads = m.n_heads;
        a.n_seqs = S;
        a.context_lens = context_lens;
        a.kv = addr;
        a.max_context = in.max_context();
        a.scale = scale;
        a.out = attn.get();
        a.out_row_stride = dq();
        a.workspace = decode_ws.get<float>();
        a.workspace_bytes = decode_ws.bytes();
        k::decode_attention(a, stream);
      } else {
        k::PrefillAttentionArgs a;
        a.q = qkv.get();
        a.q_row_stride = qkv_width();
        a.k_cache = k_arena(l);
        a.v_cache = v_arena(l);
        a.shape = shape;
        a.n_heads = m.n_heads;
        a.n_seqs = S;
        a.n_tokens = T;
        a.query_start = query_start;
        a.context_lens = context_lens;
        a.kv = addr;
        a.scale = scale;
        a.out = attn.get();
        a.out_row_stride = dq();
        k::prefill_attention(a, stream);
      }
      gemm->run(kBf16, attn.get(), W.w_o, delta.get(), R, d, dq(), false, stream);
      if (options.fusion) {
        k::add_rms_norm(kBf16, delta.get(), h.get(), W.ffn_norm, xn.get(), R, d, eps, stream);
      } else {
        k::residual_add(kBf16, delta.get(), h.get(), int64_t(R) * d, stream);
        k::rms_norm(kBf16, h.get(), W.ffn_norm, xn.get(), R, d, eps, stream);
      }
      gemm->run(kBf16, xn.get(), W.w_gate_up, gate_up.get(), R, 2 * ffn, d, false, stream);
      if (options.fusion)
        k::silu_mul(kBf16, gate_up.get(), act.get(), R, ffn, stream);
      else
        k::silu_then_mul(kBf16, gate_up.get(), act.get(), R, ffn, stream);
      gemm->run(kBf16, act.get(), W.w_down, delta.get(), R, d, ffn, false, stream);
    }
    if (N == 0) return;
    // The last residual add and the final norm on the sampled rows only, then the LM head.
    const auto* rows = static_cast<const int32_t*>(dev(L.sample_rows));
    k::embedding(kBf16, delta.get(), rows, xs_delta.get(), N, d, stream);
    k::embedding(kBf16, h.get(), rows, xs_h.get(), N, d, stream);
    if (options.fusion) {
      k::add_rms_norm(kBf16, xs_delta.get(), xs_h.get(), w.final_norm, xs.get(), N, d, eps, stream);
    } else {
      k::residual_add(kBf16, xs_delta.get(), xs_h.get(), int64_t(N) * d, stream);
      k::rms_norm(kBf16, xs_h.get(), w.final_norm, xs.get(), N, d, eps, stream);
    }
    gemm->run(kBf16, xs.get(), w.lm_head, logits.get(), N, m.vocab_size, d, true, stream);
  }

  void sample() {
    const PackedLayout L = layout_for(plan);
    auto* db = packed.get<uint8_t>();
    k::SampleArgs a;
    a.logits = logits.get<float>();
    a.n_rows = plan.in.n_samples();
    a.vocab = c().vocab_size;
    a.temperature = reinterpret_cast<const float*>(db + L.temperature);
    a.top_k = reinterpret_cast<const int32_t*>(db + L.top_k);
    a.top_p = reinterpret_cast<const float*>(db + L.top_p);
    a.seed = reinterpret_cast<const uint64_t*>(db + L.seed);
    a.seq_key = reinterpret_cast<const uint64_t*>(db + L.seq_key);
    a.position = reinterpret_cast<const int32_t*>(db + L.sample_position);
    a.tokens = tokens.get<int32_t>();
    k::sample_tokens(a, stream);
  }

  /// Slots as int32 indices in the mapped index buffer (device-visible); checks the range.
  const int32_t* upload_slots(std::span<const int64_t> slots, const char* what) {
    index_host.grow(slots.size() * sizeof(int32_t));
    auto* p = index_host.get<int32_t>();
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i] < 0 || slots[i] >= n_slots)
        throw std::out_of_range(std::string("CudaBackend: ") + what + " slot " + std::to_string(slots[i]) +
                                " is outside the arena [0, " + std::to_string(n_slots) + ")");
      p[i] = static_cast<int32_t>(slots[i]);
    }
    return index_host.device_ptr<int32_t>();
  }
};

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
  impl->w = cuda::DeviceWeights::random(config, seed);
  impl->setup();
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

std::unique_ptr<CudaBackend> CudaBackend::load(const std::string& dir, CudaBackendOptions options) {
  select_device(options);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->w = cuda::DeviceWeights::load(dir);
  impl->setup();
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

const ModelConfig& CudaBackend::config() const { return impl_->c(); }
const CudaBackendOptions& CudaBackend::options() const { return impl_->options; }
int64_t CudaBackend::weight_bytes() const { return impl_->w.bytes; }

int64_t CudaBackend::kv_bytes_per_slot() const { return 2ll * config().n_layers * config().kv_dim() * 2; }

void CudaBackend::init_kv(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("CudaBackend::init_kv: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  if (n_slots > (int64_t(1) << 31) - 1)
    throw std::invalid_argument("CudaBackend::init_kv: n_slots (" + std::to_string(n_slots) + ") must be < 2^31");
  Impl& m = *impl_;
  m.arena.reset();
  m.arena.grow(size_t(n_slots) * size_t(kv_bytes_per_slot()), "the KV cache (lower kv_cache_bytes or gpu_memory_utilization)");
  CUDA_CHECK(cudaMemset(m.arena.get(), 0, m.arena.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  m.n_slots = n_slots;
  const int n_arenas = 2 * config().n_layers;
  std::vector<void*> ptrs(n_arenas);
  for (int l = 0; l < config().n_layers; ++l) {
    ptrs[2 * l] = m.k_arena(l);
    ptrs[2 * l + 1] = m.v_arena(l);
  }
  m.arena_ptrs.grow(ptrs.size() * sizeof(void*), "arena pointers");
  CUDA_CHECK(cudaMemcpy(m.arena_ptrs.get(), ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
}

ForwardResult CudaBackend::forward(const Batch& batch, const KvManager& kv) {
  Impl& m = *impl_;
  m.run_to_logits(batch, kv);
  ForwardResult result;
  const int n = m.plan.in.n_samples();
  if (n > 0 && m.plan.n_rows() > 0) {
    m.sample();
    CUDA_CHECK(cudaMemcpyAsync(m.tokens_host.get(), m.tokens.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               m.stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (n > 0) result.sampled.assign(m.tokens_host.get<int32_t>(), m.tokens_host.get<int32_t>() + n);
  return result;
}

std::vector<float> CudaBackend::forward_logits(const Batch& batch, const KvManager& kv) {
  Impl& m = *impl_;
  m.run_to_logits(batch, kv);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const size_t vocab = config().vocab_size;
  std::vector<float> out;
  int draw = 0;
  for (const BatchEntry& e : batch.entries) {
    if (!e.sample) continue;
    const size_t at = out.size();
    out.resize(at + vocab);
    CUDA_CHECK(cudaMemcpy(out.data() + at, m.logits.get<float>() + size_t(draw) * vocab, vocab * sizeof(float),
                          cudaMemcpyDeviceToHost));
    draw += std::max(1, e.n_samples);
  }
  return out;
}

void CudaBackend::copy_slots(std::span<const KvCopy> copies) {
  Impl& m = *impl_;
  // Granularity: the largest run length dividing every source, destination and length.
  int64_t g = 0;
  for (const KvCopy& c : copies) {
    if (c.n_slots <= 0) continue;
    if (c.src_slot < 0 || c.dst_slot < 0 || c.src_slot + c.n_slots > m.n_slots || c.dst_slot + c.n_slots > m.n_slots)
      throw std::out_of_range("CudaBackend::copy_slots: run [" + std::to_string(c.src_slot) + ", +" +
                              std::to_string(c.n_slots) + ") -> " + std::to_string(c.dst_slot) +
                              " is outside the arena of " + std::to_string(m.n_slots) + " slots");
    g = std::gcd(g, std::gcd(c.n_slots, std::gcd(c.src_slot, c.dst_slot)));
  }
  if (g == 0) return;
  std::vector<int64_t> pairs;
  for (const KvCopy& c : copies)
    for (int64_t i = 0; i < c.n_slots / g; ++i) {
      pairs.push_back(c.src_slot / g + i);
      pairs.push_back(c.dst_slot / g + i);
    }
  const int32_t* dev_pairs = m.upload_slots(pairs, "copy_slots");  // block indices are < n_slots too
  k::copy_blocks(m.arena_ptrs.get<void*>(), 2 * config().n_layers, dev_pairs, static_cast<int>(pairs.size() / 2),
                 g * m.row_bytes, m.stream);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaBackend::save_slots(std::span<const int64_t> slots, std::vector<std::byte>& host) {
  Impl& m = *impl_;
  const size_t bytes = slots.size() * size_t(kv_bytes_per_slot());
  host.resize(bytes);
  if (slots.empty()) return;
  const int32_t* idx = m.upload_slots(slots, "save_slots");
  m.swap_host.grow(bytes);
  k::gather_blocks(m.arena_ptrs.get<void*>(), 2 * config().n_layers, idx, static_cast<int>(slots.size()), m.row_bytes,
                   m.swap_host.device_ptr(), m.stream);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
  std::memcpy(host.data(), m.swap_host.get(), bytes);
}

void CudaBackend::load_slots(std::span<const int64_t> slots, const std::vector<std::byte>& host) {
  Impl& m = *impl_;
  const size_t bytes = slots.size() * size_t(kv_bytes_per_slot());
  if (host.size() != bytes)
    throw std::invalid_argument("CudaBackend::load_slots: host buffer has " + std::to_string(host.size()) +
                                " bytes, " + std::to_string(slots.size()) + " slots need " + std::to_string(bytes));
  if (slots.empty()) return;
  const int32_t* idx = m.upload_slots(slots, "load_slots");
  m.swap_host.grow(bytes);
  std::memcpy(m.swap_host.get(), host.data(), bytes);
  k::scatter_blocks(m.arena_ptrs.get<void*>(), 2 * config().n_layers, idx, static_cast<int>(slots.size()), m.row_bytes,
                    m.swap_host.device_ptr(), m.stream);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

int64_t CudaBackend::kv_bytes_for_utilization(double utilization, int max_tokens, int max_samples) const {
  if (!(utilization > 0.0 && utilization <= 1.0))
    throw std::invalid_argument("gpu_memory_utilization must be in (0, 1] (got " + std::to_string(utilization) + ")");
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t in_use = int64_t(total_b - free_b) - int64_t(impl_->arena.bytes());
  const int64_t act = impl_->activation_bytes(max_tokens, max_samples);
  const int64_t budget = int64_t(utilization * double(total_b)) - in_use - act;
  if (budget < kv_bytes_per_slot())
    throw std::invalid_argument("gpu_memory_utilization " + std::to_string(utilization) + " leaves no room for the KV cache: " +
                                std::to_string(utilization * double(total_b) / 1e9) + " GB allowed, " +
                                std::to_string(in_use / 1e9) + " GB in use (weights " + std::to_string(weight_bytes() / 1e9) +
                                " GB), " + std::to_string(act / 1e9) + " GB for activations");
  return budget;
}

}  // namespace servelab
