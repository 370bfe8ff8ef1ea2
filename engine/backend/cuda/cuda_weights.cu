#include "engine/backend/cuda/cuda_weights.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "engine/model/hf_config.h"
#include "engine/model/quant_checkpoint.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"
#include "engine/model/checkpoint_files.h"

namespace servelab::cuda {
namespace {

namespace fs = std::filesystem;

__host__ __device__ inline uint64_t mix64(uint64_t x) {  // engine/splitmix64.h's splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// fill_random's per-tensor stream key (engine/model/tensors.cpp's stream_seed): FNV-1a of the
// name mixed into the seed, then one splitmix64_next step (which advances the state by the
// increment; its output is unused there).
uint64_t stream_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return (seed ^ (h * 0x9e3779b97f4a7c15ull)) + 0x9e3779b97f4a7c15ull;
}

/// The two normal draws of pair p of a tensor's stream (fill_random's Box-Muller over splitmix64):
/// element 2p is a[0], element 2p + 1 is a[1].
__device__ inline void normal_pair(uint64_t key, int64_t p, float scale, float offset, float a[2]) {
  const uint64_t r = mix64(key + uint64_t(p) * 0x9e3779b97f4a7c15ull);
  const float u1 = (float(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = float(r & 0xffffffffu) * (1.0f / 4294967296.0f);
  const float radius = sqrtf(-2.0f * logf(u1));
  const float angle = 6.28318530717958647692f * u2;
  a[0] = offset + scale * radius * cosf(angle);
  a[1] = offset + scale * radius * sinf(angle);
}

/// fp32 to the storage type T (__nv_bfloat16 or __half), round to nearest even.
template <typename T>
__device__ inline T store_as(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

/// A draw rounded through the config's dtype (0 f32, 1 f16, 2 bf16), stored as T.
template <typename T>
__device__ inline T round_to_storage(float x, int dtype) {
  if (dtype == 1) x = __half2float(__float2half_rn(x));
  else if (dtype == 2) x = __bfloat162float(__float2bfloat16_rn(x));
  return store_as<T>(x);
}

/// Element i of fill_random's stream for `key`, rounded through dtype (0 f32, 1 f16, 2 bf16),
/// stored as T. One thread per pair (2p, 2p + 1), grid-stride.
template <typename T>
__global__ void random_kernel(T* out, int64_t n, uint64_t key, float scale, float offset, int dtype) {
  const int64_t n_pairs = (n + 1) / 2;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_pairs; p += int64_t(gridDim.x) * blockDim.x) {
    float v[2];
    normal_pair(key, p, scale, offset, v);
    for (int j = 0; j < 2; ++j) {
      const int64_t i = 2 * p + j;
      if (i >= n) break;
      out[i] = round_to_storage<T>(v[j], dtype);
    }
  }
}

/// random_kernel's values in a window (tensor-parallel shards): out[i * cols + j] = element
/// first + i * full_cols + j of the stream (the same normal_pair as random_kernel).
template <typename T>
__global__ void random_window_kernel(T* out, int64_t rows, int64_t cols, int64_t first, int64_t full_cols,
                                     uint64_t key, float scale, float offset, int dtype) {
  const int64_t n = rows * cols;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = first + (o / cols) * full_cols + o % cols;
    float v[2];
    normal_pair(key, i / 2, scale, offset, v);
    out[o] = round_to_storage<T>(v[i % 2], dtype);
  }
}

/// Checkpoint values (0 f32, 1 f16, 2 bf16) to the storage type T; a value already in T is copied.
template <typename T>
__global__ void convert_kernel(const void* in, int dtype, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (dtype == 2 && std::is_same_v<T, __nv_bfloat16>) out[i] = static_cast<const T*>(in)[i];
    else if (dtype == 1 && std::is_same_v<T, __half>) out[i] = static_cast<const T*>(in)[i];
    else if (dtype == 2) out[i] = store_as<T>(__bfloat162float(static_cast<const __nv_bfloat16*>(in)[i]));
    else if (dtype == 1) out[i] = store_as<T>(__half2float(static_cast<const __half*>(in)[i]));
    else out[i] = store_as<T>(static_cast<const float*>(in)[i]);
  }
}

/// x *= scale in place (a residual branch scaled: residual_scale.h), rounded back to T.
template <typename T>
__global__ void scale_in_place_kernel(T* x, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, __half>) x[i] = store_as<T>(__half2float(x[i]) * scale);
    else x[i] = store_as<T>(__bfloat162float(x[i]) * scale);
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + 255) / 256, 1, 65536)); }

