// libFuzzer harness: dataset files (ShareGPT JSON, JSONL lengths) and JSONL traces. The first byte
// picks the reader; the rest is the file. Any file must load or throw std::runtime_error
// ("path:line: message"); what loads must hold the documented invariants.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "loadgen/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab;
  if (size == 0) return 0;
  const int which = data[0] % 3;
  const std::string path = fuzz::write_scratch("input", std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  try {
    if (which == 2) {
      const auto trace = load_trace(path);
      double last = 0;
      for (const auto& e : trace) {
        if (!std::isfinite(e.timestamp_s) || e.timestamp_s < last) std::abort();  // sorted, from 0
        if (e.prompt_tokens < 1 || e.output_tokens < 1) std::abort();
        last = e.timestamp_s;
      }
    } else {
      const Dataset d = load_dataset(path, which == 0 ? DatasetFormat::sharegpt : DatasetFormat::jsonl);
      if (d.entries.empty()) std::abort();  // "no usable entry" is an error
      for (const auto& e : d.entries)
        if (e.prompt_tokens < 1 || e.output_tokens < 1) std::abort();
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
