#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/half.h"
#include "engine/model/tensors.h"

namespace servelab {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the safetensors library's own limit

std::runtime_error file_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what);
}

const char* safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
  }
  return "?";
}

}  // namespace

// Element size of every dtype the format defines, so unsupported tensors are still validated.
int64_t safetensors_element_size(const std::string& dtype) {
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E4M3" || dtype == "F8_E5M2")
    return 1;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  return 0;
}

namespace {

SafetensorsTensor parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e) {
  auto bad = [&](const std::string& what) { return file_error(path, "tensor " + name + ": " + what); };
  if (!e.is_object()) throw bad("header entry is not an object");
  SafetensorsTensor t;
  t.name = name;
  if (!e.contains("dtype") || !e["dtype"].is_string()) throw bad("missing string \"dtype\"");
  t.dtype_name = e["dtype"].get<std::string>();
  const int64_t esize = safetensors_element_size(t.dtype_name);
  if (esize == 0) throw bad("unknown dtype \"" + t.dtype_name + "\"");
  if (t.dtype_name == "F32" || t.dtype_name == "F16" || t.dtype_name == "BF16") {
    t.supported = true;
    t.dtype = parse_dtype(t.dtype_name);
  }
  if (!e.contains("shape") || !e["shape"].is_array()) throw bad("missing array \"shape\"");
  for (const auto& s : e["shape"]) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0) throw bad("shape entries must be integers >= 0");
    const int64_t dim = s.get<int64_t>();
    if (dim > 0 && t.numel > std::numeric_limits<int64_t>::max() / 16 / dim) throw bad("shape too large");
    t.shape.push_back(dim);
    t.numel *= dim;
  }
  const auto& off = e.contains("data_offsets") ? e["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw bad("\"data_offsets\" must be two integers [begin, end]");
  const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (b > end) throw bad("data_offsets begin " + std::to_string(b) + " > end " + std::to_string(end));
  if (end > uint64_t(std::numeric_limits<int64_t>::max() / 2)) throw bad("data_offsets out of range");
  t.begin = static_cast<int64_t>(b);
  t.nbytes = static_cast<int64_t>(end - b);
  if (t.nbytes != t.numel * esize)
    throw bad("data_offsets span " + std::to_string(t.nbytes) + " bytes but shape " + shape_string(t.shape) +
              " of " + t.dtype_name + " needs " + std::to_string(t.numel * esize));
  return t;
}