int dtype_code(DType d) { return d == DType::f32 ? 0 : d == DType::f16 ? 1 : 2; }

void check_storage(DType storage) {
  if (storage != DType::bf16 && storage != DType::f16)
    throw std::invalid_argument(std::string("device weights: storage dtype must be bf16 or f16 (got ") +
                                to_string(storage) + ")");
}

/// Runs f(T{}) with T the storage type of `storage` (__nv_bfloat16 or __half).
template <typename F>
void with_storage(DType storage, F&& f) {
  check_storage(storage);
  if (storage == DType::f16) f(__half{});
  else f(__nv_bfloat16{});
}

/// Where each checkpoint tensor goes: an element offset into the 16-bit storage.
struct Placement {
  TensorSpec spec;
  int64_t offset = 0;
};

/// Every checkpoint tensor of the config in allocate_layout's order, at its element offset; a
/// tensor `left_out` says is given no room (its offset is the next tensor's).
std::vector<Placement> lay_out(DeviceWeights& w, const std::function<bool(const std::string&)>& left_out = {}) {
  const std::vector<TensorSpec> specs = tensor_specs(w.config);
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& s : specs) by_name[s.name] = &s;
  std::vector<Placement> out;
  const std::vector<int64_t> offsets = allocate_layout(
      w,
      [&](const std::string& name) {
        out.push_back({*by_name.at(name), 0});
        return left_out && left_out(name) ? int64_t(0) : out.back().spec.numel();
      },
      [](int64_t embedding) { return embedding; }, "the model weights");
  for (size_t i = 0; i < out.size(); ++i) out[i].offset = offsets[i];
  return out;
}

}  // namespace

std::vector<int64_t> allocate_layout(DeviceWeights& w, const std::function<int64_t(const std::string&)>& append,
                                     const std::function<int64_t(int64_t)>& tied_head, const char* what) {
  const ModelConfig& c = w.config;
  std::vector<int64_t> offsets;
  int64_t cursor = 0;
  auto place = [&](const std::string& name) {
    const int64_t at = cursor;
    offsets.push_back(at);
    cursor += append(name);
    return at;
  };
  auto align = [&] { cursor = (cursor + 7) / 8 * 8; };
  struct LayerOffsets {
    int64_t attn_norm, w_qkv, b_qkv = -1, w_o, ffn_norm, w_gate_up, w_down;
  };
  const int64_t emb = place("model.embed_tokens.weight");
  align();
  std::vector<LayerOffsets> lo(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    lo[l].attn_norm = place(p + "input_layernorm.weight");
    align();
    lo[l].w_qkv = place(p + "self_attn.q_proj.weight");  // K and V rows follow Q's contiguously
    place(p + "self_attn.k_proj.weight");
    place(p + "self_attn.v_proj.weight");
    align();
    if (c.attention_bias) {
      lo[l].b_qkv = place(p + "self_attn.q_proj.bias");
      place(p + "self_attn.k_proj.bias");
      place(p + "self_attn.v_proj.bias");
      align();
    }
    lo[l].w_o = place(p + "self_attn.o_proj.weight");
    align();
    lo[l].ffn_norm = place(p + "post_attention_layernorm.weight");
    align();
    lo[l].w_gate_up = place(p + "mlp.gate_proj.weight");
    place(p + "mlp.up_proj.weight");
    align();
    lo[l].w_down = place(p + "mlp.down_proj.weight");
    align();
  }
  const int64_t fnorm = place("model.norm.weight");
  align();
  const int64_t head = c.tie_embeddings ? tied_head(emb) : place("lm_head.weight");
  align();

  w.bytes = cursor * 2;
  w.storage.grow(static_cast<size_t>(w.bytes), what);
  auto* base = w.storage.get<uint16_t>();  // bf16 or fp16 elements
  w.embedding = base + emb;
  w.final_norm = base + fnorm;
  w.lm_head = base + head;
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    DeviceLayer& d = w.layers[l];
    d.attn_norm = base + lo[l].attn_norm;
    d.w_qkv = base + lo[l].w_qkv;
    d.b_qkv = lo[l].b_qkv >= 0 ? base + lo[l].b_qkv : nullptr;
    d.w_o = base + lo[l].w_o;
    d.ffn_norm = base + lo[l].ffn_norm;
    d.w_gate_up = base + lo[l].w_gate_up;
    d.w_down = base + lo[l].w_down;
  }
  return offsets;
}

