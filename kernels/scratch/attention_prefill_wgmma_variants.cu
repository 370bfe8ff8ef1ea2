// The superseded warp-specialized wgmma prefill kernels (kernels/notes-prefill.md): v5 (ws), v5.1
// (ping-pong), v6 (TMA producer), v6.1 (lean producer), v7 (persistent grid), fa5 and its parts,
// fa6, fa7 (exp2 on the FMA pipe), fa8's lean-producer parts, fa9 (row sums on the tensor core),
// fa11_vote: the template of kernels/attention_prefill_wgmma_ws.cuh instantiated for each, behind
// the names of attention_prefill_scratch.h.
#include <stdexcept>
#include <string>

#include "kernels/attention_prefill_wgmma_ws.cuh"
#include "kernels/scratch/attention_prefill_scratch.cuh"
#include "kernels/scratch/attention_prefill_scratch.h"

namespace servelab::kernels::prefill_wgmma {

void launch_ws_scratch(const Params& p, int grid, WsVariant v, ScalarType dtype, cudaStream_t stream) {
  if (v == WsVariant::tma && !(tma_rows(p) > 0 && p.n_slots > 0)) v = WsVariant::pingpong;  // other layouts: v5.1
  if (v == WsVariant::fa11_vote && p.n_slots < kBN) v = WsVariant::fa8;  // no 128 consecutive slots (no 128-row map)
  switch (v) {
    case WsVariant::fa8:
    case WsVariant::fa10:
    case WsVariant::fa11:
      launch_ws(p, grid, v, dtype, stream);  // the production kernels
      break;
    case WsVariant::ws:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, false, 0>(p, grid, stream)), (launch_ws_t<__half, false, 0>(p, grid, stream)));
      break;
    case WsVariant::pingpong:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0>(p, grid, stream)), (launch_ws_t<__half, true, 0>(p, grid, stream)));
      break;
    case WsVariant::tma:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 1>(p, grid, stream)), (launch_ws_t<__half, true, 1>(p, grid, stream)));
      break;
    case WsVariant::lean:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 2>(p, grid, stream)), (launch_ws_t<__half, true, 2>(p, grid, stream)));
      break;
    case WsVariant::persist:
      launch_persist(p, grid, 0, dtype, stream);
      break;
    case WsVariant::fa5:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 4>(p, grid, stream)), (launch_ws_t<__half, true, 0, 4>(p, grid, stream)));
      break;
    case WsVariant::fa5_pack_early:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 1>(p, grid, stream)), (launch_ws_t<__half, true, 0, 1>(p, grid, stream)));
      break;
    case WsVariant::fa5_no_turns:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, false, 0, 4>(p, grid, stream)), (launch_ws_t<__half, false, 0, 4>(p, grid, stream)));
      break;
    case WsVariant::fa5_v51_order:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 5>(p, grid, stream)), (launch_ws_t<__half, true, 0, 5>(p, grid, stream)));
      break;
    case WsVariant::fa5_pack_after:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 0, 2>(p, grid, stream)));
      break;
    case WsVariant::fa5_uniform:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 3>(p, grid, stream)), (launch_ws_t<__half, true, 0, 3>(p, grid, stream)));
      break;
    case WsVariant::fa6:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6>(p, grid, stream)));
      break;
    case WsVariant::fa6_tree:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 7>(p, grid, stream)), (launch_ws_t<__half, true, 0, 7>(p, grid, stream)));
      break;
    case WsVariant::fa7_p16:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 16>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 16>(p, grid, stream)));
      break;
    case WsVariant::fa7_p24:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 24>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 24>(p, grid, stream)));
      break;
    case WsVariant::fa7_p32:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 32>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 32>(p, grid, stream)));
      break;
    case WsVariant::fa8_lean:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 2, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 2, 6, 0, 2>(p, grid, stream)));
      break;
    case WsVariant::fa6_lean:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 2, 6, 0, 0>(p, grid, stream)), (launch_ws_t<__half, true, 2, 6, 0, 0>(p, grid, stream)));
      break;
    case WsVariant::fa9:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 0, 2, true>(p, grid, stream)),
                           (launch_ws_t<__half, true, 0, 6, 0, 2, true>(p, grid, stream)));
      break;
    case WsVariant::fa11_vote:  // the same, decided per tile by a vote (call 1)
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 4, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 4, 6, 0, 2>(p, grid, stream)));
      break;
  }
}

}  // namespace servelab::kernels::prefill_wgmma

