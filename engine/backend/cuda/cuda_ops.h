#pragma once
// The ops the CUDA forward is written over (cuda_forward.cpp), so the model is written once:
// fusion and tensor parallelism are properties of the ops, not branches in the forward.
// - Linear: y = x · Wᵀ, split across tensor-parallel ranks by output features (column: nothing
//   to communicate) or input features (row: partial sums, all-reduced inside the op, or by the
//   ResidualNorm that takes y next when `all_reduce_later`). Quantized
//   weights (Linear::quant, quant_linear.h: FP8 or INT4, dispatched on the row count) and the LoRA
//   hook (LoraHook: its shrink beside the product, its expand after it, or beside it into the
//   residual or into a delta the next kernel adds) plug in here.
// - GateUpSilu: the gated MLP's first half, one fused launch where the product kernel can.
// - ResidualNorm: h += delta, then xn = rms_norm(h) · w (one kernel fused, two otherwise); with
//   `all_reduce_delta` under tensor parallelism delta is a row-parallel product's partial sum,
//   all-reduced first: in the same kernel when our lamport all-reduce takes it (tp_comm.h).
// - Attention: RoPE and the K/V write into a KvCacheSpec arena (fused or not), then decode or
//   prefill attention over the step's KV addressing.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/backend/cuda/quant_linear.h"
#include "engine/backend/cuda/tp_comm.h"
#include "kernels/attention.h"
#include "kernels/attention_decode_rows.h"
#include "kernels/gemm.h"
#include "kernels/kv_fp8.h"
#include "kernels/cuda_check.h"
#include "kernels/lora_act.h"
#include "kernels/lora_fused_gemm.h"
#include "kernels/lora_gemm.h"
#include "kernels/lora_sgmv.h"
#include "kernels/ops.h"