void random_window(const TensorSpec& spec, uint64_t seed, DType dtype, int64_t first, int64_t full_cols, int64_t rows,
                   int64_t cols, void* out, DType storage) {
  float scale = 1.0f, offset = 0.0f;  // as DeviceWeights::random
  switch (spec.role) {
    case TensorRole::matrix: scale = 1.0f / std::sqrt(static_cast<float>(spec.fan_in())); break;
    case TensorRole::norm: scale = 0.1f, offset = 1.0f; break;
    case TensorRole::bias: scale = 0.02f; break;
  }
  const int64_t n = rows * cols;
  if (n == 0) return;
  with_storage(storage, [&](auto t) {
    using T = decltype(t);
    random_window_kernel<T><<<grid_for(n), 256>>>(static_cast<T*>(out), rows, cols, first, full_cols,
                                                  stream_key(seed, spec.name), scale, offset, dtype_code(dtype));
    CUDA_CHECK_LAUNCH();
  });
  CUDA_CHECK(cudaDeviceSynchronize());
}

void convert_to_storage(const void* in, DType dtype, void* out, int64_t n, DType storage) {
  if (n == 0) return;
  with_storage(storage, [&](auto t) {
    using T = decltype(t);
    convert_kernel<T><<<grid_for(n), 256>>>(in, dtype_code(dtype), static_cast<T*>(out), n);
    CUDA_CHECK_LAUNCH();
  });
}

