// The cuda backend's KV moves: copies between arena slots (the prefix cache's copy-on-write,
// beam forks) and swaps to and from the pinned host pool (preemption by swap), for bf16/fp16
// arenas (rows of whole slots) and FP8 arenas (pages of 16 slots split by head: kernels/kv_fp8.h).
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace servelab {

void CudaBackend::copy_slots(std::span<const KvCopy> copies) {
  Impl& m = *impl_;
  // Granularity: the largest run length dividing every source, destination and length.
  int64_t g = 0;
  for (const KvCopy& c : copies) {
    if (c.n_slots <= 0) continue;
    if (c.src_slot < 0 || c.dst_slot < 0 || c.src_slot + c.n_slots > m.n_slots || c.dst_slot + c.n_slots > m.n_slots)
      throw std::out_of_range("CudaBackend::copy_slots: run [" + std::to_string(c.src_slot) + ", +" +
                              std::to_string(c.n_slots) + ") -> " + std::to_string(c.dst_slot) +
                              " is outside the arena of " + std::to_string(m.n_slots) + " slots");
    g = std::gcd(g, std::gcd(c.n_slots, std::gcd(c.src_slot, c.dst_slot)));
  }
  if (g == 0) return;
  // FP8 arenas: runs of whole pages are runs of bytes; other runs go slot by slot (kernels/kv_fp8.h).
  if (m.kv_fp8 && g % k::kFp8KvPageSlots != 0) g = 1;
  std::vector<int64_t> pairs;
  for (const KvCopy& c : copies)
    for (int64_t i = 0; i < c.n_slots / g; ++i) {
      pairs.push_back(c.src_slot / g + i);
      pairs.push_back(c.dst_slot / g + i);
    }
  const int32_t* dev_pairs = m.upload_slots(pairs, "copy_slots");  // block indices are < n_slots too
  if (m.kv_fp8 && g == 1)
    k::copy_slots_fp8(m.arena_ptrs.get<void*>(), 2 * config().n_layers, dev_pairs, static_cast<int>(pairs.size() / 2),
                      m.local_kv_heads, config().head_dim(), m.stream);
  else
    k::copy_blocks(m.arena_ptrs.get<void*>(), 2 * config().n_layers, dev_pairs, static_cast<int>(pairs.size() / 2),
                 g * m.row_bytes, m.stream);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

std::unique_ptr<HostKvPool> CudaBackend::make_host_pool(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("CudaBackend::make_host_pool: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  const size_t bytes = size_t(n_slots) * size_t(kv_bytes_per_slot());
  void* host = nullptr;
  const cudaError_t e = cudaHostAlloc(&host, bytes, cudaHostAllocMapped);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("CudaBackend: cannot allocate " + std::to_string(bytes) +
                             " bytes of pinned host memory for the swap pool (" + cudaGetErrorString(e) +
                             "); lower engine.swap_space");
  }
  void* device = nullptr;
  if (cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFreeHost(host);
    throw std::runtime_error("CudaBackend: the swap pool's pinned memory cannot be mapped into the device");
  }
  return std::make_unique<HostKvPool>(host, device, n_slots, kv_bytes_per_slot(), true,
                                      [](void* p) { cudaFreeHost(p); });
}

namespace {
/// Runs grouped by contiguous host slots: one gather/scatter launch per group, whose device slots
/// (in host order) start at `first` of the index list.
struct HostGroup {
  int64_t host_slot = 0;
  int64_t n_slots = 0;
  size_t first = 0;
};

std::vector<HostGroup> host_groups(std::span<const KvSwap> runs, std::vector<int64_t>& device_slots) {
  std::vector<KvSwap> sorted;
  for (const KvSwap& r : runs)
    if (r.n_slots > 0) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const KvSwap& a, const KvSwap& b) { return a.host_slot < b.host_slot; });
  std::vector<HostGroup> groups;
  device_slots.clear();
  for (const KvSwap& r : sorted) {
    if (groups.empty() || groups.back().host_slot + groups.back().n_slots != r.host_slot)
      groups.push_back({r.host_slot, 0, device_slots.size()});
    groups.back().n_slots += r.n_slots;
    for (int64_t i = 0; i < r.n_slots; ++i) device_slots.push_back(r.device_slot + i);
  }
  return groups;
}
}  // namespace

// Pool layout [host slot][layer][K|V][n_kv_heads * head_dim] in the dtype (gather_blocks' order, one slot
// = 2 * n_layers rows of row_bytes; with an FP8 KV cache each row is the slot's codes then its scales,
// gathered from its page by gather_slots_fp8): the kernels read and write the mapped pinned pool directly,
// one launch per run of contiguous host slots (SwapSpace hands a sequence one region when it can).
void CudaBackend::swap_out(std::span<const KvSwap> runs, HostKvPool& pool) {
  Impl& m = *impl_;
  pool.check(runs, m.n_slots, "CudaBackend::swap_out");
  if (!pool.device_view() || pool.bytes_per_slot() != kv_bytes_per_slot())
    throw std::invalid_argument("CudaBackend::swap_out: the host pool was not made by this backend");
  std::vector<int64_t> slots;
  const std::vector<HostGroup> groups = host_groups(runs, slots);
  if (groups.empty()) return;
  const int32_t* idx = m.upload_slots(slots, "swap_out");
  auto* dst = static_cast<uint8_t*>(pool.device_view());
  for (const HostGroup& g : groups)
    if (m.kv_fp8)  // a slot's rows and scales are spread over its page (kernels/kv_fp8.h)
      k::gather_slots_fp8(m.arena_ptrs.get<void*>(), 2 * config().n_layers, idx + g.first, static_cast<int>(g.n_slots),
                          m.local_kv_heads, config().head_dim(), dst + g.host_slot * pool.bytes_per_slot(), m.stream);
    else
      k::gather_blocks(m.arena_ptrs.get<void*>(), 2 * config().n_layers, idx + g.first, static_cast<int>(g.n_slots),
                       m.row_bytes, dst + g.host_slot * pool.bytes_per_slot(), m.stream);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaBackend::swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) {
  Impl& m = *impl_;
  pool.check(runs, m.n_slots, "CudaBackend::swap_in");
  if (!pool.device_view() || pool.bytes_per_slot() != kv_bytes_per_slot())
    throw std::invalid_argument("CudaBackend::swap_in: the host pool was not made by this backend");
  std::vector<int64_t> slots;
  const std::vector<HostGroup> groups = host_groups(runs, slots);
  if (groups.empty()) return;
  const int32_t* idx = m.upload_slots(slots, "swap_in");
  const auto* src = static_cast<const uint8_t*>(pool.device_view());
  for (const HostGroup& g : groups)
    if (m.kv_fp8)
      k::scatter_slots_fp8(m.arena_ptrs.get<void*>(), 2 * config().n_layers, idx + g.first, static_cast<int>(g.n_slots),
                           m.local_kv_heads, config().head_dim(), src + g.host_slot * pool.bytes_per_slot(), m.stream);
    else
      k::scatter_blocks(m.arena_ptrs.get<void*>(), 2 * config().n_layers, idx + g.first, static_cast<int>(g.n_slots),
                        m.row_bytes, src + g.host_slot * pool.bytes_per_slot(), m.stream);
  CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

}  // namespace servelab
