#include <memory>
#include <stdexcept>
#include <string>

#include "engine/kv/kv_manager.h"
#include "engine/kv/naive_kv.h"
#include "engine/kv/paged_kv.h"

namespace servelab {

bool KvManager::allocate_slots_for(Sequence& seq, int n) {
  if (!seq.kv.allocated) {
    if (!can_allocate(seq, n)) return false;
    allocate(seq, n);
    return true;
  }
  if (slots_needed(seq, n) == 0) return true;  // held already (slots_needed counts copy-on-write too)
  if (!can_grow(seq, n)) return false;
  grow(seq, n);
  return true;
}

std::unique_ptr<KvManager> make_kv_manager(const KvConfig& config, int64_t n_slots) {
  config.validate();
  switch (config.kind) {
    case KvKind::naive: return std::make_unique<NaiveKvManager>(config, n_slots);
    case KvKind::paged: return std::make_unique<PagedKvManager>(config, n_slots);
  }
  throw std::invalid_argument("kv.kind must be naive or paged");
}

}  // namespace servelab
