// CudaBackend::Impl::setup (cuda_backend_impl.h): the backend built from its options and the
// model, once its weights are on the device.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend_impl.h"

namespace servelab {

void CudaBackend::Impl::setup() {
  const ModelConfig& m = c();
  const int hd = m.head_dim();
  if (local_heads == 0) {
    local_heads = m.n_heads;
    local_kv_heads = m.n_kv_heads;
    local_ffn = m.intermediate_size;
    local_vocab = m.vocab_size;
  }
  if (w.storage_dtype != options.dtype)
    throw std::logic_error(std::string("CudaBackend: weights stored as ") + to_string(w.storage_dtype) +
                           ", options.dtype is " + to_string(options.dtype));
  dt = options.dtype == DType::f16 ? k::ScalarType::f16 : k::ScalarType::bf16;
  if (hd != 32 && hd != 64 && hd != 128)
    throw std::invalid_argument("CudaBackend: head_dim " + std::to_string(hd) +
                                " is not supported by the attention kernels (32, 64 or 128)");
  if (m.hidden_size % 8 || local_ffn % 8 || local_kv_dim() % 8)
    throw std::invalid_argument("CudaBackend: hidden_size, intermediate_size and kv_dim must be multiples of 8");
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Products of <= 8 rows (decode): options.decode (kernels/gemv.cu; results/gpu/README.md).
  const DecodePathOptions& dp = options.decode;
  using Gemv = DecodePathOptions::Gemv;
  gemm = std::make_unique<k::Gemm>(options.batch_invariant, size_t(32) << 20, dp.gemv != Gemv::off,
                                   dp.gemv == Gemv::all);
  gemm->set_gemv_waves(dp.gemv_waves);
  gemm->set_gemv_variant(dp.gemv_loop);
  gemm->set_autotune(options.gemm_autotune_rows);
  fuse_gate_up_silu = dp.fuse_gate_up_silu;
  fuse_qkv_rope = dp.fuse_qkv_rope;
  if (dp.attention_pdl < 0 || dp.attention_pdl > 2)
    throw std::invalid_argument("cuda backend: decode.attention_pdl must be 0, 1 or 2 (got " +
                                std::to_string(dp.attention_pdl) + ")");
  attention_pdl = dp.attention_pdl;
  // PDL pays between gemv launches (they stream weights while the previous kernel drains); beside
  // cuBLASLt's products it measured slower (batch 1 and 32), so only steps whose products take gemv.
  pdl_small_steps = dp.gemv != Gemv::off && !options.batch_invariant && dp.pdl;
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, options.device));
  n_sms = p.multiProcessorCount;
  mixed = cuda::MixedDecodePlanner(options.mixed_decodes, !options.batch_invariant && options.kv_cache_dtype != KvCacheDType::fp8,
                                   k::prefill_wgmma_supported(hd), {.n_sms = n_sms, .n_kv_heads = local_kv_heads,
                                   .group = std::max(1, m.n_heads / std::max(1, m.n_kv_heads)), .head_dim = hd});
  // The model's frequencies, Llama-3 rope_scaling applied (as the CPU backend uses them).
  std::vector<float> inv;
  for (double f : servelab::rope_inv_freq(m)) inv.push_back(static_cast<float>(f));
  inv_freq.grow(inv.size() * sizeof(float), "RoPE frequencies");
  CUDA_CHECK(cudaMemcpy(inv_freq.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
  kv_fp8 = options.kv_cache_dtype == KvCacheDType::fp8;
  if (kv_fp8 && tp)
    throw std::invalid_argument("kv_cache_dtype fp8: the tensor-parallel cuda backend keeps its KV cache in bf16/f16 so far");
  row_bytes = kv_fp8 ? k::fp8_kv_slot_bytes(local_kv_heads, hd) : int64_t(local_kv_dim()) * 2;
  {  // the arena layout of the kernels and the bytes the engine sizes it by agree
    KvCacheSpec spec = cuda_kv_cache_spec(m, options.dtype, options.kv_cache_dtype);
    spec.n_kv_heads = local_kv_heads;
    if (spec.arena_slot_bytes() != row_bytes)
      throw std::logic_error("CudaBackend: KV slot of " + std::to_string(row_bytes) + " bytes, KvCacheSpec says " +
                             std::to_string(spec.arena_slot_bytes()));
  }
  const bool from_checkpoint = !checkpoint_linears.empty();
  if (from_checkpoint || options.quantization != Quantization::none) {  // quant_linear.h
    if (tp) throw std::invalid_argument("quantization: the tensor-parallel cuda backend runs bf16/f16 Linears only");
    const QuantScheme scheme =
        from_checkpoint ? checkpoint_scheme : scheme_for_model(options.quantization, m, options.fp8_per_channel);
    qw = std::make_unique<cuda::QuantDeviceWeights>(from_checkpoint
                                                        ? cuda::upload_quant_weights(w, scheme, checkpoint_linears)
                                                        : cuda::quantize_device_weights(w, scheme));  // on load
    checkpoint_linears = {};
    quant_runner = std::make_unique<cuda::QuantLinearRunner>(scheme, std::max(qkv_width(), 2 * local_ffn),
                                                             std::max({m.hidden_size, dq(), local_ffn}),
                                                             options.quant_gemv_max_rows);  // 0: the format's default
  }
}

}  // namespace servelab
