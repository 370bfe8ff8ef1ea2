// write_safetensors_raw: tensors already in their on-disk bytes (FP8 codes, packed int32).
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"

namespace servelab {

void write_safetensors_raw(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const int64_t size = safetensors_element_size(t.dtype_name);
    if (size == 0) throw std::invalid_argument("tensor " + t.name + ": unknown safetensors dtype " + t.dtype_name);
    if (int64_t(t.bytes.size()) != numel * size)
      throw std::invalid_argument("tensor " + t.name + ": " + std::to_string(t.bytes.size()) + " bytes, shape " +
                                  shape_string(t.shape) + " of " + t.dtype_name + " needs " + std::to_string(numel * size));
    if (header.contains(t.name)) throw std::invalid_argument("tensor " + t.name + " listed twice");
    header[t.name] = {{"dtype", t.dtype_name}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error(path + ": cannot create");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const RawTensor& t : tensors) ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw std::runtime_error(path + ": write failed");
}

}  // namespace servelab