namespace servelab::cuda {

/// What every op of one forward shares.
struct OpContext {
  kernels::Gemm* gemm = nullptr;
  kernels::ScalarType dt = kernels::ScalarType::bf16;
  cudaStream_t stream = nullptr;
  bool fusion = true;              ///< fused kernels (RoPE+KV write, residual+norm, SiLU·mul)
  bool fuse_gate_up_silu = true;   ///< ... and the gate/up product with SiLU·mul, where it can
  bool fuse_qkv_rope = true;       ///< ... and the q|k|v product with RoPE and the K/V write, where it can
  TpRank* tp = nullptr;            ///< tensor parallel: this rank's communicator; null on one GPU
  QuantLinearRunner* quant = nullptr;  ///< the quantized Linears' scratch (quant_linear.h); null in bf16/f16
};

/// Multi-LoRA on a product (kernels/lora_sgmv.h): y[rows, ld_y] += scale · (x · Aᵀ) · Bᵀ for each
/// row's adapter slot, the rows grouped by slot once a step (`plan`, kernels::lora_plan). One
/// shrink and one expand per product (a fused q|k|v or gate|up runs its linears as segments).
/// The shrink reads only the product's input, so with a side stream it runs beside the product
/// (forked before it, joined before the expand: in a CUDA graph, two branches); the expand adds
/// into the product's output. With `residual` (o_proj, down_proj: products whose output the next
/// op adds into the residual stream) the expand adds into the residual instead, on the side
/// stream too, and the join follows the product: the residual is read by nothing between the
/// last norm and the next, so neither launch is on the step's critical path. With `delta`
/// (q|k|v, gate|up) the expand writes the delta alone beside the product too, and the kernel
/// after the product adds it (below). Ops hold a pointer
/// to one only when some row of the step has an adapter: a step without adapters launches
/// nothing. One GPU only (under tensor parallelism the row-parallel delta would be summed once
/// per rank).
struct LoraHook {
  kernels::LoraPool pool;             ///< this layer's group of every slot (cuda_lora.h)
  kernels::LoraPlan plan;             ///< the step's rows by slot (built before the first layer)
  float* partial = nullptr;           ///< the shrink's fp32 partial sums (kernels::lora_partial_floats)
  cudaStream_t side = nullptr;        ///< the shrink's stream beside the product; null: in line
  cudaEvent_t fork = nullptr, join = nullptr;  ///< with `side`
  void* residual = nullptr;           ///< [rows, pool.n_out]: the delta goes here, not into y; null: into y
  /// Eager steps (LoraSgmvConfig::gemm_min_rows): runs of rows of one adapter whose shrink and
  /// expand are GEMMs on the tensor cores (kernels/lora_gemm.h), beside and after the product as
  /// the grouped kernels'; the plan then holds only the other rows, and `grouped` says whether
  /// any are left. Null: no runs (every adapter row in the plan).
  const std::vector<kernels::LoraRun>* runs = nullptr;
  kernels::LoraGemm* gemm = nullptr;
  const float* run_scale = nullptr;   ///< host: each slot's scale (the shrink's alpha)
  void* xa = nullptr;                 ///< 16-bit [rows, pool.total_rank()]: the runs' shrink output
  bool grouped = true;                ///< the grouped kernels run (the plan has rows)
  /// Rows the grouped kernels size their grids and partial sums for, at least the plan's (an
  /// eager step counts its adapter rows left to them on the host); 0: the step's rows.
  int plan_rows = 0;
  int grouped_rows(int rows) const { return plan_rows > 0 ? plan_rows : rows; }
  /// With `side`: SMs cuBLASLt's product leaves to the side stream (Gemm::set_sm_reserve) and the
  /// SMs the runs' shrinks are asked for (LoraGemm::set_shrink_sms); 0: every SM. The forward
  /// sets them per step (LoraSgmvConfig::product_sm_reserve, sm_reserve_max_run_rows).
  int product_sm_reserve = 0;
  int run_shrink_sms = 0;
  /// gate|up with LoraSgmvConfig::gate_up_beside, q|k|v with qkv_beside (in eager steps with
  /// eager_beside, the runs' expands too): the expand writes the delta alone into `delta`
  /// [rows, pool.n_out] on the side stream too, and the kernel after the product adds it for the
  /// rows whose `row_slot` is >= 0 (GateUpSilu: lora_silu_mul; Attention: rope_kv_write). Null:
  /// the expand follows the product.
  void* delta = nullptr;
  const int32_t* row_slot = nullptr;
  /// The same two with LoraSgmvConfig::*_in_consumer: no expand launch at all; the shrink
  /// finishes each row's xa into `xa_rows` (fp32 [rows, pool.total_rank()]) and the kernel after
  /// the product computes the delta from it (kernels/lora_delta.h). Null: not so.
  float* xa_rows = nullptr;
  /// LoraSgmvConfig::in_product: the product (our gemv: the op runs it so) runs the shrink in its
  /// first blocks, finishing the rows' xa (`xa_rows`, read with `row_slot`), and adds each
  /// output's delta in its epilogue. No LoRA launch, no side stream.
  bool in_product = false;
  /// With `delta` (LoraSgmvConfig::mixed_grouped_beside): only the grouped rows' delta goes into
  /// `delta` (row_slot: the plan's rows); the runs' expand still follows the product, into y.
  bool runs_expand_after = false;
  /// The grouped rows' side work before the runs' (their expand right after their shrink, with
  /// PDL), then the runs' shrinks and, into the residual or `delta`, their expands.
  bool grouped_first = false;
  /// gate|up in eager steps (LoraSgmvConfig::gate_up_in_silu_rows): the runs' expand is left
  /// to SiLU·mul, which computes their rows' delta from `xa` (kernels::lora_silu_mul_runs); the
  /// grouped rows' expand still follows the product.
  bool runs_in_consumer = false;
  /// LoraSgmvConfig::fused_product_*_rows: the product is kernels::LoraFusedGemm over every row, the
  /// runs' deltas inside it (their tiles: `fused_tiles`); the hook runs only the grouped rows'.
  kernels::LoraFusedGemm* fused = nullptr;
  const kernels::LoraFusedTiles* fused_tiles = nullptr;
  int fused_x_rows = 0;  ///< rows the product's input buffer holds (the backend's rows_capacity)
  kernels::LoraRunsDelta runs_delta() const {
    kernels::LoraRunsDelta d;
    d.xa = xa;
    d.b = pool.b;
    d.max_rank = pool.max_rank;
    d.n_runs = int(runs->size());
    for (int q = 0; q < d.n_runs; ++q) {
      const kernels::LoraRun& r = (*runs)[size_t(q)];
      d.first[q] = r.first;
      d.count[q] = r.count;
      d.slot[q] = r.slot;
    }
    return d;
  }
  int gemv_launch = 0;  ///< in_product: the step's how-manieth such product (its count: plan.gemv_done)
  kernels::LoraInGemv product_lora(int rows) const {
    return {kernels::lora_xa_delta(pool, xa_rows, row_slot),
            kernels::lora_gemv_shrink(plan, rows, pool, partial, xa_rows, gemv_launch)};
  }
  /// Before the product: the shrink of x (and with `residual` the expand into it), on the side
  /// stream once everything before is done (in_product: nothing, the product runs it).
  void before_product(const OpContext& c, const void* x, int rows) const {
    if (in_product || (fused && !grouped)) return;
    cudaStream_t s = c.stream;
    if (side) {
      CUDA_CHECK(cudaEventRecord(fork, c.stream));
      CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
      s = side;
    }
    const bool run_shrinks = runs && !fused && !(plan.config.skip_runs & 1);
    if (run_shrinks) gemm->set_shrink_sms(side ? run_shrink_sms : 0);
    const bool run_expands = runs && !fused && !(plan.config.skip_runs & 2);
    void* const beside = residual ? residual : delta;  // where the expands beside the product write
    if (grouped_first) {
      if (grouped) grouped_beside(c, x, rows, s, beside, plan.config.expand_pdl);
      if (run_shrinks)
        for (const kernels::LoraRun& r : *runs) gemm->shrink(c.dt, x, pool, r, run_scale[r.slot], xa, s);
      if (run_expands && beside && !(delta && runs_expand_after))
        for (const kernels::LoraRun& r : *runs) gemm->expand(c.dt, xa, pool, r, beside, pool.n_out, 0, s, !delta);
    } else {
      if (run_shrinks)
        for (const kernels::LoraRun& r : *runs) gemm->shrink(c.dt, x, pool, r, run_scale[r.slot], xa, s);
      // PDL (LoraSgmvConfig::expand_pdl) only where the expand follows the grouped shrink directly
      // (no tensor-core runs between them): nothing else writes the residual or the delta meanwhile.
      grouped_beside(c, x, rows, s, nullptr, false);
      const bool pdl = plan.config.expand_pdl && !runs;
      if (residual) expand(c, residual, pool.n_out, rows, s, pdl);
      if (delta && run_expands)
        for (const kernels::LoraRun& r : *runs) gemm->expand(c.dt, xa, pool, r, delta, pool.n_out, 0, s, false);
      if (delta) grouped_expand(c, rows, delta, pool.n_out, s, false, pdl);
    }
    if (side) CUDA_CHECK(cudaEventRecord(join, side));
  }
  /// The grouped rows' shrink, and with `into` (the residual or `delta`) their expand after it.
  void grouped_beside(const OpContext& c, const void* x, int rows, cudaStream_t s, void* into, bool pdl) const {
    if (!grouped) return;
    if (!(plan.config.skip_grouped & 1))
      kernels::lora_sgmv_shrink(c.dt, x, plan, grouped_rows(rows), pool, partial, s, xa_rows);
    if (into) grouped_expand(c, rows, into, pool.n_out, s, !delta, pdl);
  }
  void grouped_expand(const OpContext& c, int rows, void* y, int ld_y, cudaStream_t s, bool accumulate,
                      bool pdl) const {
    if (grouped && !(plan.config.skip_grouped & 2))
      kernels::lora_sgmv_expand(c.dt, partial, plan, grouped_rows(rows), pool, y, ld_y, 0, s, accumulate, pdl);
  }
  /// After the product: once the side stream is done, y += the deltas (unless they went into the
  /// residual or a scratch; with runs_expand_after the runs' into y).
  void after_product(const OpContext& c, void* y, int ld_y, int rows) const {
    if (in_product || (fused && !grouped)) return;  // the product added it
    if (side) CUDA_CHECK(cudaStreamWaitEvent(c.stream, join, 0));
    if (!residual && !xa_rows && (!delta || runs_expand_after)) expand(c, y, ld_y, rows, c.stream, false, !delta);
  }
  void expand(const OpContext& c, void* y, int ld_y, int rows, cudaStream_t s, bool pdl = false,
              bool with_grouped = true) const {
    if (runs && !runs_in_consumer && !fused && !(plan.config.skip_runs & 2))
      for (const kernels::LoraRun& r : *runs) gemm->expand(c.dt, xa, pool, r, y, ld_y, 0, s);
    if (with_grouped) grouped_expand(c, rows, y, ld_y, s, true, pdl);
  }
};

/// A product whose gemv runs the LoRA shrink and adds the delta in its epilogue
/// (LoraHook::in_product): y = x · wᵀ + the rows' deltas. The forward sets in_product only where gemv takes the
/// product; std::logic_error otherwise.
inline void run_product_with_lora(const OpContext& c, const LoraHook& lora, const void* x, const void* w, void* y,
                                  int rows, int out, int in) {
  if (!c.gemm->uses_gemv(c.dt, x, w, rows, out, in, true))
    throw std::logic_error("a LoRA delta in the product needs gemv's path (the forward checks it)");
  if (!c.gemm->run_gemv_lora(c.dt, x, w, y, rows, out, in, lora.product_lora(rows), c.stream))
    throw std::logic_error("a LoRA delta in the product needs gemv's path");
}

/// y = x · wᵀ for a 16-bit product: kernels::LoraFusedGemm with the hook's runs inside where the
/// hook says so (LoraHook::fused), else Gemm (cuBLASLt or our gemv by the rows).
inline void run_product(const OpContext& c, const LoraHook* lora, const void* x, const void* w, void* y, int rows,
                        int out, int in) {
  if (lora && lora->fused) {
    lora->fused->run(c.dt, x, w, y, rows, out, in, lora->pool, *lora->fused_tiles, c.stream, {}, lora->fused_x_rows);
    return;
  }
  // With LoRA work on the side stream, cuBLASLt's product may be asked to leave SMs to it
  // (LoraSgmvConfig::product_sm_reserve).
  const int reserve = lora && lora->side ? lora->product_sm_reserve : 0;
  if (reserve > 0) c.gemm->set_sm_reserve(reserve);
  c.gemm->run(c.dt, x, w, y, rows, out, in, false, c.stream);
  if (reserve > 0) c.gemm->set_sm_reserve(0);
}

struct Linear {
  enum class Split { none, column, row };
  const void* weight = nullptr;  ///< [out, in] row-major (this rank's share)
  int out = 0, in = 0;
  Split split = Split::none;
  const QuantWeight* quant = nullptr;  ///< quantized weights (quant_linear.h): used instead of `weight`
  const LoraHook* lora = nullptr;  ///< adapters' deltas added after the product; null: none this step
  /// Split::row: y is left a partial sum for the ResidualNorm after it (all_reduce_delta).
  bool all_reduce_later = false;
  void operator()(const OpContext& c, const void* x, void* y, int rows) const {
    // Under tensor parallelism a bf16 product the fused all-reduce + norm takes next may store its
    // rows into the peers' lamport buffers itself (tp_product_push): its all-reduce's push
    // overlaps the product.
    if (split == Split::row && c.tp && all_reduce_later && !quant && !lora && c.fusion &&
        tp_product_push(*c.tp, *c.gemm, x, weight, y, rows, out, in, c.stream))
      return;
    if (lora && lora->in_product && !quant) {
      run_product_with_lora(c, *lora, x, weight, y, rows, out, in);
      return;
    }
    if (lora) lora->before_product(c, x, rows);
    if (quant) c.quant->run(*quant, x, y, rows, *c.gemm, c.stream);
    else run_product(c, lora, x, weight, y, rows, out, in);
    if (lora) lora->after_product(c, y, out, rows);
    if (split == Split::row && c.tp && !all_reduce_later) tp_all_reduce(*c.tp, y, int64_t(rows) * out, c.stream);
  }
};

struct GateUpSilu {
  const void* weight = nullptr;  ///< [2 · ffn, in]: gate rows then up rows (column-parallel)
  int ffn = 0, in = 0;
  const QuantWeight* quant = nullptr;  ///< quantized [gate; up] (quant_linear.h): used instead of `weight`
  /// Adapters' gate|up deltas, added before SiLU·mul (so the product cannot fuse SiLU then).
  const LoraHook* lora = nullptr;
  /// act[rows, ffn] from x[rows, in]; gate_up[rows, 2 · ffn] is scratch for the unfused path.
  void operator()(const OpContext& c, const void* x, void* gate_up, void* act, int rows) const {
    if (!quant && !lora && c.fusion && c.fuse_gate_up_silu && c.gemm->fuses_gate_up_silu(c.dt, x, weight, rows, ffn, in)) {
      c.gemm->run_gate_up_silu(c.dt, x, weight, act, rows, ffn, in, c.stream);
      return;
    }
    if (quant && !lora && c.fusion && c.fuse_gate_up_silu && c.quant->run_gate_up_silu(*quant, x, act, rows, ffn, c.stream))
      return;
    if (lora && lora->in_product && !quant) {
      if (c.fusion && c.fuse_gate_up_silu && c.gemm->fuses_gate_up_silu(c.dt, x, weight, rows, ffn, in, true)) {
        const kernels::LoraInGemv d = lora->product_lora(rows);
        c.gemm->run_gate_up_silu(c.dt, x, weight, act, rows, ffn, in, c.stream, &d);
        return;
      }
      run_product_with_lora(c, *lora, x, weight, gate_up, rows, 2 * ffn, in);
      if (c.fusion) kernels::silu_mul(c.dt, gate_up, act, rows, ffn, c.stream);
      else kernels::silu_then_mul(c.dt, gate_up, act, rows, ffn, c.stream);
      return;
    }
    if (lora) lora->before_product(c, x, rows);
    if (quant) c.quant->run(*quant, x, gate_up, rows, *c.gemm, c.stream);
    else run_product(c, lora, x, weight, gate_up, rows, 2 * ffn, in);
    if (lora) lora->after_product(c, gate_up, 2 * ffn, rows);
    if (lora && lora->runs_in_consumer)
      kernels::lora_silu_mul_runs(c.dt, gate_up, lora->runs_delta(), act, rows, ffn, c.stream);
    else if (lora && lora->xa_rows)
      kernels::lora_silu_mul_xa(c.dt, gate_up, kernels::lora_xa_delta(lora->pool, lora->xa_rows, lora->row_slot), act,
                                rows, ffn, c.stream);
    else if (lora && lora->delta)
      kernels::lora_silu_mul(c.dt, gate_up, lora->delta, lora->row_slot, act, rows, ffn, c.stream);
    else if (c.fusion) kernels::silu_mul(c.dt, gate_up, act, rows, ffn, c.stream);
    else kernels::silu_then_mul(c.dt, gate_up, act, rows, ffn, c.stream);
  }
};

struct ResidualNorm {
  const void* weight = nullptr;  ///< [d]
  int d = 0;
  float eps = 1e-5f;
  /// Under tensor parallelism: delta is a row-parallel product's partial sum (Linear::all_reduce_later).
  bool all_reduce_delta = false;
  /// The next product's act order (QuantWeight::perm): xn is written in its codes' order
  /// (kernels::add_rms_norm_permuted), so that product gathers nothing. One GPU only.
  const int32_t* out_perm = nullptr;
  void operator()(const OpContext& c, void* delta, void* h, void* xn, int rows) const {
    if (out_perm) {
      if (c.tp) throw std::logic_error("ResidualNorm: an act-order output under tensor parallelism");
      if (c.fusion) {
        kernels::add_rms_norm_permuted(c.dt, delta, h, weight, xn, out_perm, rows, d, eps, c.stream);
      } else {
        kernels::residual_add(c.dt, delta, h, int64_t(rows) * d, c.stream);
        kernels::rms_norm_permuted(c.dt, h, weight, xn, out_perm, rows, d, eps, c.stream);
      }
      return;
    }
    if (all_reduce_delta && c.tp) {
      if (c.fusion && tp_all_reduce_add_rms_norm(*c.tp, delta, h, weight, xn, rows, d, eps, c.stream)) return;
      tp_all_reduce(*c.tp, delta, int64_t(rows) * d, c.stream);
    }
    if (c.fusion) {
      kernels::add_rms_norm(c.dt, delta, h, weight, xn, rows, d, eps, c.stream);
    } else {
      kernels::residual_add(c.dt, delta, h, int64_t(rows) * d, c.stream);
      kernels::rms_norm(c.dt, h, weight, xn, rows, d, eps, c.stream);
    }
  }
};

/// The LM head: fp32 logits[rows, vocab] = x · W_lmᵀ; vocabulary-parallel under tensor
/// parallelism (each rank its columns, all-gathered into the whole row inside the op).
struct LmHead {
  const void* weight = nullptr;  ///< [vocab or this rank's share, d]
  int vocab = 0, d = 0;
  void operator()(const OpContext& c, const void* x, float* logits, int rows) const {
    if (c.tp) tp_lm_head(*c.tp, *c.gemm, x, weight, logits, rows, d, c.stream);
    else c.gemm->run(c.dt, x, weight, logits, rows, vocab, d, true, c.stream);
  }
};

/// One step's rows as attention sees them (from the packed step input on the device).
struct AttentionStep {
  kernels::KvAddressing kv;
  kernels::KvShape shape;          ///< the arena: slots, this rank's KV heads, head_dim
  const int32_t* positions = nullptr;
  const int64_t* slot_mapping = nullptr;
  const int32_t* query_start = nullptr;
  const int32_t* context_lens = nullptr;
  const float* inv_freq = nullptr;
  int n_tokens = 0, n_seqs = 0, max_context = 0;
  bool decode = false;             ///< one query row per sequence: the decode kernels
  /// decode with row spans: a verification step in its one-row form, grouped into row_groups
  /// sequences by these spans (decode_attention_rows, kernels/attention_decode_rows.h)
  const int32_t* row_spans = nullptr;
  int row_groups = 0;
  int row_queries = kernels::kDecodeRowsQueries;  ///< DecodeRowsArgs::queries_per_block
  int attention_pdl = 0;           ///< decode attention's PDL mode (DecodeAttentionArgs::pdl)
  /// A step that is not decode-only: its first decode_prefix sequences hold one row each (the
  /// scheduler's decodes, ahead of the chunks) and run through the decode kernel, the rest through
  /// the prefill kernel (0: every sequence through the prefill kernel; cuda/mixed_attention_plan.h).
  int decode_prefix = 0;
  float* workspace = nullptr;      ///< decode split scratch
  size_t workspace_bytes = 0;
  /// kv_cache_dtype fp8: the arenas hold E4M3 codes and scales (kernels/kv_fp8.h). Prefill
  /// attention then runs over the step's sequences dequantized into fp8_k_scratch / fp8_v_scratch
  /// ([fp8_scratch_slots, n_kv_heads, head_dim] in the dtype, naive at fp8_scratch_bases[s]).
  bool kv_fp8 = false;
  void* fp8_k_scratch = nullptr;
  void* fp8_v_scratch = nullptr;
  int64_t* fp8_scratch_bases = nullptr;  ///< [n_seqs]
  int64_t fp8_scratch_slots = 0;
  int64_t total_context = 0;       ///< sum of the step's context lengths (host), prefill with kv_fp8
};

struct Attention {
  int n_heads = 0;                 ///< this rank's query heads
  const void* bias = nullptr;      ///< Q/K/V bias (Qwen2) or null
  /// q|k|v's LoRA delta computed beside the product (LoraHook::delta, LoraSgmvConfig::qkv_beside):
  /// added by rope_kv_write for rows with lora_rows[t] >= 0. Only with fusion on and a 16-bit KV
  /// cache (the forward sets it only then; the other paths refuse it).
  const void* lora_delta = nullptr;
  const int32_t* lora_rows = nullptr;
  /// Or (LoraSgmvConfig::*_in_consumer) the delta computed by rope_kv_write from the rows' xa.
  kernels::LoraXaDelta lora_xa;
  /// RoPE's and the K/V write's arguments for qkv[rows, q | k | v] (row stride qkv_width).
  kernels::QkvArgs qkv_args(const OpContext& c, const AttentionStep& st, void* qkv, int qkv_width, void* k_cache,
                            void* v_cache) const {
    const int hd = st.shape.head_dim;
    kernels::QkvArgs qa;
    qa.dtype = c.dt;
    qa.qkv = qkv;
    qa.qkv_row_stride = qkv_width;
    qa.n_tokens = st.n_tokens;
    qa.n_heads = n_heads;
    qa.n_kv_heads = st.shape.n_kv_heads;
    qa.head_dim = hd;
    qa.bias = bias;
    qa.positions = st.positions;
    qa.inv_freq = st.inv_freq;
    qa.slot_mapping = st.slot_mapping;
    qa.k_cache = k_cache;
    qa.v_cache = v_cache;
    qa.delta = lora_delta;
    qa.delta_rows = lora_rows;
    qa.lora = lora_xa;
    return qa;
  }
  /// Whether RoPE and the K/V write may run in the q|k|v product's epilogue (QkvAttention): a
  /// 16-bit cache, fusion on and no LoRA delta for rope_kv_write to add.
  bool rope_kv_in_product(const OpContext& c, const AttentionStep& st) const {
    return c.fusion && c.fuse_qkv_rope && !st.kv_fp8 && !lora_delta && !lora_xa.xa;
  }
  /// RoPE on q and k, K/V into the layer's arena: fused, or (fusion off) the two kernels.
  static void rope_kv(const OpContext& c, const AttentionStep& st, const kernels::QkvArgs& qa) {
    if (st.kv_fp8 && c.fusion) {
      kernels::rope_kv_write_fp8(qa, c.stream);
    } else if (st.kv_fp8) {
      kernels::rope_inplace(qa, c.stream);
      kernels::kv_write_fp8(qa, c.stream);
    } else if (c.fusion) {
      kernels::rope_kv_write(qa, c.stream);
    } else {
      kernels::rope_inplace(qa, c.stream);
      kernels::kv_write(qa, c.stream);
    }
  }
  /// qkv[rows, q | k | v] (row stride qkv_width): RoPE on q and k, K/V into the layer's arena
  /// (unless `roped`: the product did both), then attention into out[rows, n_heads · head_dim].
  void operator()(const OpContext& c, const AttentionStep& st, void* qkv, int qkv_width, void* k_cache, void* v_cache,
                  void* out, bool roped = false) const {
    const int hd = st.shape.head_dim;
    if (!roped) rope_kv(c, st, qkv_args(c, st, qkv, qkv_width, k_cache, v_cache));
    // The fields decode and prefill attention share.
    auto common = [&](auto& a) {
      a.dtype = c.dt;
      a.q = qkv;
      a.q_row_stride = qkv_width;
      a.k_cache = k_cache;
      a.v_cache = v_cache;
      a.shape = st.shape;
      a.n_heads = n_heads;
      a.n_seqs = st.n_seqs;
      a.query_start = st.query_start;
      a.context_lens = st.context_lens;
      a.kv = st.kv;
      a.scale = 1.0f / std::sqrt(float(hd));
      a.out = out;
      a.out_row_stride = n_heads * hd;
    };
    if (st.decode) {
      kernels::DecodeAttentionArgs a;
      common(a);
      a.max_context = st.max_context;
      a.workspace = st.workspace;
      a.workspace_bytes = st.workspace_bytes;
      a.pdl = st.attention_pdl;
      if (st.kv_fp8) {
        if (st.row_spans) throw std::logic_error("Attention: the multi-row decode kernel reads no FP8 KV cache");
        kernels::decode_attention_fp8(a, c.stream);
      } else if (st.row_spans) {
        kernels::DecodeRowsArgs r;
        r.base = a;
        r.spans = st.row_spans;
        r.queries_per_block = st.row_queries;
        kernels::decode_attention_rows(r, c.stream, st.row_groups);
      } else {
        kernels::decode_attention(a, c.stream);
      }
    } else {
      kernels::PrefillAttentionArgs a;
      common(a);
      a.n_tokens = st.n_tokens;
      if (st.decode_prefix > 0) {  // the decodes split over their contexts, the chunks after them
        if (st.kv_fp8 || st.row_spans) throw std::logic_error("Attention: decode_prefix with an FP8 KV cache or row spans");
        const int nd = st.decode_prefix;
        kernels::DecodeAttentionArgs d;
        common(d);
        d.n_seqs = nd;
        d.max_context = st.max_context;
        d.workspace = st.workspace;
        d.workspace_bytes = st.workspace_bytes;
        kernels::decode_attention(d, c.stream);
        a.n_seqs -= nd;
        a.n_tokens -= nd;
        a.query_start += nd;  // absolute row offsets: q and out as they are
        a.context_lens += nd;
        a.kv = st.kv.from(nd);
      }
      if (st.kv_fp8) {  // the step's sequences dequantized into the scratch, then the bf16 kernel
        kernels::KvFp8DequantArgs x;
        x.dtype = c.dt;
        x.k_cache = k_cache;
        x.v_cache = v_cache;
        x.shape = st.shape;
        x.kv = st.kv;
        x.n_seqs = st.n_seqs;
        x.context_lens = st.context_lens;
        x.max_context = st.max_context;
        x.total_context = st.total_context;
        x.k_out = st.fp8_k_scratch;
        x.v_out = st.fp8_v_scratch;
        x.out_slots = st.fp8_scratch_slots;
        x.base_slots = st.fp8_scratch_bases;
        kernels::dequantize_kv_fp8(x, c.stream);
        a.k_cache = st.fp8_k_scratch;
        a.v_cache = st.fp8_v_scratch;
        a.shape.n_slots = st.fp8_scratch_slots;
        a.kv = kernels::KvAddressing{};
        a.kv.kind = kernels::KvLayoutKind::naive;
        a.kv.base_slots = st.fp8_scratch_bases;
      }
      kernels::prefill_attention(a, c.stream);
    }
  }
};

/// The q|k|v projection and attention: where the product runs on gemv (Gemm::run_qkv_rope_kv) or
/// quant_gemv's steps kernel (QuantLinearRunner::run_qkv_rope_kv), its epilogue applies RoPE and
/// writes K/V (kernels/gemv_rope_kv.cuh) and attention launches no RoPE/KV-write kernel: one
/// launch a layer fewer, the same bits.
struct QkvAttention {
  Linear qkv;
  Attention attention;
  void operator()(const OpContext& c, const AttentionStep& st, const void* x, void* qkv_out, void* k_cache,
                  void* v_cache, void* out, int rows) const {
    bool roped = false;
    if (qkv.lora && qkv.lora->in_product && !qkv.quant) {  // the delta in the product's epilogue, RoPE too where it can
      if (rows == st.n_tokens && attention.rope_kv_in_product(c, st) &&
          kernels::gemv_rope_kv_supported(attention.qkv_args(c, st, qkv_out, qkv.out, k_cache, v_cache), x, qkv.weight,
                                          qkv.in) &&
          c.gemm->uses_gemv(c.dt, x, qkv.weight, rows, qkv.out, qkv.in, true)) {
        const kernels::LoraInGemv d = qkv.lora->product_lora(rows);
        roped = c.gemm->run_qkv_rope_kv(attention.qkv_args(c, st, qkv_out, qkv.out, k_cache, v_cache), x, qkv.weight,
                                        qkv.in, c.stream, &d);
        if (!roped) throw std::logic_error("QkvAttention: the q|k|v product with a LoRA delta left gemv's path");
      } else {
        run_product_with_lora(c, *qkv.lora, x, qkv.weight, qkv_out, rows, qkv.out, qkv.in);
      }
    } else if (!qkv.lora && rows == st.n_tokens && attention.rope_kv_in_product(c, st)) {
      const kernels::QkvArgs qa = attention.qkv_args(c, st, qkv_out, qkv.out, k_cache, v_cache);
      roped = qkv.quant ? c.quant->run_qkv_rope_kv(*qkv.quant, qa, x, c.stream)
                        : c.gemm->run_qkv_rope_kv(qa, x, qkv.weight, qkv.in, c.stream);
    }
    if (!roped && !(qkv.lora && qkv.lora->in_product && !qkv.quant)) qkv(c, x, qkv_out, rows);
    attention(c, st, qkv_out, qkv.out, k_cache, v_cache, out, roped);
  }
};

}  // namespace servelab::cuda
