// Persistent block tables: the step's changed entries, uploaded inside the packed step input,
// written into the device-resident table before attention reads it (engine/backend/cuda/
// block_table.h computes the list). One thread per entry, grid-stride over a fixed grid, the count
// read on the device so a CUDA graph replays the launch with each step's list.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/ops.h"

namespace servelab::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 64;  // 16k entries per pass; more stride (rare: a table rebuilt)

__global__ void apply_block_table_updates_kernel(int32_t* table, const BlockTableUpdate* updates,
                                                 const int32_t* count) {
  const int n = *count;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    const BlockTableUpdate u = updates[i];
    table[u.index] = u.block;
  }
}

}  // namespace

void apply_block_table_updates(int32_t* table, const BlockTableUpdate* updates, const int32_t* count,
                               int grid_updates, cudaStream_t stream) {
  if (grid_updates <= 0) return;
  const int blocks = std::min(kMaxBlocks, (grid_updates + kThreads - 1) / kThreads);
  apply_block_table_updates_kernel<<<blocks, kThreads, 0, stream>>>(table, updates, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
