// ModelWeights::random, synthesize_checkpoint and ModelWeights::load, against each other.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/half.h"
#include "engine/model/hf_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/synth.h"
#include "engine/model/tensors.h"
#include "engine/model/weights.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using testing_util::TempDir;

ModelConfig micro(DType dtype = DType::bf16) {
  ModelConfig c;
  c.name = "micro";
  c.hidden_size = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 96;
  c.vocab_size = 128;
  c.eos_token = 1;
  c.dtype = dtype;
  return c;
}

ModelConfig micro_qwen() {
  ModelConfig c = micro();
  c.name = "micro-qwen";
  c.attention_bias = true;
  c.tie_embeddings = true;
  c.rope_theta = 1e6f;
  c.rms_eps = 1e-6f;
  return c;
}

// Every tensor of a and b, compared by name, bit for bit.
void expect_same_weights(const ModelWeights& a, const ModelWeights& b) {
  for (const TensorSpec& s : tensor_specs(a.config)) {
    const std::vector<float>& va = tensor_storage(a, s.name);
    const std::vector<float>& vb = tensor_storage(b, s.name);
    ASSERT_EQ(va.size(), static_cast<size_t>(s.numel())) << s.name;
    ASSERT_EQ(vb.size(), va.size()) << s.name;
    for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << s.name << "[" << i << "]";
  }
}

std::string load_error(const std::string& dir) {
  try {
    ModelWeights::load(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Write the weights of `w` as one model.safetensors, letting `edit` change the entries first.
void write_checkpoint(const ModelWeights& w, const std::string& dir,
                      const std::function<void(std::vector<SafetensorsEntry>&, std::vector<std::vector<float>>&)>& edit) {
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<float>> values;
  for (const TensorSpec& s : tensor_specs(w.config)) {
    entries.push_back({s.name, w.config.dtype, s.shape});
    values.push_back(tensor_storage(w, s.name));
  }
  edit(entries, values);
  std::vector<const float*> ptrs;
  for (auto& v : values) ptrs.push_back(v.data());
  write_hf_config(w.config, dir + "/config.json");
  write_safetensors(dir + "/model.safetensors", entries, ptrs);
}

TEST(ModelWeights, RandomIsDeterministicAndScaled) {
  const ModelConfig c = preset("tiny");
  const ModelWeights a = ModelWeights::random(c, 7), b = ModelWeights::random(c, 7);
  expect_same_weights(a, b);
  const ModelWeights other = ModelWeights::random(c, 8);
  EXPECT_NE(a.layers[0].wq, other.layers[0].wq);
  EXPECT_NE(a.layers[0].wq, a.layers[1].wq);  // tensors draw from independent streams
  // Matrices: mean ~0, std ~1/sqrt(fan_in); norms near 1.
  double sum = 0, sq = 0;
  for (float x : a.layers[2].w_down) sum += x, sq += double(x) * x;
  const double n = static_cast<double>(a.layers[2].w_down.size());
  EXPECT_NEAR(sum / n, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sq / n), 1.0 / std::sqrt(704.0), 0.002);
  for (float x : a.final_norm) EXPECT_NEAR(x, 1.0f, 0.6f);
  EXPECT_EQ(a.lm_head.size(), size_t(2048) * 256);
  EXPECT_TRUE(a.layers[0].bq.empty());
  for (float x : a.embedding) ASSERT_EQ(x, round_bf16(x));  // values are bf16-representable
}

TEST(ModelWeights, RandomSlicesMatchTheWholeTensor) {
  const ModelConfig c = micro(DType::f32);
  const TensorSpec spec = tensor_specs(c)[2];  // model.layers.0.self_attn.q_proj.weight
  ASSERT_EQ(spec.numel(), 64 * 64);
  std::vector<float> whole(spec.numel()), parts(spec.numel());
  fill_random(spec, 3, DType::f32, 0, spec.numel(), whole.data());
  fill_random(spec, 3, DType::f32, 0, 5, parts.data());  // odd boundaries split a Box-Muller pair
  fill_random(spec, 3, DType::f32, 5, 1000, parts.data() + 5);
  fill_random(spec, 3, DType::f32, 1005, spec.numel() - 1005, parts.data() + 1005);
  EXPECT_EQ(whole, parts);
}

TEST(ModelWeights, SynthThenLoadEqualsRandomForEveryDtype) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    TempDir dir;
    const ModelConfig c = micro(dtype);
    synthesize_checkpoint(c, dir.path(), 42);
    EXPECT_TRUE(fs::exists(dir.file("model.safetensors")));
    EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
    const ModelWeights loaded = ModelWeights::load(dir.path());
    EXPECT_EQ(loaded.config.dtype, dtype);
    EXPECT_EQ(loaded.config.n_kv_heads, 2);
    EXPECT_EQ(loaded.config.name, "micro");
    expect_same_weights(loaded, ModelWeights::random(c, 42));
    SafetensorsFile f(dir.file("model.safetensors"));
    EXPECT_EQ(f.find("model.embed_tokens.weight")->dtype, dtype);
  }
}

