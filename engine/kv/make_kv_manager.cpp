#include <memory>
#include <stdexcept>
#include <string>

#include "engine/kv/kv_manager.h"
#include "engine/kv/naive_kv.h"
#include "engine/kv/paged_kv.h"

namespace servelab {

std::unique_ptr<KvManager> make_kv_manager(const KvConfig& config, int64_t n_slots) {
  config.validate();
  switch (config.kind) {
    case KvKind::naive: return std::make_unique<NaiveKvManager>(config, n_slots);
    case KvKind::paged: return std::make_unique<PagedKvManager>(config, n_slots);
  }
  throw std::invalid_argument("kv.kind must be naive or paged");
}

}  // namespace servelab
