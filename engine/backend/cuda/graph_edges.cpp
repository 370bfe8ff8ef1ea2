#include "engine/backend/cuda/graph_edges.h"

#include <unordered_set>
#include <vector>

#include "kernels/cuda_check.h"

namespace servelab::cuda {

namespace {

bool is_kernel(cudaGraphNode_t n) {
  cudaGraphNodeType t{};
  CUDA_CHECK(cudaGraphNodeGetType(n, &t));
  return t == cudaGraphNodeTypeKernel;
}

}  // namespace

bool launched_with_pdl(cudaGraphNode_t node) {
  if (!is_kernel(node)) return false;
  cudaLaunchAttributeValue v{};
  if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeProgrammaticStreamSerialization, &v) != cudaSuccess) {
    cudaGetLastError();  // not kept on this node: clear the error
    return false;
  }
  return v.programmaticStreamSerializationAllowed != 0;
}

int programmatic_joins(cudaGraph_t graph) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  if (n == 0) return 0;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
  // nodes launched with PDL: a programmatic edge in, or the launch attribute kept on the node
  std::unordered_set<cudaGraphNode_t> pdl;
  for (size_t i = 0; i < n; ++i)
    if (data[i].type == cudaGraphDependencyTypeProgrammatic || (!pdl.count(to[i]) && launched_with_pdl(to[i])))
      pdl.insert(to[i]);
  int changed = 0;
  for (size_t i = 0; i < n; ++i) {
    const cudaGraphEdgeData& e = data[i];
    if (e.type != cudaGraphDependencyTypeDefault || e.from_port != 0 || e.to_port != 0 || !pdl.count(to[i]) ||
        !is_kernel(from[i]) || !is_kernel(to[i]))
      continue;
    cudaGraphEdgeData p{};
    p.from_port = cudaGraphKernelNodePortProgrammatic;
    p.type = cudaGraphDependencyTypeProgrammatic;
    CUDA_CHECK(cudaGraphRemoveDependencies(graph, &from[i], &to[i], &e, 1));
    CUDA_CHECK(cudaGraphAddDependencies(graph, &from[i], &to[i], &p, 1));
    ++changed;
  }
  return changed;
}

}  // namespace servelab::cuda