TEST(ModelWeights, ShardedSynthWritesIndexAndLoads) {
  TempDir dir;
  const ModelConfig c = micro();
  synthesize_checkpoint(c, dir.path(), 5, /*max_shard_bytes=*/40'000);
  const std::vector<ShardPlan> plan = plan_shards(c, 40'000);
  ASSERT_GT(plan.size(), 2u);
  EXPECT_EQ(plan[0].file, "model-00001-of-0000" + std::to_string(plan.size()) + ".safetensors");
  std::ifstream in(dir.file("model.safetensors.index.json"));
  const nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), c.n_params() * 2);
  EXPECT_EQ(index["weight_map"].size(), tensor_specs(c).size());
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], plan.back().file);
  for (const ShardPlan& s : plan) {
    EXPECT_TRUE(fs::exists(dir.file(s.file))) << s.file;
    EXPECT_TRUE(s.nbytes <= 40'000 || s.tensors.size() == 1) << s.file;
  }
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  expect_same_weights(ModelWeights::load(dir.path()), ModelWeights::random(c, 5));

  // Re-synthesizing unsharded into the same folder leaves no stale shards behind.
  synthesize_checkpoint(c, dir.path(), 6);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file(plan[0].file)));
  expect_same_weights(ModelWeights::load(dir.path()), ModelWeights::random(c, 6));
}

TEST(ModelWeights, QwenStyleBiasAndTiedEmbeddingsRoundTrip) {
  TempDir dir;
  const ModelConfig c = micro_qwen();
  synthesize_checkpoint(c, dir.path(), 9);
  const ModelWeights w = ModelWeights::load(dir.path());
  EXPECT_TRUE(w.config.attention_bias);
  EXPECT_TRUE(w.config.tie_embeddings);
  EXPECT_EQ(w.config.rope_theta, 1e6f);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(&w.output_matrix(), &w.embedding);
  ASSERT_EQ(w.layers[1].bq.size(), 64u);
  ASSERT_EQ(w.layers[1].bk.size(), 32u);
  ASSERT_EQ(w.layers[1].bv.size(), 32u);
  expect_same_weights(w, ModelWeights::random(c, 9));
  SafetensorsFile f(dir.file("model.safetensors"));
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  ASSERT_NE(f.find("model.layers.0.self_attn.k_proj.bias"), nullptr);
}

TEST(ModelWeights, WrongShapeNamesTheTensor) {
  TempDir dir;
  const ModelWeights w = ModelWeights::random(micro(), 1);
  write_checkpoint(w, dir.path(), [](auto& entries, auto& values) {
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].name == "model.layers.1.mlp.up_proj.weight") {
        entries[i].shape = {96, 63};
        values[i].resize(96 * 63);
      }
  });
  const std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find("model.safetensors: tensor model.layers.1.mlp.up_proj.weight has shape [96, 63], "
                     "expected [96, 64]"), std::string::npos) << msg;
}

