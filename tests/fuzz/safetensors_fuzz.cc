// libFuzzer harness: the safetensors header and tensor-table reader. Any file must open with every
// tensor's range inside the file, or be refused with std::runtime_error; reading a supported
// tensor must stay inside the mapping (ASan checks).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "engine/model/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab;
  const std::string path =
      fuzz::write_scratch("model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const SafetensorsFile f(path);
    for (const auto& t : f.tensors()) {
      if (t.begin < 0 || t.nbytes < 0 || static_cast<size_t>(t.begin + t.nbytes) > size) std::abort();
      if (t.supported && t.numel <= (1 << 16)) {
        std::vector<float> out(static_cast<size_t>(t.numel));
        f.read_f32(t, out.data());
      }
      if (f.find(t.name) == nullptr) std::abort();
    }
    (void)f.metadata();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
