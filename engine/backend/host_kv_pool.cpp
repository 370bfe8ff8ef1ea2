#include <stdexcept>
#include <string>

#include "engine/backend/backend.h"

namespace servelab {

void HostKvPool::check(std::span<const KvSwap> runs, int64_t arena_slots, const char* who) const {
  for (const KvSwap& r : runs) {
    if (r.n_slots <= 0) continue;
    if (r.device_slot < 0 || r.device_slot + r.n_slots > arena_slots || r.host_slot < 0 ||
        r.host_slot + r.n_slots > n_slots_)
      throw std::out_of_range(std::string(who) + ": run of " + std::to_string(r.n_slots) + " slots, arena slot " +
                              std::to_string(r.device_slot) + " <-> host slot " + std::to_string(r.host_slot) +
                              ", leaves the arena [0, " + std::to_string(arena_slots) + ") or the host pool [0, " +
                              std::to_string(n_slots_) + ")");
  }
}

}  // namespace servelab