namespace servelab::kernels {
namespace {
void run_scratch(const PrefillAttentionArgs& a, prefill_wgmma::WsVariant v, cudaStream_t stream, int max_blocks = 0) {
  if (a.n_seqs == 0 || a.n_tokens == 0) return;
  int64_t grid = 0;
  const prefill_wgmma::Params p = prefill_wgmma::make_params(a, grid);
  if (v == prefill_wgmma::WsVariant::persist) prefill_wgmma::launch_persist(p, int(grid), max_blocks, a.dtype, stream);
  else prefill_wgmma::launch_ws_scratch(p, int(grid), v, a.dtype, stream);
}
using V = prefill_wgmma::WsVariant;
}  // namespace

void prefill_attention_wgmma_ws(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::ws, stream); }
void prefill_attention_wgmma_pingpong(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::pingpong, stream); }
void prefill_attention_wgmma_tma(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::tma, stream); }
void prefill_attention_wgmma_lean(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::lean, stream); }
void prefill_attention_wgmma_fa5(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::fa5, stream); }
void prefill_attention_wgmma_fa6(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::fa6, stream); }
void prefill_attention_wgmma_fa7(const PrefillAttentionArgs& a, cudaStream_t stream, int fma_share) {
  if (fma_share != 16 && fma_share != 24 && fma_share != 32)
    throw std::invalid_argument("prefill_attention_wgmma_fa7: fma_share must be 16, 24 or 32 (got " + std::to_string(fma_share) + ")");
  run_scratch(a, fma_share == 16 ? V::fa7_p16 : fma_share == 24 ? V::fa7_p24 : V::fa7_p32, stream);
}
void prefill_attention_wgmma_fa8_part(const PrefillAttentionArgs& a, cudaStream_t stream, int part) {
  if (part < 0 || part > 2) throw std::invalid_argument("prefill_attention_wgmma_fa8: part must be in 0..2 (got " + std::to_string(part) + ")");
  run_scratch(a, part == 0 ? V::fa8 : part == 1 ? V::fa8_lean : V::fa6_lean, stream);
}
void prefill_attention_wgmma_fa9(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::fa9, stream); }
void prefill_attention_wgmma_fa11_vote(const PrefillAttentionArgs& a, cudaStream_t stream) { run_scratch(a, V::fa11_vote, stream); }
void prefill_attention_wgmma_fa5_part(const PrefillAttentionArgs& a, cudaStream_t stream, int part) {
  static constexpr V kParts[] = {V::fa5, V::fa5_pack_early, V::fa5_pack_after, V::fa5_uniform, V::fa5_v51_order, V::fa5_no_turns, V::fa6, V::fa6_tree};
  if (part < 0 || part > 7) throw std::invalid_argument("prefill_attention_wgmma_fa5_part: part must be in 0..7 (got " + std::to_string(part) + ")");
  run_scratch(a, kParts[part], stream);
}
void prefill_attention_wgmma_persist(const PrefillAttentionArgs& a, cudaStream_t stream, int max_blocks) {
  if (max_blocks < 0) throw std::invalid_argument("prefill_attention_wgmma_persist: max_blocks must be >= 0 (got " + std::to_string(max_blocks) + ")");
  run_scratch(a, V::persist, stream, max_blocks);
}

}  // namespace servelab::kernels
