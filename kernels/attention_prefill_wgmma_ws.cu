// The warp-specialized wgmma prefill kernels prefill_attention runs on Hopper at head_dim 128
// (attention_prefill_wgmma_ws.cuh has the template): fa10 (fa8's consumers on the TMA producer)
// where a key tile is whole 128-row boxes, fa11 (TMA per tile where its slots are consecutive,
// else fa8's gather) on smaller paged blocks, and fa8, their fallback and the frozen baseline the
// tests hold them to (the same bits). The superseded passes (v5.1 ... fa9, fa11_vote, v7):
// kernels/scratch/, built with -DSERVELAB_KERNEL_SCRATCH=ON.
#include <stdexcept>

#include "kernels/attention_prefill_wgmma_ws.cuh"

namespace servelab::kernels::prefill_wgmma {

void launch_ws(const Params& p, int grid, WsVariant v, ScalarType dtype, cudaStream_t stream) {
  if (v == WsVariant::fa10 && !(tma_rows(p) > 0 && p.n_slots > 0)) v = WsVariant::fa8;  // other layouts: fa8
  if (v == WsVariant::fa11 && p.n_slots < kBN) v = WsVariant::fa8;                      // no 128 consecutive slots (no 128-row map)
  switch (v) {
    case WsVariant::fa8:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 0, 2>(p, grid, stream)));
      return;
    case WsVariant::fa10:  // fa8's consumers, v6's TMA producer
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 1, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 1, 6, 0, 2>(p, grid, stream)));
      return;
    case WsVariant::fa11:  // fa8's consumers; per tile TMA (consecutive slots) or fa8's gather
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 3, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 3, 6, 0, 2>(p, grid, stream)));
      return;
    default:
      throw std::invalid_argument("prefill_wgmma::launch_ws: a superseded variant (kernels/scratch/, -DSERVELAB_KERNEL_SCRATCH=ON)");
  }
}

}  // namespace servelab::kernels::prefill_wgmma
