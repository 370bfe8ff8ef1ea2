#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "engine/model/safetensors.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace safetensors_test {  // named, not anonymous: a unity batch shares one translation unit

using testing_util::TempDir;

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
}

TEST(Safetensors, WriteThenReadEveryDtype) {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.5f, 0.1f, 3.14159f, 1e-3f, -7.0f};
  const std::vector<float> b = {0.5f, 0.25f, -0.125f};
  const std::vector<float> c = {1.0f / 3, 2.0f / 3};
  const std::string path = dir.file("x.safetensors");
  write_safetensors(path,
                    {{"a", DType::bf16, {2, 3}}, {"b", DType::f32, {3}}, {"c", DType::f16, {1, 1, 2}}},
                    {a.data(), b.data(), c.data()});
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorsTensor* ta = f.find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::bf16);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->nbytes, 12);
  EXPECT_EQ(f.find("c")->shape, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(f.find("nope"), nullptr);

  const std::vector<float> ra = f.read_f32("a"), rb = f.read_f32("b"), rc = f.read_f32("c");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(ra[i], round_bf16(a[i])) << i;
  EXPECT_EQ(rb, b);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(rc[i], round_f16(c[i])) << i;
  EXPECT_NE(ra[2], a[2]);  // 0.1 is not a bf16 value: the conversion really rounded

  // Header is padded to 8 bytes and data is contiguous: the file ends with the last tensor.
  const auto size = std::filesystem::file_size(path);
  const SafetensorsTensor& last = f.tensors().back();
  EXPECT_EQ(static_cast<int64_t>(size), last.begin + last.nbytes);
  EXPECT_EQ(f.tensors().front().begin % 8, 0);
  EXPECT_THROW(f.read_f32("nope"), std::runtime_error);
}

TEST(Safetensors, StreamingAppendAcrossTensorBoundaries) {
  TempDir dir;
  const std::string path = dir.file("s.safetensors");
  std::vector<float> all(10);
  for (int i = 0; i < 10; ++i) all[i] = static_cast<float>(i);
  {
    SafetensorsWriter w(path, {{"p", DType::f32, {4}}, {"empty", DType::f32, {0}}, {"q", DType::bf16, {6}}});
    w.append(all.data(), 3);
    w.append(all.data() + 3, 5);  // finishes p, skips the empty tensor, starts q
    EXPECT_THROW(w.finish(), std::runtime_error);  // q not complete yet
  }
  {
    SafetensorsWriter w(path, {{"p", DType::f32, {4}}, {"q", DType::bf16, {6}}});
    w.append(all.data(), 7);
    w.append(all.data() + 7, 3);
    EXPECT_THROW(w.append(all.data(), 1), std::runtime_error);
    w.finish();
  }
  SafetensorsFile f(path);
  EXPECT_EQ(f.read_f32("p"), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(f.read_f32("q"), (std::vector<float>{4, 5, 6, 7, 8, 9}));
}

TEST(Safetensors, TruncatedFileNamesFileAndTensor) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::vector<float> v(64, 1.0f);
  write_safetensors(path, {{"first", DType::bf16, {8, 4}}, {"second.weight", DType::bf16, {32}}},
                    {v.data(), v.data()});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  const std::string msg = error_of(path);
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("second.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Safetensors, BadHeadersAreRejectedWithReasons) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8);
  EXPECT_NE(error_of(p).find("needs 12"), std::string::npos) << error_of(p);
  write_raw(p, R"({"t": {"dtype": "Q4", "shape": [3], "data_offsets": [0, 8]}})", 8);
  EXPECT_NE(error_of(p).find("unknown dtype"), std::string::npos) << error_of(p);
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [3]}})", 12);
  EXPECT_NE(error_of(p).find("data_offsets"), std::string::npos) << error_of(p);
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "u": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  EXPECT_NE(error_of(p).find("overlap"), std::string::npos) << error_of(p);
  write_raw(p, "{not json", 0);
  EXPECT_NE(error_of(p).find("not valid JSON"), std::string::npos) << error_of(p);
  {
    std::ofstream out(p, std::ios::binary);
    out << "abc";
  }
  EXPECT_NE(error_of(p).find("too short"), std::string::npos) << error_of(p);
  {
    std::ofstream out(p, std::ios::binary);
    out << std::string("\xff\xff\xff\xff\x00\x00\x00\x00{}", 10);
  }
  EXPECT_NE(error_of(p).find("header length"), std::string::npos) << error_of(p);
  EXPECT_NE(error_of(dir.file("absent.safetensors")).find("cannot open"), std::string::npos);
}

TEST(Safetensors, UnsupportedDtypeListedButNotConverted) {
  TempDir dir;
  const std::string p = dir.file("i64.safetensors");
  write_raw(p, R"({"__metadata__": {"format": "pt"}, "ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16);
  SafetensorsFile f(p);
  ASSERT_NE(f.find("ids"), nullptr);
  EXPECT_FALSE(f.find("ids")->supported);
  EXPECT_THROW(f.read_f32("ids"), std::runtime_error);
}

}  // namespace safetensors_test
}  // namespace servelab
