// The kernels of one step (CudaBackend::Impl::enqueue): embedding, the layers, the final norm and
// LM head on the sampled rows, sampling. Everything on the backend's stream, nothing allocated or
// synchronized, so a decode step can be captured into a CUDA graph and replayed.
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace servelab {

void CudaBackend::Impl::enqueue(const Geometry& g) {
  const ModelConfig& m = c();
  const int d = m.hidden_size, hd = m.head_dim(), ffn = local_ffn;  // local_*: this rank's share (all on one GPU)
  const int R = g.rows, T = g.tokens, S = g.seqs, N = g.samples;
  const float eps = m.rms_eps, scale = 1.0f / std::sqrt(float(hd));
  const cuda::PackedLayout& L = g.layout;
  k::set_pdl_enabled(pdl_small_steps && R <= k::gemv::kMaxRows);  // this thread's launches (graph capture too)
  k::KvAddressing addr;
  addr.kind = g.kind;
  addr.block_tables = g.at<int32_t>(L.block_tables);
  addr.block_table_stride = L.table_stride;
  addr.block_size = g.block_size;
  addr.base_slots = g.at<int64_t>(L.base_slots);
  if (L.persistent_tables) {
    // The step's block-table changes into the persistent table, then attention reads it through
    // each sequence's row. A graph launches the update for its bucket (the count is read on the
    // device); an eager step for its own list.
    addr.block_tables = block_table.get<int32_t>();
    addr.block_table_stride = table_step.stride;
    addr.block_table_rows = g.at<int32_t>(L.table_rows);
    k::apply_block_table_updates(block_table.get<int32_t>(), g.at<k::BlockTableUpdate>(L.updates),
                                 g.at<int32_t>(L.update_count), g.graph ? g.seqs : L.n_updates, stream);
  }
  const k::KvShape shape{n_slots, local_kv_heads, hd};

  k::embedding(dt, w.embedding, g.at<int32_t>(L.token_ids), h.get(), R, d, stream);
  for (int l = 0; l < m.n_layers; ++l) {
    const cuda::DeviceLayer& W = w.layers[l];
    if (l == 0) {
      k::rms_norm(dt, h.get(), W.attn_norm, xn.get(), R, d, eps, stream);
    } else if (options.fusion) {
      k::add_rms_norm(dt, delta.get(), h.get(), W.attn_norm, xn.get(), R, d, eps, stream);
    } else {
      k::residual_add(dt, delta.get(), h.get(), int64_t(R) * d, stream);
      k::rms_norm(dt, h.get(), W.attn_norm, xn.get(), R, d, eps, stream);
    }
    gemm->run(dt, xn.get(), W.w_qkv, qkv.get(), R, qkv_width(), d, false, stream);

    k::QkvArgs qa;
    qa.dtype = dt;
    qa.qkv = qkv.get();
    qa.qkv_row_stride = qkv_width();
    qa.n_tokens = T;
    qa.n_heads = local_heads;
    qa.n_kv_heads = local_kv_heads;
    qa.head_dim = hd;
    qa.bias = W.b_qkv;
    qa.positions = g.at<int32_t>(L.positions);
    qa.inv_freq = inv_freq.get<float>();
    qa.slot_mapping = g.at<int64_t>(L.slot_mapping);
    qa.k_cache = k_arena(l);
    qa.v_cache = v_arena(l);
    if (options.fusion) {
      k::rope_kv_write(qa, stream);
    } else {
      k::rope_inplace(qa, stream);
      k::kv_write(qa, stream);
    }

    if (g.decode) {
      k::DecodeAttentionArgs a;
      a.dtype = dt;
      a.q = qkv.get();
      a.q_row_stride = qkv_width();
      a.query_start = g.at<int32_t>(L.query_start);
      a.k_cache = k_arena(l);
      a.v_cache = v_arena(l);
      a.shape = shape;
      a.n_heads = local_heads;
      a.n_seqs = S;
      a.context_lens = g.at<int32_t>(L.context_lens);
      a.kv = addr;
      a.max_context = g.max_context;
      a.scale = scale;
      a.out = attn.get();
      a.out_row_stride = dq();
      a.workspace = decode_ws.get<float>();
      a.workspace_bytes = decode_ws.bytes();
      k::decode_attention(a, stream);
    } else {
      k::PrefillAttentionArgs a;
      a.dtype = dt;
      a.q = qkv.get();
      a.q_row_stride = qkv_width();
      a.k_cache = k_arena(l);
      a.v_cache = v_arena(l);
      a.shape = shape;
      a.n_heads = local_heads;
      a.n_seqs = S;
      a.n_tokens = T;
      a.query_start = g.at<int32_t>(L.query_start);
      a.context_lens = g.at<int32_t>(L.context_lens);
      a.kv = addr;
      a.scale = scale;
      a.out = attn.get();
      a.out_row_stride = dq();
      k::prefill_attention(a, stream);
    }
    gemm->run(dt, attn.get(), W.w_o, delta.get(), R, d, dq(), false, stream);
    if (tp) cuda::tp_all_reduce(*tp, delta.get(), int64_t(R) * d, stream);  // row-parallel O: sum the ranks' parts
    if (options.fusion) {
      k::add_rms_norm(dt, delta.get(), h.get(), W.ffn_norm, xn.get(), R, d, eps, stream);
    } else {
      k::residual_add(dt, delta.get(), h.get(), int64_t(R) * d, stream);
      k::rms_norm(dt, h.get(), W.ffn_norm, xn.get(), R, d, eps, stream);
    }
    if (options.fusion && fuse_gate_up_silu && gemm->fuses_gate_up_silu(dt, xn.get(), W.w_gate_up, R, ffn, d)) {
      gemm->run_gate_up_silu(dt, xn.get(), W.w_gate_up, act.get(), R, ffn, d, stream);  // one launch
    } else {
      gemm->run(dt, xn.get(), W.w_gate_up, gate_up.get(), R, 2 * ffn, d, false, stream);
      if (options.fusion)
        k::silu_mul(dt, gate_up.get(), act.get(), R, ffn, stream);
      else
        k::silu_then_mul(dt, gate_up.get(), act.get(), R, ffn, stream);
    }
    gemm->run(dt, act.get(), W.w_down, delta.get(), R, d, ffn, false, stream);
    if (tp) cuda::tp_all_reduce(*tp, delta.get(), int64_t(R) * d, stream);  // row-parallel down
  }
  if (N == 0) return;
  // The last residual add and the final norm on the sampled rows only, the LM head, sampling.
  const auto* rows = g.at<int32_t>(L.sample_rows);
  k::embedding(dt, delta.get(), rows, xs_delta.get(), N, d, stream);
  k::embedding(dt, h.get(), rows, xs_h.get(), N, d, stream);
  if (options.fusion) {
    k::add_rms_norm(dt, xs_delta.get(), xs_h.get(), w.final_norm, xs.get(), N, d, eps, stream);
  } else {
    k::residual_add(dt, xs_delta.get(), xs_h.get(), int64_t(N) * d, stream);
    k::rms_norm(dt, xs_h.get(), w.final_norm, xs.get(), N, d, eps, stream);
  }
  if (tp)  // vocabulary-parallel LM head: this rank's columns, then all-gathered into `logits`
    cuda::tp_lm_head(*tp, *gemm, xs.get(), w.lm_head, logits.get<float>(), N, d, stream);
  else
    gemm->run(dt, xs.get(), w.lm_head, logits.get(), N, m.vocab_size, d, true, stream);
  if (g.masks)  // structured output: the draws' token masks (eager steps; graphs carry none)
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
  k::sample_tokens(sa, stream);
}

}  // namespace servelab
