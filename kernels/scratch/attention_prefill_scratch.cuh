#pragma once
// What the scratch kernels share beyond kernels/attention_prefill_wgmma.cuh: their launchers.
#include "kernels/attention_prefill_wgmma.cuh"

namespace servelab::kernels::prefill_wgmma {

/// Any WsVariant: the superseded ones here, fa8 / fa10 / fa11 through the production launch_ws.
void launch_ws_scratch(const Params& p, int grid, WsVariant v, ScalarType dtype, cudaStream_t stream);
/// v7: the persistent kernel over max_items work items (an upper bound; the kernel counts the
/// real ones) on min(max_items, SMs, max_blocks if > 0) blocks.
void launch_persist(const Params& p, int max_items, int max_blocks, ScalarType dtype, cudaStream_t stream);

}  // namespace servelab::kernels::prefill_wgmma
