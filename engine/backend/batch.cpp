#include "engine/backend/backend.h"

namespace servelab {

int Batch::n_tokens() const {
  int n = 0;
  for (const auto& e : entries) n += e.n_new;
  return n;
}

}  // namespace servelab
