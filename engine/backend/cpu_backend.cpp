#include "engine/backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/backend/cpu_attention.h"
#include "engine/backend/cpu_gemm.h"
#include "engine/backend/sampler.h"
#include "engine/backend/step_input.h"
#include "engine/model/fp8.h"

namespace servelab {
namespace {

/// Rows of one entry per attention item: enough to amortize gathering the keys, few enough
/// that a long prefill still splits across threads.
constexpr int kRowsPerChunk = 32;

/// Grows v to at least n elements; never shrinks, so steady-state steps allocate nothing.
template <typename T>
T* ensure(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void rms_norm_row(const float* x, const float* weight, int d, float eps, float* y) {
  double ss = 0.0;
  for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
  for (int i = 0; i < d; ++i) y[i] = x[i] * scale * weight[i];
}

void check_size(const std::string& name, const std::vector<float>& v, int64_t expected) {
  if (static_cast<int64_t>(v.size()) != expected)
    throw std::invalid_argument("CpuBackend: tensor " + name + " has " + std::to_string(v.size()) +
                                " values, the config needs " + std::to_string(expected));
}

void check_weights(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  c.validate();
  const int64_t d = c.hidden_size, dq = int64_t(c.n_heads) * c.head_dim(), dkv = c.kv_dim();
  const int64_t ffn = c.intermediate_size, vocab = c.vocab_size;
  check_size("model.embed_tokens.weight", w.embedding, vocab * d);
  if (static_cast<int>(w.layers.size()) != c.n_layers)
    throw std::invalid_argument("CpuBackend: weights have " + std::to_string(w.layers.size()) +
                                " layers, the config says n_layers = " + std::to_string(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    check_size(p + "input_layernorm.weight", L.attn_norm, d);
    check_size(p + "self_attn.q_proj.weight", L.wq, dq * d);
    check_size(p + "self_attn.k_proj.weight", L.wk, dkv * d);
    check_size(p + "self_attn.v_proj.weight", L.wv, dkv * d);
    if (c.attention_bias || !L.bq.empty()) {
      check_size(p + "self_attn.q_proj.bias", L.bq, dq);
      check_size(p + "self_attn.k_proj.bias", L.bk, dkv);
      check_size(p + "self_attn.v_proj.bias", L.bv, dkv);
    }
    check_size(p + "self_attn.o_proj.weight", L.wo, d * dq);
    check_size(p + "post_attention_layernorm.weight", L.ffn_norm, d);
    check_size(p + "mlp.gate_proj.weight", L.w_gate, ffn * d);
    check_size(p + "mlp.up_proj.weight", L.w_up, ffn * d);
    check_size(p + "mlp.down_proj.weight", L.w_down, d * ffn);
  }
  check_size("model.norm.weight", w.final_norm, d);
  check_size(w.lm_head.empty() ? "model.embed_tokens.weight (tied lm_head)" : "lm_head.weight",
             w.output_matrix(), vocab * d);
}

}  // namespace

void CpuBackendOptions::validate() const {
  if (n_threads < 0 || n_threads > 1024)
    throw std::invalid_argument("cpu.n_threads (" + std::to_string(n_threads) +
                                ") must be in [0, 1024] (0 = all hardware threads)");
}

namespace {
/// Rows [row_begin, row_end) of one entry: an attention work item with each kv head.
struct AttentionChunk {
  int row_begin = 0;
  int row_end = 0;
};
}  // namespace

/// Per-step buffers. Real rows come first in entry order, padding rows after them.
struct CpuBackend::Scratch {
  const Step* step = nullptr;  // the step being run (its flat input)
  int n_real = 0;  // T: tokens of the entries
  int n_rows = 0;  // R = T + padding
  std::vector<int> row_pos;        // [T] absolute position
  std::vector<int> row_entry;      // [T] entry index
  std::vector<int64_t> row_slot;   // [T] arena slot of the row's own position
  std::vector<int64_t> ctx_begin;  // [n_entries] offset into ctx_slots
  std::vector<int64_t> ctx_slots;  // per entry: slots of positions [0, n_computed + n_new)
  std::vector<int> sample_rows;    // [R] distinct rows drawn from, in order of first draw
  std::vector<int> draw_logit_row; // [n_draws] index into sample_rows of each draw
  std::vector<float> masked;       // one masked logits row
  std::vector<uint32_t> late_masks;  // the step's late token masks (Step::fill_masks)
  int max_ctx = 0;
  int64_t attention_work = 0;      // Σ (pos + 1) over rows: sizes the thread split

  std::vector<float> x;      // [R, d] residual stream
  std::vector<float> xn;     // [R, d] normalized
  std::vector<float> q;      // [R, n_heads * head_dim]
  std::vector<float> k, v;   // [R, kv_dim]
  std::vector<float> attn;   // [R, n_heads * head_dim]; padding rows stay zero
  std::vector<float> gate;   // [R, ffn]
  std::vector<float> up;     // [R, ffn]
  std::vector<float> xs;     // [S, d]
  std::vector<float> logits; // [S, vocab]
  std::vector<AttentionChunk> chunks;  // attention work: runs of one entry's rows
  std::vector<std::vector<float>> scores;  // per worker: [heads per kv head, max_ctx]
  std::vector<std::vector<float>> keys_t;  // per worker: [head_dim, max_ctx] gathered keys
  std::vector<std::vector<float>> kv_deq;  // per worker, fp8 cache: [2, max_ctx, head_dim] K and V read back
  std::vector<int64_t> iota;               // fp8 cache: 0, 1, ... max_ctx - 1 (slots of kv_deq)
};

CpuBackend::CpuBackend(std::shared_ptr<const ModelWeights> weights, CpuBackendOptions options)
    : weights_((options.validate(), std::move(weights))),
      pool_(options.n_threads > 0 ? options.n_threads
                                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
      gemm_path_(options.gemm),
      kv_cache_dtype_(options.kv_cache_dtype),
      scratch_(std::make_unique<Scratch>()) {
  if (!weights_) throw std::invalid_argument("CpuBackend: no weights");
  check_weights(*weights_);
  row_bytes_ = kv_cache_spec().row_bytes();
  // One pool does all the work: OpenBLAS runs single-threaded inside its items. (Process-wide:
  // other backends in the process split their own work the same way.)
  configure_openblas();
  scratch_->scores.resize(pool_.n_threads());
  scratch_->keys_t.resize(pool_.n_threads());
  scratch_->kv_deq.resize(pool_.n_threads());
}

CpuBackend::CpuBackend(ModelWeights&& weights, CpuBackendOptions options)
    : CpuBackend(std::make_shared<const ModelWeights>(std::move(weights)), options) {}

CpuBackend::~CpuBackend() = default;

namespace {
/// out[p] = the fp8 row of slots[p], dequantized: [n, head_dim].
void read_fp8_rows(const uint8_t* plane, const int64_t* slots, int n, int head_dim, int64_t row_bytes, float* out) {
  for (int p = 0; p < n; ++p) {
    const uint8_t* row = plane + slots[p] * row_bytes;
    float scale;
    std::memcpy(&scale, row + head_dim, sizeof scale);
    for (int i = 0; i < head_dim; ++i) out[size_t(p) * head_dim + i] = fp8_e4m3_to_f32(row[i]) * scale;
  }
}
}  // namespace

void CpuBackend::quantize_activations(float* x, int cols, int input, int layer) {
  const QuantScheme& q = weights_->quant;
  if (q.activations == ActivationQuant::none) return;
  const float scale = q.activations == ActivationQuant::fp8_static ? q.input_scales.at(size_t(layer))[size_t(input)] : 0.0f;
  Scratch& s = *scratch_;
  if (q.activations == ActivationQuant::fp8_per_token)
    parallel_rows(s.n_rows, cols, [&](int, int b, int e) {
      fake_quant_fp8_rows(x + size_t(b) * cols, e - b, cols, ActivationQuant::fp8_per_token);
    });
  else
    fake_quant_fp8_rows(x, s.n_rows, cols, q.activations, scale);
}

void CpuBackend::check_slot(int64_t slot, const char* what) const {
  if (slot < 0 || slot >= n_slots_)
    throw std::out_of_range(std::string("CpuBackend: ") + what + " slot " + std::to_string(slot) +
                            " is outside the arena [0, " + std::to_string(n_slots_) + ")");
}

void CpuBackend::ensure_rope(int n_positions) {
  const int half = config().head_dim() / 2;
  if (static_cast<int64_t>(rope_cos_.size()) >= int64_t(n_positions) * half) return;
  int have = half ? static_cast<int>(rope_cos_.size() / half) : 0;
  int want = std::max(256, have * 2);
  while (want < n_positions) want *= 2;
  rope_cos_.resize(size_t(want) * half);
  rope_sin_.resize(size_t(want) * half);
  const std::vector<double> inv_freq = rope_inv_freq(config());  // rope_scaling applied
  for (int i = 0; i < half; ++i) {
    for (int pos = have; pos < want; ++pos) {
      const double angle = pos * inv_freq[i];
      rope_cos_[size_t(pos) * half + i] = static_cast<float>(std::cos(angle));
      rope_sin_[size_t(pos) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void CpuBackend::plan_rows(const Step& step) {
  if (n_slots_ == 0) throw std::logic_error("CpuBackend::execute: init_kv() was not called");
  if (step.n_padding < 0)
    throw std::invalid_argument("step.n_padding (" + std::to_string(step.n_padding) + ") must be >= 0");
  step.in.validate();
  Scratch& s = *scratch_;
  s.step = &step;
  const kernels::StepInput& in = step.in;
  const int vocab = config().vocab_size;
  for (int i = 0; i < in.n_tokens(); ++i)
    if (in.token_ids[i] < 0 || in.token_ids[i] >= vocab)
      throw std::invalid_argument("step row " + std::to_string(i) + ": token " + std::to_string(in.token_ids[i]) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (in.has_masks() && in.mask_words_per_row != (vocab + 31) / 32)
    throw std::invalid_argument("step.in.mask_words_per_row (" + std::to_string(in.mask_words_per_row) +
                                ") must be (vocab + 31) / 32 = " + std::to_string((vocab + 31) / 32));
  const kernels::KvAddressing addressing = in.addressing();
  const int n_real = in.n_tokens();
  s.n_real = n_real;
  s.n_rows = n_real + step.n_padding;
  s.row_pos.resize(n_real);
  s.row_entry.resize(n_real);
  s.row_slot.resize(n_real);
  s.ctx_begin.resize(in.n_seqs());
  s.ctx_slots.clear();
  s.sample_rows.clear();
  s.chunks.clear();
  s.max_ctx = 0;
  s.attention_work = 0;
  const int d = config().hidden_size;
  float* x = ensure(s.x, size_t(s.n_rows) * d);

  for (int e = 0; e < in.n_seqs(); ++e) {
    const int end = in.context_lens[e];
    const int row_begin = in.query_start[e], row_end = in.query_start[e + 1];
    s.ctx_begin[e] = static_cast<int64_t>(s.ctx_slots.size());
    for (int pos = 0; pos < end; ++pos) {
      const int64_t slot = addressing.slot(e, pos);
      check_slot(slot, "the step input addresses");
      s.ctx_slots.push_back(slot);
    }
    for (int row = row_begin; row < row_end; ++row) {
      const int pos = in.positions[row];
      s.row_pos[row] = pos;
      s.row_entry[row] = e;
      s.row_slot[row] = in.slot_mapping[row];
      std::memcpy(x + size_t(row) * d, weights_->embedding.data() + size_t(in.token_ids[row]) * d, sizeof(float) * d);
      s.attention_work += pos + 1;
    }
    for (int b = row_begin; b < row_end; b += kRowsPerChunk)
      s.chunks.push_back({b, std::min(b + kRowsPerChunk, row_end)});
    s.max_ctx = std::max(s.max_ctx, end);
  }
  // Logits once per distinct drawn row (n parallel samples share theirs).
  s.draw_logit_row.clear();
  for (int i = 0; i < in.n_samples(); ++i) {
    const int row = in.sample_rows[i];
    if (s.sample_rows.empty() || s.sample_rows.back() != row) s.sample_rows.push_back(row);
    s.draw_logit_row.push_back(static_cast<int>(s.sample_rows.size()) - 1);
  }
  std::fill(x + size_t(n_real) * d, x + size_t(s.n_rows) * d, 0.0f);
  ensure_rope(s.max_ctx);

  const int dq = config().n_heads * config().head_dim();
  float* attn = ensure(s.attn, size_t(s.n_rows) * dq);
  std::fill(attn + size_t(n_real) * dq, attn + size_t(s.n_rows) * dq, 0.0f);
  ensure(s.xn, size_t(s.n_rows) * d);
  ensure(s.q, size_t(s.n_rows) * dq);
  ensure(s.k, size_t(s.n_rows) * config().kv_dim());
  ensure(s.v, size_t(s.n_rows) * config().kv_dim());
  ensure(s.gate, size_t(s.n_rows) * config().intermediate_size);
  ensure(s.up, size_t(s.n_rows) * config().intermediate_size);
  const int group = config().n_heads / config().n_kv_heads;
  for (auto& sc : s.scores) ensure(sc, size_t(group) * s.max_ctx);
  for (auto& kt : s.keys_t) ensure(kt, size_t(config().head_dim()) * s.max_ctx);
  if (kv_cache_dtype_ == KvCacheDType::fp8) {
    for (auto& kv : s.kv_deq) ensure(kv, 2 * size_t(config().head_dim()) * s.max_ctx);
    for (int64_t i = int64_t(s.iota.size()); i < s.max_ctx; ++i) s.iota.push_back(i);
  }
}

void CpuBackend::parallel_rows(int n_rows, int64_t cost_per_row, const RowBody& body) {
  const int64_t work = int64_t(n_rows) * cost_per_row;
  const int n_threads = pool_.n_threads();
  if (n_threads == 1 || work < kMinParallelMacs) {
    body(0, 0, n_rows);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, n_rows / (4 * n_threads));
  pool_.parallel_for(n_rows, grain, [&](int worker, int64_t b, int64_t e) {
    body(worker, static_cast<int>(b), static_cast<int>(e));
  });
}

void CpuBackend::attention(int layer) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config();
  const int hd = c.head_dim(), n_kv = c.n_kv_heads, group = c.n_heads / c.n_kv_heads;
  const int dq = c.n_heads * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Item = (chunk of one entry's rows, kv head): the chunk's keys are gathered once, then each
  // row attends over its causal prefix of them.
  auto one_item = [&](int worker, int64_t item) {
    const AttentionChunk& chunk = s.chunks[item / n_kv];
    const int g = static_cast<int>(item % n_kv);
    const int n_gathered = s.row_pos[chunk.row_end - 1] + 1;
    const int64_t* slots = s.ctx_slots.data() + s.ctx_begin[s.row_entry[chunk.row_begin]];
    AttentionGroupArgs a;
    if (kv_cache_dtype_ == KvCacheDType::fp8) {  // dequantize the chunk's context, then attend over it in order
      float* deq = s.kv_deq[worker].data();
      read_fp8_rows(plane_bytes(layer, kKeys, g), slots, n_gathered, hd, row_bytes_, deq);
      read_fp8_rows(plane_bytes(layer, kValues, g), slots, n_gathered, hd, row_bytes_, deq + size_t(n_gathered) * hd);
      slots = s.iota.data();
    }
    a.keys = kv_cache_dtype_ == KvCacheDType::fp8 ? s.kv_deq[worker].data() : kv_plane(layer, kKeys, g);
    if (chunk.row_end - chunk.row_begin > 1) {  // several rows share one gather; a lone row reads in place
      float* kt = s.keys_t[worker].data();
      gather_keys_transposed(a.keys, slots, n_gathered, hd, kt);
      a.kt = kt;
      a.kt_stride = n_gathered;
    }
    a.values = kv_cache_dtype_ == KvCacheDType::fp8 ? s.kv_deq[worker].data() + size_t(n_gathered) * hd
                                                     : kv_plane(layer, kValues, g);
    a.slots = slots;
    a.group = group;
    a.head_dim = hd;
    a.scale = scale;
    a.scores = s.scores[worker].data();
    for (int r = chunk.row_begin; r < chunk.row_end; ++r) {
      a.q = s.q.data() + size_t(r) * dq + size_t(g) * group * hd;
      a.out = s.attn.data() + size_t(r) * dq + size_t(g) * group * hd;
      a.n_ctx = s.row_pos[r] + 1;
      attend_group(a);
    }
  };

  const int64_t n_items = static_cast<int64_t>(s.chunks.size()) * n_kv;
  const int64_t work = s.attention_work * c.n_heads * hd * 2;
  if (pool_.n_threads() == 1 || work < kMinParallelMacs) {
    for (int64_t i = 0; i < n_items; ++i) one_item(0, i);
    return;
  }
  pool_.parallel_for(n_items, 1, [&](int worker, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) one_item(worker, i);
  });
}

void CpuBackend::norm_rows(const std::vector<float>& weight) {
  Scratch& s = *scratch_;
  const int d = config().hidden_size;
  const float eps = config().rms_eps;
  parallel_rows(s.n_rows, d, [&](int, int b, int e) {
    for (int r = b; r < e; ++r)
      rms_norm_row(s.x.data() + size_t(r) * d, weight.data(), d, eps, s.xn.data() + size_t(r) * d);
  });
}

void CpuBackend::qkv_rope_store(int layer) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config();
  const LayerWeights& L = weights_->layers[layer];
  const int d = c.hidden_size, hd = c.head_dim(), half = hd / 2;
  const int dq = c.n_heads * hd, dkv = c.kv_dim();
  const int R = s.n_rows, T = s.n_real;
  enum Kind { kQ, kK, kV };
  struct Part {
    const std::vector<float>* w;
    const std::vector<float>* bias;
    float* out;
    int width;
    GemmTiling tiling;
  };
  // Q, K and V as one job: items are runs of whole heads, so that each item adds its bias,
  // rotates its heads and writes K/V to the arena right after its projection.
  const Part parts[3] = {
      {&L.wq, &L.bq, s.q.data(), dq, GemmTiling::make(R, d, dq, hd, pool_.n_threads())},
      {&L.wk, &L.bk, s.k.data(), dkv, GemmTiling::make(R, d, dkv, hd, pool_.n_threads())},
      {&L.wv, &L.bv, s.v.data(), dkv, GemmTiling::make(R, d, dkv, hd, pool_.n_threads())},
  };
  const LoraTarget lora_target[3] = {LoraTarget::q, LoraTarget::k, LoraTarget::v};
  if (lora_.active())
    for (LoraTarget t : lora_target) lora_.shrink(layer, t, s.xn.data());
  const int64_t n_q = parts[kQ].tiling.n_items(), n_k = parts[kK].tiling.n_items();
  const int64_t n_items = n_q + n_k + parts[kV].tiling.n_items();
  run_items(pool_, n_items, int64_t(R) * d * (dq + 2 * dkv), [&](int, int64_t item) {
    const Kind kind = item < n_q ? kQ : item < n_q + n_k ? kK : kV;
    const Part& part = parts[kind];
    int r0, r1, c0, c1;
    part.tiling.item(item - (kind == kQ ? 0 : kind == kK ? n_q : n_q + n_k), r0, r1, c0, c1);
    float* out = part.out + size_t(r0) * part.width + c0;
    gemm_nt(s.xn.data() + size_t(r0) * d, r1 - r0, d, part.w->data() + size_t(c0) * d, c1 - c0, out,
            part.width, false, gemm_path_);
    if (lora_.active()) lora_.expand(layer, lora_target[kind], r0, r1, c0, c1, part.out, part.width);
    for (int r = r0; r < r1; ++r) {
      float* row = part.out + size_t(r) * part.width;
      if (!part.bias->empty())
        for (int i = c0; i < c1; ++i) row[i] += (*part.bias)[i];
      if (r >= T) continue;  // padding rows cost their projection, nothing more
      const float* cs = rope_cos_.data() + size_t(s.row_pos[r]) * half;
      const float* sn = rope_sin_.data() + size_t(s.row_pos[r]) * half;
      for (int h0 = c0; h0 < c1; h0 += hd) {
        float* head = row + h0;
        if (kind != kV)
          for (int i = 0; i < half; ++i) {  // rotate-half RoPE
            const float a = head[i], b = head[i + half];
            head[i] = a * cs[i] - b * sn[i];
            head[i + half] = b * cs[i] + a * sn[i];
          }
        if (kind != kQ) store_kv(layer, kind == kK ? kKeys : kValues, h0 / hd, s.row_slot[r], head);
      }
    }
  });
}

void CpuBackend::gate_up_silu(int layer) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config();
  const LayerWeights& L = weights_->layers[layer];
  const int d = c.hidden_size, ffn = c.intermediate_size, R = s.n_rows;
  // Gate and up as one job: each item projects the same columns of both, then applies SwiGLU to
  // them while they are in cache.
  const GemmTiling t = GemmTiling::make(R, d, ffn, 16, pool_.n_threads());
  if (lora_.active())
    for (LoraTarget lt : {LoraTarget::gate, LoraTarget::up}) lora_.shrink(layer, lt, s.xn.data());
  run_items(pool_, t.n_items(), 2 * int64_t(R) * d * ffn, [&](int, int64_t item) {
    int r0, r1, c0, c1;
    t.item(item, r0, r1, c0, c1);
    const float* in = s.xn.data() + size_t(r0) * d;
    float* gate = s.gate.data() + size_t(r0) * ffn + c0;
    float* up = s.up.data() + size_t(r0) * ffn + c0;
    gemm_nt(in, r1 - r0, d, L.w_gate.data() + size_t(c0) * d, c1 - c0, gate, ffn, false, gemm_path_);
    gemm_nt(in, r1 - r0, d, L.w_up.data() + size_t(c0) * d, c1 - c0, up, ffn, false, gemm_path_);
    if (lora_.active()) {
      lora_.expand(layer, LoraTarget::gate, r0, r1, c0, c1, s.gate.data(), ffn);
      lora_.expand(layer, LoraTarget::up, r0, r1, c0, c1, s.up.data(), ffn);
    }
    for (int r = 0; r < r1 - r0; ++r)
      for (int j = 0; j < c1 - c0; ++j) {
        const float g = gate[size_t(r) * ffn + j];
        gate[size_t(r) * ffn + j] = g / (1.0f + std::exp(-g)) * up[size_t(r) * ffn + j];
      }
  });
}

void CpuBackend::run_layer(int layer) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config();
  const LayerWeights& L = weights_->layers[layer];
  const int d = c.hidden_size, dq = c.n_heads * c.head_dim(), ffn = c.intermediate_size;
  norm_rows(L.attn_norm);
  quantize_activations(s.xn.data(), d, kInputQkv, layer);  // FP8 W8A8: each Linear's input (no-op otherwise)
  qkv_rope_store(layer);
  attention(layer);
  quantize_activations(s.attn.data(), dq, kInputO, layer);
  parallel_gemm_nt(pool_, s.attn.data(), s.n_rows, dq, L.wo.data(), d, s.x.data(), true, gemm_path_);
  if (lora_.active()) {  // the residual takes the adapter's delta of o_proj (and of down_proj below)
    lora_.shrink(layer, LoraTarget::o, s.attn.data());
    lora_.expand(layer, LoraTarget::o, 0, s.n_real, 0, d, s.x.data(), d);
  }
  norm_rows(L.ffn_norm);
  quantize_activations(s.xn.data(), d, kInputGateUp, layer);
  gate_up_silu(layer);
  quantize_activations(s.gate.data(), ffn, kInputDown, layer);
  parallel_gemm_nt(pool_, s.gate.data(), s.n_rows, ffn, L.w_down.data(), d, s.x.data(), true, gemm_path_);
  if (lora_.active()) {
    lora_.shrink(layer, LoraTarget::down, s.gate.data());
    lora_.expand(layer, LoraTarget::down, 0, s.n_real, 0, d, s.x.data(), d);
  }
}

std::span<const float> CpuBackend::logits(const Step& step) {
  plan_rows(step);
  lora_.plan(step.in);
  Scratch& s = *scratch_;
  const ModelConfig& c = config();
  if (s.n_rows == 0) return {};
  for (int l = 0; l < c.n_layers; ++l) run_layer(l);

  const int d = c.hidden_size, vocab = c.vocab_size;
  const int n_sampled = static_cast<int>(s.sample_rows.size());
  if (n_sampled == 0) return {};
  float* xs = ensure(s.xs, size_t(n_sampled) * d);
  float* logits = ensure(s.logits, size_t(n_sampled) * vocab);
  for (int i = 0; i < n_sampled; ++i)
    rms_norm_row(s.x.data() + size_t(s.sample_rows[i]) * d, weights_->final_norm.data(), d, c.rms_eps,
                 xs + size_t(i) * d);
  parallel_gemm_nt(pool_, xs, n_sampled, d, weights_->output_matrix().data(), vocab, logits, false, gemm_path_);
  return {logits, size_t(n_sampled) * vocab};
}

StepOutput CpuBackend::execute(const Step& step) {
  const std::span<const float> all = logits(step);
  const kernels::StepInput& in = step.in;
  const size_t vocab = config().vocab_size;
  Scratch& s = *scratch_;
  StepOutput out;
  // Late masks are filled here, after the forward and before the draws: on the cpu backend the
  // forward already uses every core (the thread pool), so the filler runs after it, overlapping
  // nothing; the tokens are the same as with the masks filled before the step.
  const uint32_t* masks = in.n_samples() > 0 ? step.host_masks(s.late_masks) : nullptr;
  for (int i = 0; i < in.n_samples(); ++i) {
    std::span<const float> row = all.subspan(size_t(s.draw_logit_row[i]) * vocab, vocab);
    if (in.mask_index[i] >= 0) {
      row = apply_token_mask(row, masks + size_t(in.mask_index[i]) * in.mask_words_per_row, s.masked);
    }
    SamplingParams p;
    p.temperature = in.temperature[i];
    p.top_k = in.top_k[i];
    p.top_p = in.top_p[i];
    p.seed = in.seed[i];
    const int d = in.draft_dist[i];
    if (d >= 0 && (size_t(d) + 1) * vocab > in.draft_probs.size())
      throw std::invalid_argument("step.in.draft_dist[" + std::to_string(i) + "] = " + std::to_string(d) +
                                  " is past draft_probs' " + std::to_string(in.draft_probs.size() / vocab) + " rows");
    const TokenId t = d < 0 ? sample_token(row, p, in.seq_key[i], in.sample_position[i])
                            : verify_draft(row, p, in.seq_key[i], in.sample_position[i], in.draft_token[i],
                                           std::span<const float>(in.draft_probs).subspan(size_t(d) * vocab, vocab));
    out.tokens.push_back(t);
    if (step.want_logprobs) out.logprobs.push_back(token_logprob(all.subspan(size_t(s.draw_logit_row[i]) * vocab, vocab), t));
  }
  return out;
}

void CpuBackend::load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) {
  lora_.load(slot, std::move(adapter), config());
}

BackendCaps CpuBackend::caps() const {
  BackendCaps c;
  c.logprobs = true;
  c.draft_probs = true;
  c.lora = true;
  c.weight_dtypes = {DType::f32};
  c.kv_dtypes = {DType::f32};
  c.kv_cache_dtypes = {KvCacheDType::auto_dtype, KvCacheDType::fp8};  // fp8 stored for real (cpu_backend_kv.cpp)
  return c;
}

std::string CpuBackend::device_description() const {
  std::string name = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) name = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  return name + ", " + std::to_string(n_threads()) + " threads of " +
         std::to_string(std::thread::hardware_concurrency()) + ", OpenBLAS " + blas_core();
}

}  // namespace servelab
