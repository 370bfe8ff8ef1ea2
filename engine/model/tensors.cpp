#include "engine/model/tensors.h"

#include <cmath>
#include <stdexcept>

#include "engine/model/half.h"
#include "engine/splitmix64.h"

namespace servelab {
namespace {

std::string layer_prefix(int i) { return "model.layers." + std::to_string(i) + "."; }

// Stream seed from (seed, tensor name): FNV-1a over the name, mixed with the seed.
uint64_t stream_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  uint64_t s = seed ^ (h * 0x9e3779b97f4a7c15ull);
  splitmix64_next(s);
  return s;
}

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::bf16: return round_bf16(v);
    case DType::f16: return round_f16(v);
    case DType::f32: return v;
  }
  return v;
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, dq = int64_t(c.n_heads) * c.head_dim(), dkv = c.kv_dim();
  const int64_t ffn = c.intermediate_size, v = c.vocab_size;
  using R = TensorRole;
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {v, d}, R::matrix});
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = layer_prefix(i);
    out.push_back({p + "input_layernorm.weight", {d}, R::norm});
    out.push_back({p + "self_attn.q_proj.weight", {dq, d}, R::matrix});
    if (c.attention_bias) out.push_back({p + "self_attn.q_proj.bias", {dq}, R::bias});
    out.push_back({p + "self_attn.k_proj.weight", {dkv, d}, R::matrix});
    if (c.attention_bias) out.push_back({p + "self_attn.k_proj.bias", {dkv}, R::bias});
    out.push_back({p + "self_attn.v_proj.weight", {dkv, d}, R::matrix});
    if (c.attention_bias) out.push_back({p + "self_attn.v_proj.bias", {dkv}, R::bias});
    out.push_back({p + "self_attn.o_proj.weight", {d, dq}, R::matrix});
    out.push_back({p + "post_attention_layernorm.weight", {d}, R::norm});
    out.push_back({p + "mlp.gate_proj.weight", {ffn, d}, R::matrix});
    out.push_back({p + "mlp.up_proj.weight", {ffn, d}, R::matrix});
    out.push_back({p + "mlp.down_proj.weight", {d, ffn}, R::matrix});
  }
  out.push_back({"model.norm.weight", {d}, R::norm});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {v, d}, R::matrix});
  return out;
}

std::vector<float>& tensor_storage(ModelWeights& w, const std::string& name) {
  if (name == "model.embed_tokens.weight") return w.embedding;
  if (name == "model.norm.weight") return w.final_norm;
  if (name == "lm_head.weight") return w.lm_head;
  const std::string head = "model.layers.";
  if (name.rfind(head, 0) == 0) {
    const size_t dot = name.find('.', head.size());
    if (dot != std::string::npos && dot > head.size()) {
      const std::string index = name.substr(head.size(), dot - head.size());
      if (index.find_first_not_of("0123456789") == std::string::npos && index.size() < 9) {
        const size_t i = std::stoul(index);
        if (i < w.layers.size()) {
          LayerWeights& l = w.layers[i];
          const std::string rest = name.substr(dot + 1);
          if (rest == "input_layernorm.weight") return l.attn_norm;
          if (rest == "self_attn.q_proj.weight") return l.wq;
          if (rest == "self_attn.k_proj.weight") return l.wk;
          if (rest == "self_attn.v_proj.weight") return l.wv;
          if (rest == "self_attn.q_proj.bias") return l.bq;
          if (rest == "self_attn.k_proj.bias") return l.bk;
          if (rest == "self_attn.v_proj.bias") return l.bv;
          if (rest == "self_attn.o_proj.weight") return l.wo;
          if (rest == "post_attention_layernorm.weight") return l.ffn_norm;
          if (rest == "mlp.gate_proj.weight") return l.w_gate;
          if (rest == "mlp.up_proj.weight") return l.w_up;
          if (rest == "mlp.down_proj.weight") return l.w_down;
        }
      }
    }
  }
  throw std::invalid_argument("unknown tensor name '" + name + "' for a Llama-family model with " +
                              std::to_string(w.layers.size()) + " layers");
}

const std::vector<float>& tensor_storage(const ModelWeights& w, const std::string& name) {
  return tensor_storage(const_cast<ModelWeights&>(w), name);
}

void fill_random(const TensorSpec& spec, uint64_t seed, DType dtype, int64_t begin, int64_t count,
                 float* out) {
  // Box-Muller over a splitmix64 counter: draw p (64 bits) gives elements 2p and 2p + 1.
  const uint64_t key = stream_seed(seed, spec.name);
  float scale = 1.0f, offset = 0.0f;
  switch (spec.role) {
    case TensorRole::matrix: scale = 1.0f / std::sqrt(static_cast<float>(spec.fan_in())); break;
    case TensorRole::norm: scale = 0.1f, offset = 1.0f; break;
    case TensorRole::bias: scale = 0.02f; break;
  }
  constexpr float kTwoPi = 6.28318530717958647692f;
  constexpr float kInv32 = 1.0f / 4294967296.0f;
  const int64_t end = begin + count;
  for (int64_t i = begin & ~int64_t(1); i < end; i += 2) {
    uint64_t state = key + static_cast<uint64_t>(i / 2) * 0x9e3779b97f4a7c15ull;
    const uint64_t r = splitmix64_next(state);
    const float u1 = (static_cast<float>(r >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
    const float u2 = static_cast<float>(r & 0xffffffffu) * kInv32;                 // [0, 1]
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float angle = kTwoPi * u2;
    if (i >= begin) out[i - begin] = round_to(dtype, offset + scale * radius * std::cos(angle));
    if (i + 1 < end) out[i + 1 - begin] = round_to(dtype, offset + scale * radius * std::sin(angle));
  }
}

}  // namespace servelab
