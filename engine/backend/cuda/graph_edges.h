#pragma once
// A pass over a captured CUDA graph (cuda_backend.cpp, LoRA decode graphs): joins made
// programmatic. Stream capture turns a launch with programmatic dependent launch (launch_pdl,
// kernels/common.cuh) into a programmatic edge from the kernel before it on its stream, so its
// blocks start while that kernel finishes; but the join of a side stream (cudaStreamWaitEvent: the
// LoRA shrink and expand beside a product, cuda_ops.h LoraHook) stays a full edge, and the kernel
// after the join (RoPE + K/V write, SiLU·mul, the next norm) starts only once the side stream's
// last kernel is done. Every kernel launched with launch_pdl waits (pdl_wait: griddepcontrol.wait,
// which waits for every programmatic predecessor to complete with its memory visible) before it
// reads anything an earlier kernel of the step wrote, so its other incoming edges from kernels
// can be programmatic too.
#include <cuda_runtime.h>

namespace servelab::cuda {

/// Every full (default) edge from a kernel node into a kernel node launched with PDL (a
/// programmatic incoming edge, or the launch attribute on the node) made programmatic. Returns how many
/// edges changed. Call after cudaStreamEndCapture, before cudaGraphInstantiate.
int programmatic_joins(cudaGraph_t graph);

/// Whether a kernel node carries the programmatic-stream-serialization launch attribute (how
/// stream capture may keep a launch_pdl launch instead of, or beside, a programmatic edge).
bool launched_with_pdl(cudaGraphNode_t node);

}  // namespace servelab::cuda