TEST(ModelWeights, MissingAndUnexpectedTensorsAreNamed) {
  TempDir dir;
  const ModelWeights w = ModelWeights::random(micro(), 1);
  write_checkpoint(w, dir.path(), [](auto& entries, auto& values) {
    entries.erase(entries.begin() + 3);  // model.layers.0.self_attn.k_proj.weight
    values.erase(values.begin() + 3);
  });
  std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find("missing tensor model.layers.0.self_attn.k_proj.weight"), std::string::npos) << msg;

  write_checkpoint(w, dir.path(), [](auto& entries, auto& values) {
    entries.push_back({"model.layers.0.mlp.extra.weight", DType::bf16, {4}});
    values.push_back(std::vector<float>(4, 0.0f));
  });
  msg = load_error(dir.path());
  EXPECT_NE(msg.find("unexpected tensor model.layers.0.mlp.extra.weight"), std::string::npos) << msg;

  // Checkpoints that carry rotary inv_freq buffers still load.
  write_checkpoint(w, dir.path(), [](auto& entries, auto& values) {
    entries.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::f32, {8}});
    values.push_back(std::vector<float>(8, 0.5f));
  });
  expect_same_weights(ModelWeights::load(dir.path()), w);
}

TEST(ModelWeights, TensorListedInIndexButNotInShard) {
  TempDir dir;
  const ModelConfig c = micro();
  synthesize_checkpoint(c, dir.path(), 5, 40'000);
  const std::string index_path = dir.file("model.safetensors.index.json");
  nlohmann::json index;
  {
    std::ifstream in(index_path);
    index = nlohmann::json::parse(in);
  }
  index["weight_map"]["model.norm.weight"] = "model-00001-of-" + index["weight_map"]["lm_head.weight"].get<std::string>().substr(15);
  {
    std::ofstream out(index_path);
    out << index.dump();
  }
  const std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find("model-00001-of-"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing tensor model.norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("listed in model.safetensors.index.json"), std::string::npos) << msg;

  index["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  {
    std::ofstream out(index_path);
    out << index.dump();
  }
  EXPECT_NE(load_error(dir.path()).find("model-00009-of-00009.safetensors, which does not exist"), std::string::npos)
      << load_error(dir.path());
}

TEST(ModelWeights, TruncatedCheckpointNamesFileAndTensor) {
  TempDir dir;
  synthesize_checkpoint(micro(), dir.path(), 2);
  const std::string file = dir.file("model.safetensors");
  fs::resize_file(file, fs::file_size(file) - 100);
  const std::string msg = load_error(dir.path());
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor lm_head.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(ModelWeights, MissingFilesAreNamed) {
  TempDir dir;
  EXPECT_NE(load_error(dir.path()).find("config.json"), std::string::npos) << load_error(dir.path());
  write_hf_config(micro(), dir.file("config.json"));
  EXPECT_NE(load_error(dir.path()).find("neither model.safetensors"), std::string::npos) << load_error(dir.path());
  EXPECT_NE(load_error(dir.file("nope")).find("not a directory"), std::string::npos);
}

TEST(Synth, ParseByteSize) {
  EXPECT_EQ(parse_byte_size("2GB"), 2'000'000'000);
  EXPECT_EQ(parse_byte_size("500MB"), 500'000'000);
  EXPECT_EQ(parse_byte_size("1.5kb"), 1500);
  EXPECT_EQ(parse_byte_size("4GiB"), int64_t(4) << 30);
  EXPECT_EQ(parse_byte_size("123"), 123);
  EXPECT_THROW(parse_byte_size("lots"), std::invalid_argument);
  EXPECT_THROW(parse_byte_size("0"), std::invalid_argument);
  EXPECT_THROW(parse_byte_size("5XB"), std::invalid_argument);
  EXPECT_THROW(plan_shards(micro(), 0), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
