// CheckpointFiles (the CUDA loaders' view of a model folder): single and sharded folders give each
// tensor its file, checked against the spec; a folder without weights, a tensor the index lacks,
// a shard the index lists that is missing, and a wrong shape are errors naming the file.
#include "engine/model/checkpoint_files.h"

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "engine/model/synth.h"
#include "tests/backend/backend_test_util.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace checkpoint_files_test {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointFiles, SingleAndShardedFoldersGiveEveryTensorItsFile) {
  const ModelConfig c = testing::small_config(2);
  testing_util::TempDir one, many;
  synthesize_checkpoint(c, one.path(), 3);
  synthesize_checkpoint(c, many.path(), 3, 20'000);  // several shards
  CheckpointFiles a(one.path()), b(many.path());
  for (const TensorSpec& s : tensor_specs(c)) {
    const auto [fa, ta] = a.checked(s);
    const auto [fb, tb] = b.checked(s);
    EXPECT_EQ(ta->shape, s.shape);
    EXPECT_EQ(tb->shape, s.shape);
    EXPECT_EQ(std::filesystem::path(fa->path()).filename(), "model.safetensors");
  }
  EXPECT_EQ(a.opened().size(), 1u);
  EXPECT_GT(b.opened().size(), 1u) << "the shards were opened as their tensors were asked for";
}

TEST(CheckpointFiles, MissingFilesTensorsAndWrongShapesNameTheProblem) {
  const ModelConfig c = testing::small_config(2);
  testing_util::TempDir empty, many;
  EXPECT_NE(error_of([&] { CheckpointFiles f(empty.path()); }).find("neither model.safetensors"), std::string::npos);
  synthesize_checkpoint(c, many.path(), 3, 20'000);
  CheckpointFiles files(many.path());
  EXPECT_NE(error_of([&] { files.file_for("no.such.tensor"); }).find("missing tensor no.such.tensor in weight_map"),
            std::string::npos);
  TensorSpec wrong = tensor_specs(c).front();
  wrong.shape.back() += 1;
  EXPECT_NE(error_of([&] { files.checked(wrong); }).find("has shape"), std::string::npos);
  // A shard the index lists but the folder lacks.
  const TensorSpec last = tensor_specs(c).back();
  const std::string shard = std::filesystem::path(files.file_for(last.name).path()).filename().string();
  CheckpointFiles fresh(many.path());
  std::filesystem::remove(std::filesystem::path(many.path()) / shard);
  const std::string e = error_of([&] { fresh.checked(last); });
  EXPECT_NE(e.find("lists shard " + shard + ", which does not exist"), std::string::npos) << e;
}

}  // namespace checkpoint_files_test
}  // namespace servelab
