// Damaged checkpoints: truncated files, offsets past the end, shape × dtype mismatches, a missing
// shard, and a model too large for the machine. Each is a std::runtime_error naming the file
// (never a crash or std::bad_alloc).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "engine/model/memory_check.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace {

/// A safetensors file with the given header text and `n_data` zero bytes of data.
std::string write_raw(const std::string& path, const std::string& header, size_t n_data, uint64_t len_override = 0) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = len_override ? len_override : header.size();
  char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(le, 8);
  out << header << std::string(n_data, '\0');
  return path;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
    for (const auto& t : f.tensors())
      if (t.supported) (void)f.read_f32(t.name);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(DamagedCheckpoint, SafetensorsRangesShapesAndLengthsChecked) {
  testing_util::TempDir tmp;
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(error_of(write_raw(tmp.file("ok.safetensors"), ok, 16)), "");
  // Data cut short: the tensor's range runs past the end of the file.
  EXPECT_NE(error_of(write_raw(tmp.file("cut.safetensors"), ok, 10)).find("cut.safetensors"), std::string::npos);
  // Offsets far beyond the file, and an end before the begin.
  for (const char* h : {R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[1000000,1000016]}})",
                        R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[16,0]}})",
                        R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,18446744073709551615]}})",
                        R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})",      // shape × 4 != 16
                        R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})",     // dtype size
                        R"({"a":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})",    // negative dims
                        R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
                        R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0]}})",
                        R"({"a":{"dtype":7,"shape":[2,2],"data_offsets":[0,16]}})",
                        R"([1,2,3])", R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16])"}) {
    SCOPED_TRACE(h);
    const std::string e = error_of(write_raw(tmp.file("bad.safetensors"), h, 16));
    EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
  }
  // A header length beyond the file, and a file shorter than the length field itself.
  EXPECT_NE(error_of(write_raw(tmp.file("len.safetensors"), ok, 16, 1ull << 40)).find("len.safetensors"),
            std::string::npos);
  {
    std::ofstream(tmp.file("tiny.safetensors"), std::ios::binary) << "abc";
  }
  EXPECT_NE(error_of(tmp.file("tiny.safetensors")).find("tiny.safetensors"), std::string::npos);
}

TEST(DamagedCheckpoint, ModelTooLargeForMemoryRefusedWithTheFigure) {
  ModelConfig c;
  c.name = "huge";
  c.hidden_size = 65536;
  c.n_layers = 1000;
  c.n_heads = 64;
  c.n_kv_heads = 64;
  c.intermediate_size = 262144;
  c.vocab_size = 32000;
  try {
    check_weights_fit(c, "test", int64_t(8) << 30);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model huge needs"), std::string::npos) << m;
    EXPECT_NE(m.find("8.0 GiB of memory"), std::string::npos) << m;
  }
  // The same through the loader of random weights, against this machine's real memory.
  EXPECT_THROW((void)ModelWeights::random(c, 1), std::runtime_error);
  // A small model fits.
  ModelConfig small;
  EXPECT_NO_THROW(check_weights_fit(small, "test", int64_t(1) << 30));
  // Absurd sizes do not overflow into a small figure.
  c.hidden_size = 2147483520;
  c.intermediate_size = 2147483647;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  EXPECT_GT(fp32_weight_bytes(c), 1e19);
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

// Found by fuzz_safetensors: reading an empty tensor passed a null pointer to memcpy (UBSan).
TEST(DamagedCheckpoint, EmptyTensorReadsAsEmpty) {
  testing_util::TempDir tmp;
  const std::string path = write_raw(tmp.file("empty.safetensors"),
                                     R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                                     R"("h":{"dtype":"BF16","shape":[0],"data_offsets":[0,0]}})",
                                     0);
  const SafetensorsFile f(path);
  EXPECT_TRUE(f.read_f32("e").empty());
  EXPECT_TRUE(f.read_f32("h").empty());
}

}  // namespace
}  // namespace servelab
