#pragma once
// Argument checks shared by the KV managers; messages name the manager and the sequence.
#include <stdexcept>
#include <string>

#include "engine/request.h"

namespace servelab::kv_checks {

inline std::string label(const char* manager, const Sequence& seq) {
  return std::string(manager) + " KV: seq " + std::to_string(seq.id);
}

inline void require_tokens(const char* manager, const Sequence& seq, int n_tokens) {
  if (n_tokens < 0)
    throw std::logic_error(label(manager, seq) + ": n_tokens must be >= 0 (got " + std::to_string(n_tokens) + ")");
}

inline void require_allocated(const char* manager, const Sequence& seq, bool allocated) {
  if (seq.kv.allocated != allocated)
    throw std::logic_error(label(manager, seq) + (allocated ? " is not allocated" : " is already allocated"));
}

/// The three checks bound to one manager's name (a constant per manager file).
struct Checks {
  const char* manager;
  std::string label(const Sequence& seq) const { return kv_checks::label(manager, seq); }
  void require_tokens(const Sequence& seq, int n_tokens) const { kv_checks::require_tokens(manager, seq, n_tokens); }
  void require_allocated(const Sequence& seq, bool allocated) const {
    kv_checks::require_allocated(manager, seq, allocated);
  }
};

}  // namespace servelab::kv_checks
