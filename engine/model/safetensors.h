#pragma once
// The safetensors format: 8-byte little-endian header length, a JSON header mapping each tensor
// name to {dtype, shape, data_offsets}, then the raw data. A memory-mapped reader that converts
// BF16/F16/F32 to fp32, and a streaming writer.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/model/config.h"

namespace servelab {

/// One tensor in a safetensors file.
struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      ///< as in the header: "BF16", "F16", "F32", "I64", ...
  bool supported = false;      ///< dtype is BF16, F16 or F32 (the only ones read_f32 converts)
  DType dtype = DType::f32;    ///< meaningful when supported
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int64_t begin = 0;           ///< byte offset of the data from the start of the file
  int64_t nbytes = 0;
};

/// A safetensors file, memory-mapped read-only. The constructor validates the header: every
/// tensor's byte range lies inside the file and matches shape × dtype size; errors name the file
/// and the tensor (std::runtime_error).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  /// Tensors in data-offset order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  /// nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(const std::string& name) const;
  /// The header's "__metadata__" string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// Raw bytes of a tensor of this file (little-endian, as stored).
  const uint8_t* data(const SafetensorsTensor& t) const { return base_ + t.begin; }
  /// Convert a tensor to fp32 into out[0..numel). Throws for unsupported dtypes.
  void read_f32(const SafetensorsTensor& t, float* out) const;
  /// Convert the named tensor to fp32. Throws naming the file when it is absent.
  std::vector<float> read_f32(const std::string& name) const;

 private:
  void release();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// A tensor to be written: name, dtype on disk and shape.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::bf16;
  std::vector<int64_t> shape;

  int64_t numel() const;
  int64_t nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }
};

/// Writes a safetensors file in one pass: the header (with __metadata__ {"format": "pt"}) is
/// written at construction, then each tensor's values are appended in the order given, as fp32
/// converted to the entry's dtype with round-to-nearest-even. Data is contiguous, as the
/// safetensors library requires; the header is padded with spaces to a multiple of 8 bytes.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<SafetensorsEntry> entries);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Append n values of the current tensor (a tensor may take several calls). Throws when more
  /// values are given than the entries hold.
  void append(const float* values, int64_t n);
  /// Flush and close; throws unless every tensor was written in full.
  void finish();

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::FILE* file_ = nullptr;
  size_t current_ = 0;      // tensor being written
  int64_t written_ = 0;     // values of it written so far
  std::vector<uint8_t> buffer_;
};

/// Write whole tensors (values.size() must equal entries.size(), each of numel values).
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::vector<const float*>& values);

}  // namespace servelab

namespace servelab {

/// A tensor given as raw little-endian bytes in any safetensors dtype ("F8_E4M3", "I32", "F16",
/// ...): what quantized checkpoints hold and the fp32 writer above cannot produce.
struct RawTensor {
  std::string name;
  std::string dtype_name;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  ///< numel × the dtype's size
};

/// Write raw tensors in the given order, header as SafetensorsWriter writes it. Throws
/// std::invalid_argument when a tensor's bytes do not match its shape and dtype,
/// std::runtime_error on I/O errors.
void write_safetensors_raw(const std::string& path, const std::vector<RawTensor>& tensors);

/// The element size of a safetensors dtype name, 0 when unknown.
int64_t safetensors_element_size(const std::string& dtype_name);

}  // namespace servelab
