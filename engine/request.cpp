#include "engine/request.h"

namespace servelab {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::length: return "length";
    case FinishReason::eos: return "eos";
    case FinishReason::rejected: return "rejected";
    case FinishReason::aborted: return "aborted";
  }
  return "?";
}

}  // namespace servelab
