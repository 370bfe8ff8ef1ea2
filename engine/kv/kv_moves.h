#pragma once
// The K/V moves the engine asks a backend to make: copies inside the arena (copy-on-write) and
// runs between the arena and the host swap pool. Plain data: backends read these, never the
// KvManager that decided them.
#include <cstdint>

namespace servelab {

/// A run of slots to copy (copy-on-write of a shared block).
struct KvCopy {
  int64_t src_slot = 0;
  int64_t dst_slot = 0;
  int64_t n_slots = 0;
};

/// A run of n_slots consecutive slots moved between the KV arena and the host swap pool (swap
/// out: arena slots -> pool slots; swap in: back). Built by SwapSpace::runs.
struct KvSwap {
  int64_t device_slot = 0;  ///< first arena slot
  int64_t host_slot = 0;    ///< first slot of the host pool (HostKvPool)
  int64_t n_slots = 0;
};

}  // namespace servelab
