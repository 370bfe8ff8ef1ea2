// The kernels of one step (CudaBackend::Impl::enqueue_forward, enqueue_draws): embedding, the layers written once over
// the ops of cuda_ops.h (fusion and tensor parallelism are the ops' business), the final norm and
// LM head on the drawn rows, token masks, sampling. Everything on the backend's stream, nothing
// allocated or synchronized, so a decode step can be captured into a CUDA graph and replayed.
#include "engine/backend/cuda/cuda_backend_impl.h"
#include "engine/backend/cuda/cuda_ops.h"

namespace servelab {

void CudaBackend::Impl::enqueue_forward(const Geometry& g) {
  const ModelConfig& m = c();
  const int d = m.hidden_size, hd = m.head_dim();
  const int R = g.rows, N = g.samples;
  const cuda::PackedLayout& L = g.layout;
  // Decodes whose adapters may ride in the products' gemv (lora_kernels.in_product: in_product_step
  // below) take gemv up to kMaxM rows; other products past kMaxRows are cuBLASLt's (Gemm::gemv_rows).
  const bool lora_gemv_rows = g.lora && lora_kernels.in_product && g.decode && !qw && !tp && R <= k::gemv::kMaxM;
  k::set_pdl_enabled(pdl_small_steps && (R <= k::gemv::kMaxRows || lora_gemv_rows));  // this thread's launches (graph capture too)
  const cuda::OpContext ctx{gemm.get(), dt, stream, options.fusion, fuse_gate_up_silu, fuse_qkv_rope, tp, quant_runner.get()};
  if (tp) tp->pushed = nullptr;  // a forward that threw half-way leaves no pushed product behind

  cuda::AttentionStep st;
  st.kv.kind = g.kind;
  st.kv.block_tables = g.at<int32_t>(L.block_tables);
  st.kv.block_table_stride = L.table_stride;
  st.kv.block_size = g.block_size;
  st.kv.base_slots = g.at<int64_t>(L.base_slots);
  if (L.persistent_tables) {
    // The step's block-table changes into the persistent table, then attention reads it through
    // each sequence's row. A graph launches the update for its bucket (the count is read on the
    // device); an eager step for its own list.
    st.kv.block_tables = block_table.get<int32_t>();
    st.kv.block_table_stride = table_step.stride;
    st.kv.block_table_rows = g.at<int32_t>(L.table_rows);
    k::apply_block_table_updates(block_table.get<int32_t>(), g.at<k::BlockTableUpdate>(L.updates),
                                 g.at<int32_t>(L.update_count), g.graph ? g.seqs : L.n_updates, stream);
  }
  st.shape = k::KvShape{n_slots, local_kv_heads, hd};
  st.positions = g.at<int32_t>(L.positions);
  st.slot_mapping = g.at<int64_t>(L.slot_mapping);
  st.query_start = g.at<int32_t>(L.query_start);
  st.context_lens = g.at<int32_t>(L.context_lens);
  st.inv_freq = inv_freq.get<float>();
  st.n_tokens = g.tokens;
  st.n_seqs = g.seqs;
  st.max_context = g.max_context;
  st.decode = g.decode;
  if (g.layout.has_row_spans) {  // a verification step in its one-row form (verify_rows.h)
    st.row_spans = g.at<int32_t>(g.layout.row_spans);
    st.row_groups = g.row_groups;
    st.row_queries = options.verify_rows_queries > 0 ? options.verify_rows_queries : kVerifyRowsQueries;
  }
  st.attention_pdl = attention_pdl;
  st.decode_prefix = g.decode_prefix;
  st.workspace = decode_ws.get<float>();
  st.workspace_bytes = decode_ws.bytes();
  st.kv_fp8 = kv_fp8;
  if (kv_fp8 && !g.decode) {
    st.fp8_k_scratch = kv8_k_scratch.get();
    st.fp8_v_scratch = kv8_v_scratch.get();
    st.fp8_scratch_bases = kv8_bases.get<int64_t>();
    st.fp8_scratch_slots = kv8_scratch_slots;
    st.total_context = g.total_context;
  }

  // An adapter loaded for this step may still be copying (cuda_lora.h): an eager step waits for
  // each layer's part just before the layer (layer 0's holds the slot's scale); a graph step
  // waited for all of it before its launch (run_planned).
  const bool wait_lora_layers = g.lora && !g.graph && lora.copying();
  if (wait_lora_layers) lora.wait_layer(0, stream);

  // LoRA (cuda_lora.h, kernels/lora_sgmv.h): when some row has an adapter, the rows grouped by
  // slot once (the plan every layer reads), then each layer's four hooks; else nothing at all.
  // o_proj's and down_proj's deltas go into the residual h beside their products when
  // lora_kernels.residual_beside (the next norm adds their products' output into h after the join).
  // In an eager step, runs of at least lora_kernels.gemm_min_rows rows of one adapter (a
  // prefill's or a chunk's sequence) take the tensor cores (kernels/lora_gemm.h) and the plan
  // holds only the rows left (uploaded), or is not built when none are.
  cuda::LoraHook hooks[cuda::kLoraGroups];
  lora_step_runs.clear();
  bool grouped = g.lora;
  // The step's own slots (the consumers of a delta read every adapter row's); the plan's may
  // leave out the tensor-core runs' rows.
  const int32_t* const delta_rows = g.lora ? g.at<int32_t>(L.lora_slot) : nullptr;
  const int32_t* plan_slots = delta_rows;
  // The grouped kernels' grids and partial sums are sized for plan_rows rows: a graph's R (any
  // mix of slots replays), an eager step's adapter rows left to them, counted here (a prompt on
  // the tensor cores beside a few decodes: the decodes; sized for the prompt's rows too, their
  // grids were mostly blocks that exit at once).
  int plan_rows = R;
  if (g.lora && !g.graph && plan && plan->in.lora_slot.size() == size_t(R)) {
    const int32_t* host_slots = plan->in.lora_slot.data();
    lora_step_runs = k::lora_gemm_runs(host_slots, R, lora_kernels.gemm_min_rows, lora_kernels.gemm_max_runs);
    if (!lora_step_runs.empty() && (grouped = k::lora_rows_left(host_slots, R, lora_step_runs, lora_left))) {
      CUDA_CHECK(cudaMemcpyAsync(lora_left_dev.get(), lora_left.data(), size_t(R) * 4, cudaMemcpyHostToDevice, stream));
      plan_slots = lora_left_dev.get<int32_t>();
      host_slots = lora_left.data();
    }
    if (lora_kernels.size_by_plan_rows)
      plan_rows = std::max<int>(1, int(std::count_if(host_slots, host_slots + R, [](int32_t s) { return s >= 0; })));
  }
  // gate|up's runs expanded inside SiLU·mul (lora_kernels.gate_up_in_silu_rows): decided once a step.
  int lora_step_run_rows = 0;
  for (const k::LoraRun& r : lora_step_runs) lora_step_run_rows += r.count;
  bool gate_up_runs_in_silu = false;
  if (!lora_step_runs.empty() && lora_step_run_rows <= lora_kernels.gate_up_in_silu_rows) {
    const k::LoraPool p = lora.pool(0, cuda::LoraGroup::gate_up);  // every layer's has its shape
    gate_up_runs_in_silu = p.n_seg == 2 && k::lora_silu_mul_runs_fits(int(lora_step_runs.size()), p.max_rank);
  }
  // The products with the runs inside (lora_kernels.fused_product_*_rows): one GPU, 16-bit
  // weights, their rows within the window and the kernel's tiles (such a step puts no delta
  // beside its products: eager_beside is off in it).
  const bool fused_step = !lora_step_runs.empty() && lora_step_run_rows >= lora_kernels.fused_product_min_rows &&
                          lora_step_run_rows <= lora_kernels.fused_product_max_rows && !qw && !tp && lora_fused &&
                          k::lora_fused_tiles(lora_step_runs, R, lora.host_scales(), lora_fused_tiles);
  if (fused_step) gate_up_runs_in_silu = false;
  // lora_kernels.empty_plan (engine_bench's diagnostic): every launch below, no rows in the plan.
  if (grouped) k::lora_plan(plan_slots, lora_kernels.empty_plan ? 0 : R, lora.n_slots(), lora_step_plan(), stream);
  cudaStream_t side = lora_kernels.side_stream ? lora_side : nullptr;
  // q|k|v's and gate|up's deltas beside their products: in decode steps on the grouped kernels
  // (every graph), and with eager_beside in every eager step, tensor-core runs or not, but a
  // prompt beside running decodes where mixed_grouped_beside takes those.
  const bool mixed_step = grouped && !lora_step_runs.empty();
  // SMs left to the side stream (lora_kernels.product_sm_reserve, run_shrink_sms) where the
  // step's longest tensor-core run holds at most sm_reserve_max_run_rows rows; a longer run's
  // products take every SM, its expands after them (eager_beside off).
  int longest_run = 0;
  for (const k::LoraRun& r : lora_step_runs) longest_run = std::max(longest_run, r.count);
  const bool leave_sms = longest_run <= lora_kernels.sm_reserve_max_run_rows;
  // Nor where SiLU·mul computes gate|up's runs' delta (gate_up_in_silu_rows: short prompts, measured
  // against the expand after the product, not against the deltas beside).
  const bool eager_beside = lora_kernels.eager_beside && !g.graph && leave_sms && !fused_step &&
                            !gate_up_runs_in_silu && !(mixed_step && lora_kernels.mixed_grouped_beside);
  const bool plain_decode = lora_step_runs.empty() && st.decode;
  const bool qkv_beside =
      g.lora && lora_kernels.qkv_beside && (plain_decode || eager_beside) && ctx.fusion && !st.kv_fp8;
  // A prompt beside running decodes (tensor-core runs and grouped rows, lora_kernels.mixed_grouped_beside):
  // the grouped rows' work first on the side stream, and their q|k|v and gate|up deltas beside the
  // products into the scratch (rows: the plan's), added by the RoPE + K/V write and SiLU·mul; the
  // runs' expands follow the products as in a prompt alone.
  const bool mixed_beside = lora_kernels.mixed_grouped_beside && mixed_step && !eager_beside && !fused_step;
  // q|k|v's delta computed by rope_kv_write from the rows' xa (qkv_in_consumer): plain decodes only.
  const bool qkv_xa_ok = plain_decode;
  // Each product's delta in its gemv epilogue (lora_kernels.in_product): plain decodes on one GPU
  // with 16-bit weights, each product that gemv takes (the rest as below).
  const bool in_product_step = lora_gemv_rows && plain_decode;
  auto group_shape = [&](cuda::LoraGroup grp) -> std::pair<int, int> {  // a group's product: out, in
    switch (grp) {
      case cuda::LoraGroup::qkv: return {qkv_width(), d};
      case cuda::LoraGroup::o: return {d, dq()};
      case cuda::LoraGroup::gate_up: return {2 * local_ffn, d};
      default: return {d, local_ffn};
    }
  };
  auto gemv_takes = [&](int l, cuda::LoraGroup grp) {
    const cuda::DeviceLayer& W = w.layers[l];
    const auto [out, in] = group_shape(grp);
    switch (grp) {
      case cuda::LoraGroup::qkv: return ctx.gemm->uses_gemv(dt, xn.get(), W.w_qkv, R, out, in, true);
      case cuda::LoraGroup::o: return ctx.gemm->uses_gemv(dt, attn.get(), W.w_o, R, out, in, true);
      case cuda::LoraGroup::gate_up: return ctx.gemm->uses_gemv(dt, xn.get(), W.w_gate_up, R, out, in, true);
      default: return ctx.gemm->uses_gemv(dt, act.get(), W.w_down, R, out, in, true);
    }
  };
  int gemv_launches = 0;  // in_product hooks so far (each its own count in the plan)
  auto hook = [&](int l, cuda::LoraGroup grp) -> const cuda::LoraHook* {
    if (!g.lora) return nullptr;
    if (in_product_step && gemv_takes(l, grp)) {
      cuda::LoraHook& hk = hooks[int(grp)];
      hk = cuda::LoraHook{lora.pool(l, grp), lora_step_plan(), lora_partial.get<float>()};
      hk.in_product = true;
      hk.gemv_launch = gemv_launches++;
      hk.row_slot = delta_rows;
      hk.xa_rows = lora_xa_rows.get<float>();
      return &hk;
    }
    const bool into_residual =
        lora_kernels.residual_beside && (grp == cuda::LoraGroup::o || grp == cuda::LoraGroup::down);
    cuda::LoraHook& hk = hooks[int(grp)];
    hk = cuda::LoraHook{lora.pool(l, grp), lora_step_plan(), lora_partial.get<float>(), side, lora_fork, lora_join,
                        into_residual ? h.get() : nullptr};
    if (!lora_step_runs.empty()) {
      hk.runs = &lora_step_runs;
      hk.gemm = lora_gemm.get();
      hk.run_scale = lora.host_scales();
      hk.xa = lora_xa.get();
    }
    hk.grouped = grouped;
    hk.plan_rows = plan_rows;
    if (leave_sms) {
      hk.product_sm_reserve = lora_kernels.product_sm_reserve;
      hk.run_shrink_sms = lora_kernels.run_shrink_sms;
    }
    // gate|up's delta beside the product, added in SiLU·mul, and q|k|v's, added by the RoPE + K/V
    // write: steps with no tensor-core runs (every graph), where the plan's rows are exactly the
    // rows whose slot is >= 0 (the two share the scratch: attention reads q|k|v's before the
    // fork of gate|up's side work). With lora_kernels.gate_up_in_consumer (qkv_in_consumer) no
    // expand runs: the shrink finishes the rows' xa (lora_xa_rows, shared the same way) and those
    // kernels expand.
    if ((grp == cuda::LoraGroup::gate_up && lora_kernels.gate_up_beside && (lora_step_runs.empty() || eager_beside)) ||
        (grp == cuda::LoraGroup::qkv && qkv_beside)) {
      hk.row_slot = delta_rows;
      if (lora_step_runs.empty() &&
          (grp == cuda::LoraGroup::gate_up ? lora_kernels.gate_up_in_consumer : qkv_xa_ok && lora_kernels.qkv_in_consumer))
        hk.xa_rows = lora_xa_rows.get<float>();
      else hk.delta = lora_delta.get();
    }
    hk.grouped_first = mixed_beside;
    if (mixed_beside && ((grp == cuda::LoraGroup::qkv && ctx.fusion && !st.kv_fp8) ||
                         (grp == cuda::LoraGroup::gate_up && lora_kernels.gate_up_beside && !gate_up_runs_in_silu))) {
      hk.row_slot = plan_slots;
      hk.delta = lora_delta.get();
      hk.runs_expand_after = true;
    }
    // ... where gate|up's expand would follow the product (not beside it).
    hk.runs_in_consumer = grp == cuda::LoraGroup::gate_up && gate_up_runs_in_silu && !hk.delta && !hk.xa_rows;
    if (fused_step && !hk.delta && !hk.xa_rows) {
      const auto [out, in] = group_shape(grp);
      if (k::lora_fused_fits(dt, hk.pool, out, in)) {
        hk.fused = lora_fused.get();
        hk.fused_tiles = &lora_fused_tiles;
        hk.fused_x_rows = rows_capacity;
      }
    }
    return &hk;
  };

  // The model, written once over the ops (cuda_ops.h).
  k::embedding(dt, w.embedding, g.at<int32_t>(L.token_ids), h.get(), R, d, stream);
  for (int l = 0; l < m.n_layers; ++l) {
    const cuda::DeviceLayer& W = w.layers[l];
    const cuda::QuantDeviceWeights::Layer* Q = qw ? &qw->layers[l] : nullptr;  // quantized Linears, or none
    if (wait_lora_layers && l > 0) lora.wait_layer(l, stream);
    // Under tensor parallelism the O and down products' partial sums are all-reduced by the norm
    // after them (with the residual add and the norm in one kernel where ours takes the message);
    // the last layer's down product all-reduces itself (the final norm sees the drawn rows only).
    const bool last = l + 1 == m.n_layers;
    // Act-order INT4: the norms write xn in the q|k|v and gate|up codes' order, so those products
    // take it as a plain INT4 product (perm dropped) and gather nothing; o_proj and down_proj
    // gather their inputs. Not with LoRA reserved: the adapters' shrinks read xn in channel order.
    const bool fold_perm = Q && !lora.reserved();
    const int32_t* qkv_perm = fold_perm ? Q->qkv.perm : nullptr;
    const int32_t* gate_up_perm = fold_perm ? Q->gate_up.perm : nullptr;
    cuda::QuantWeight qkv_q, gate_up_q;  // Q's, their perm dropped where the norm took it
    if (Q) {
      qkv_q = Q->qkv;
      gate_up_q = Q->gate_up;
      if (qkv_perm) qkv_q.perm = nullptr;
      if (gate_up_perm) gate_up_q.perm = nullptr;
    }
    const cuda::ResidualNorm attn_norm{W.attn_norm, d, m.rms_eps, true, qkv_perm},
        ffn_norm{W.ffn_norm, d, m.rms_eps, true, gate_up_perm};
    using Group = cuda::LoraGroup;
    const cuda::Linear qkv_proj{W.w_qkv, qkv_width(), d, cuda::Linear::Split::column, Q ? &qkv_q : nullptr, hook(l, Group::qkv)};
    // What the q|k|v hook left for rope_kv_write: a delta in the scratch (its rows), or xa to expand.
    const cuda::LoraHook* qh = g.lora ? &hooks[int(Group::qkv)] : nullptr;
    const k::LoraXaDelta qkv_delta =
        qh && qh->xa_rows && !qh->in_product ? k::lora_xa_delta(qh->pool, qh->xa_rows, plan_slots) : k::LoraXaDelta{};
    const bool qkv_scratch = qh && qh->delta;
    const cuda::QkvAttention qkv_attention{
        qkv_proj, cuda::Attention{local_heads, W.b_qkv, qkv_scratch ? qh->delta : nullptr,
                                  qkv_scratch ? qh->row_slot : nullptr, qkv_delta}};
    const cuda::Linear o_proj{W.w_o, d, dq(), cuda::Linear::Split::row, Q ? &Q->o : nullptr, hook(l, Group::o), true};
    const cuda::GateUpSilu gate_up_silu{W.w_gate_up, local_ffn, d, Q ? &gate_up_q : nullptr, hook(l, Group::gate_up)};
    const cuda::Linear down_proj{W.w_down,   d, local_ffn, cuda::Linear::Split::row, Q ? &Q->down : nullptr,
                                 hook(l, Group::down), !last};

    if (l == 0 && qkv_perm) k::rms_norm_permuted(dt, h.get(), W.attn_norm, xn.get(), qkv_perm, R, d, m.rms_eps, stream);
    else if (l == 0) k::rms_norm(dt, h.get(), W.attn_norm, xn.get(), R, d, m.rms_eps, stream);
    else attn_norm(ctx, delta.get(), h.get(), xn.get(), R);
    qkv_attention(ctx, st, xn.get(), qkv.get(), k_arena(l), v_arena(l), attn.get(), R);
    o_proj(ctx, attn.get(), delta.get(), R);
    ffn_norm(ctx, delta.get(), h.get(), xn.get(), R);
    gate_up_silu(ctx, xn.get(), gate_up.get(), act.get(), R);
    down_proj(ctx, act.get(), delta.get(), R);
  }
  if (N == 0) return;
  // The last residual add and the final norm on the drawn rows only, the LM head, masks, draws.
  const auto* rows = g.at<int32_t>(L.sample_rows);
  k::embedding(dt, delta.get(), rows, xs_delta.get(), N, d, stream);
  k::embedding(dt, h.get(), rows, xs_h.get(), N, d, stream);
  const cuda::ResidualNorm final_norm{w.final_norm, d, m.rms_eps};
  final_norm(ctx, xs_delta.get(), xs_h.get(), xs.get(), N);
  const cuda::LmHead lm_head{w.lm_head, tp ? local_vocab : m.vocab_size, d};
  lm_head(ctx, xs.get(), logits.get<float>(), N);
}

void CudaBackend::Impl::enqueue_draws(const Geometry& g) {
  const ModelConfig& m = c();
  const int N = g.samples;
  const cuda::PackedLayout& L = g.layout;
  if (N == 0) return;
  if (g.late) k::set_pdl_enabled(false);  // after the mask upload (and a graph): plain launches
  if (g.masks)  // structured output: the draws' token masks (eager or late masks; graphs of whole steps carry none)
    k::apply_token_masks(logits.get<float>(), N, m.vocab_size, g.at<int32_t>(L.mask_index), g.masks,
                         g.mask_words_per_row, stream);
  k::SampleArgs sa;
  sa.logits = logits.get<float>();
  sa.n_rows = N;
  sa.vocab = m.vocab_size;
  sa.temperature = g.at<float>(L.temperature);
  sa.top_k = g.at<int32_t>(L.top_k);
  sa.top_p = g.at<float>(L.top_p);
  sa.seed = g.at<uint64_t>(L.seed);
  sa.seq_key = g.at<uint64_t>(L.seq_key);
  sa.position = g.at<int32_t>(L.sample_position);
  sa.tokens = tokens.get<int32_t>();
  // Rejection sampling of drafts against their q (draft_dist >= 0; draft_q uploaded with the step)
  // and, for a draft model, the distributions its draws sample.
  sa.draft_token = g.at<int32_t>(L.draft_token);
  sa.draft_dist = g.at<int32_t>(L.draft_dist);
  sa.draft_probs = draft_q.get<float>();
  sa.probs_out = g.draw_probs ? draw_probs_dev.get<float>() : nullptr;
  k::sample_tokens(sa, stream);
}

}  // namespace servelab