template <typename Convert>
void convert_u16(const uint8_t* src, int64_t n, float* out, Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = convert(h);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw file_error(path, std::string("cannot stat: ") + std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw file_error(path, "file is " + std::to_string(size_) + " bytes, too short for a safetensors header");
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw file_error(path, std::string("cannot mmap: ") + std::strerror(err));
  base_ = static_cast<const uint8_t*>(p);
  try {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base_[i];  // little-endian
    if (header_len > kMaxHeaderBytes || header_len > size_ - 8)
      throw file_error(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                                 std::to_string(size_) + " bytes): not a safetensors file, or truncated");
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(base_ + 8, base_ + 8 + header_len);
    } catch (const nlohmann::json::exception& e) {
      throw file_error(path, std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) throw file_error(path, "header is not a JSON object");
    const int64_t data_start = 8 + static_cast<int64_t>(header_len);
    const int64_t data_size = static_cast<int64_t>(size_) - data_start;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        if (!it.value().is_object()) throw file_error(path, "__metadata__ is not an object");
        for (auto m = it.value().begin(); m != it.value().end(); ++m)
          metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
        continue;
      }
      SafetensorsTensor t = parse_entry(path, it.key(), it.value());
      if (t.begin + t.nbytes > data_size)
        throw file_error(path, "tensor " + t.name + " needs bytes [" + std::to_string(t.begin) + ", " +
                                   std::to_string(t.begin + t.nbytes) + ") of the data section, but the " +
                                   "file holds only " + std::to_string(data_size) + " (truncated?)");
      t.begin += data_start;
      tensors_.push_back(std::move(t));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (i > 0 && tensors_[i].begin < tensors_[i - 1].begin + tensors_[i - 1].nbytes)
        throw file_error(path, "tensors " + tensors_[i - 1].name + " and " + tensors_[i].name + " overlap");
      index_[tensors_[i].name] = i;
    }
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      base_(o.base_),
      size_(o.size_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {
  o.base_ = nullptr;
  o.size_ = 0;
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    base_ = o.base_;
    size_ = o.size_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read_f32(const SafetensorsTensor& t, float* out) const {
  if (!t.supported)
    throw file_error(path_, "tensor " + t.name + " has dtype " + t.dtype_name + "; only BF16, F16 and F32 are read");
  if (t.numel == 0) return;  // an empty tensor: out may be null (memcpy must not see it)
  const uint8_t* src = data(t);
  switch (t.dtype) {
    case DType::f32: std::memcpy(out, src, static_cast<size_t>(t.nbytes)); break;
    case DType::bf16: convert_u16(src, t.numel, out, bf16_to_f32); break;
    case DType::f16: convert_u16(src, t.numel, out, f16_to_f32); break;
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (!t) throw file_error(path_, "no tensor named " + name);
  std::vector<float> out(static_cast<size_t>(t->numel));
  read_f32(*t, out.data());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writer

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<SafetensorsEntry> entries)
    : path_(path), entries_(std::move(entries)) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (const auto& e : entries_) {
    if (header.contains(e.name)) throw file_error(path, "tensor " + e.name + " listed twice");
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.nbytes()}}};
    offset += e.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw file_error(path, std::string("cannot create: ") + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  if (std::fwrite(len, 1, 8, file_) != 8 || std::fwrite(text.data(), 1, text.size(), file_) != text.size())
    throw file_error(path, std::string("write failed: ") + std::strerror(errno));
  while (current_ < entries_.size() && entries_[current_].numel() == 0) ++current_;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) std::fclose(file_);
}

void SafetensorsWriter::append(const float* values, int64_t n) {
  while (n > 0) {
    if (current_ >= entries_.size())
      throw file_error(path_, "more values appended than the " + std::to_string(entries_.size()) +
                                  " tensors hold");
    const SafetensorsEntry& e = entries_[current_];
    const int64_t take = std::min(n, e.numel() - written_);
    const size_t esize = dtype_size(e.dtype);
    buffer_.resize(static_cast<size_t>(take) * esize);
    if (e.dtype == DType::f32) {
      std::memcpy(buffer_.data(), values, buffer_.size());
    } else {
      for (int64_t i = 0; i < take; ++i) {
        const uint16_t h = e.dtype == DType::bf16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
        std::memcpy(buffer_.data() + 2 * i, &h, 2);
      }
    }
    if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
      throw file_error(path_, "write of tensor " + e.name + " failed: " + std::strerror(errno));
    values += take;
    n -= take;
    written_ += take;
    while (current_ < entries_.size() && written_ == entries_[current_].numel()) {
      ++current_;
      written_ = 0;
    }
  }
}

void SafetensorsWriter::finish() {
  if (current_ < entries_.size())
    throw file_error(path_, "tensor " + entries_[current_].name + " was not written in full (" +
                                std::to_string(written_) + " of " +
                                std::to_string(entries_[current_].numel()) + " values)");
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) throw file_error(path_, std::string("close failed: ") + std::strerror(errno));
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::vector<const float*>& values) {
  if (values.size() != entries.size())
    throw std::invalid_argument("write_safetensors: " + std::to_string(values.size()) + " value arrays for " +
                                std::to_string(entries.size()) + " tensors");
  SafetensorsWriter w(path, entries);
  for (size_t i = 0; i < entries.size(); ++i) w.append(values[i], entries[i].numel());
  w.finish();
}

}  // namespace servelab