DeviceWeights DeviceWeights::random(const ModelConfig& config, uint64_t seed, DType storage) {
  config.validate();
  check_storage(storage);
  DeviceWeights w;
  w.config = config;
  w.storage_dtype = storage;
  const std::vector<Placement> places = lay_out(w);
  auto* base = w.storage.get<uint16_t>();
  for (const Placement& p : places) {
    float scale = 1.0f, offset = 0.0f;
    switch (p.spec.role) {
      case TensorRole::matrix: scale = 1.0f / std::sqrt(static_cast<float>(p.spec.fan_in())); break;
      case TensorRole::norm: scale = 0.1f, offset = 1.0f; break;
      case TensorRole::bias: scale = 0.02f; break;
    }
    const int64_t n = p.spec.numel();
    with_storage(storage, [&](auto t) {
      using T = decltype(t);
      random_kernel<T><<<grid_for((n + 1) / 2), 256>>>(reinterpret_cast<T*>(base + p.offset), n,
                                                       stream_key(seed, p.spec.name), scale, offset,
                                                       dtype_code(config.dtype));
      CUDA_CHECK_LAUNCH();
    });
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

DeviceWeights DeviceWeights::load(const std::string& dir, DType storage) {
  check_storage(storage);
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw std::runtime_error(dir + ": not a directory (expected a Hugging Face model folder)");
  DeviceWeights w;
  w.storage_dtype = storage;
  w.config = read_hf_config((root / "config.json").string());
  CheckpointFiles files(dir);

  // Check every tensor before uploading any.
  const std::vector<Placement> places = lay_out(w);
  std::vector<std::pair<const SafetensorsFile*, const SafetensorsTensor*>> sources;
  for (const Placement& p : places) {
    sources.push_back(files.checked(p.spec));
  }

  // Anything else in the files means the config does not describe this checkpoint (as
  // ModelWeights::load): HF's rotary inv_freq buffers and a tied lm_head are the only extras.
  std::map<std::string, bool> expected;
  for (const Placement& p : places) expected[p.spec.name] = true;
  const std::string inv_freq = "rotary_emb.inv_freq";
  for (const auto& [name, f] : files.opened())
    for (const SafetensorsTensor& t : f.tensors()) {
      const bool rope_buffer = t.name.size() > inv_freq.size() &&
                               t.name.compare(t.name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
      if (!expected.count(t.name) && !rope_buffer && !(w.config.tie_embeddings && t.name == "lm_head.weight"))
        throw std::runtime_error(f.path() + ": unexpected tensor " + t.name + " " + shape_string(t.shape) +
                                 " (not part of a Llama-family model with this config.json)");
    }

  // Chunked upload: file bytes (pageable, memory-mapped) -> device staging -> storage dtype in place.
  constexpr int64_t kChunk = 64ll << 20;
  DeviceBuffer staging(kChunk, "the checkpoint staging buffer");
  auto* base = w.storage.get<uint16_t>();
  for (size_t i = 0; i < places.size(); ++i) {
    const SafetensorsTensor& t = *sources[i].second;
    const int64_t esize = static_cast<int64_t>(dtype_size(t.dtype));
    const int64_t per_chunk = kChunk / esize;
    const uint8_t* src = sources[i].first->data(t);
    for (int64_t done = 0; done < t.numel; done += per_chunk) {
      const int64_t n = std::min(per_chunk, t.numel - done);
      CUDA_CHECK(cudaMemcpy(staging.get(), src + done * esize, size_t(n * esize), cudaMemcpyHostToDevice));
      convert_to_storage(staging.get(), t.dtype, base + places[i].offset + done, n, storage);
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

DeviceWeights DeviceWeights::from_host(const ModelWeights& host, DType storage) {
  check_storage(storage);
  DeviceWeights w;
  w.storage_dtype = storage;
  w.config = host.config;
  // The Linears of a checkpoint loaded as codes only (keep_only or load_streamed: fp32 tensors empty).
  auto codes_only = [&](const std::string& name) {
    return host.quant.quantized() && is_quantized_linear(name) && tensor_storage(host, name).empty();
  };
  const std::vector<Placement> places = lay_out(w, codes_only);
  if (codes_only("model.layers.0.self_attn.q_proj.weight"))
    for (DeviceLayer& l : w.layers) l.w_qkv = l.w_o = l.w_gate_up = l.w_down = nullptr;  // in their format, later
  constexpr int64_t kChunk = 16ll << 20;  // floats a staging copy
  DeviceBuffer staging(size_t(kChunk) * 4, "the host weights staging buffer");
  auto* base = w.storage.get<uint16_t>();
  for (const Placement& p : places) {
    const std::vector<float>& v = tensor_storage(host, p.spec.name);
    if (codes_only(p.spec.name)) continue;
    if (int64_t(v.size()) != p.spec.numel())
      throw std::invalid_argument("DeviceWeights::from_host: tensor " + p.spec.name + " holds " +
                                  std::to_string(v.size()) + " values, expected " + std::to_string(p.spec.numel()));
    for (int64_t done = 0; done < int64_t(v.size()); done += kChunk) {
      const int64_t n = std::min(kChunk, int64_t(v.size()) - done);
      CUDA_CHECK(cudaMemcpy(staging.get(), v.data() + done, size_t(n) * 4, cudaMemcpyHostToDevice));
      convert_to_storage(staging.get(), DType::f32, base + p.offset + done, n, storage);
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

void scale_residual_branches(DeviceWeights& w, const ResidualScale& r) {
  r.validate();
  const ModelConfig& c = w.config;
  const int from = std::min(r.from_layer, c.n_layers);
  const int64_t o_elems = int64_t(c.hidden_size) * c.n_heads * c.head_dim();
  const int64_t down_elems = int64_t(c.hidden_size) * c.intermediate_size;
  with_storage(w.storage_dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int l = from; l < c.n_layers; ++l) {
      // The layer's pointers are views into w.storage, which this object owns.
      auto* o = static_cast<T*>(const_cast<void*>(w.layers[size_t(l)].w_o));
      auto* down = static_cast<T*>(const_cast<void*>(w.layers[size_t(l)].w_down));
      scale_in_place_kernel<T><<<grid_for(o_elems), 256>>>(o, o_elems, r.scale);
      scale_in_place_kernel<T><<<grid_for(down_elems), 256>>>(down, down_elems, r.scale);
    }
  });
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace servelab::cuda
