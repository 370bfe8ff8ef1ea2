// PEFT adapter folders: our writer's folders read back as written (f32 exactly, bf16 within its
// rounding), alpha / r and rsLoRA scaling, and a clear error for each way a folder can be wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/lora/lora_registry.h"
#include "engine/lora/peft.h"
#include "engine/model/safetensors.h"

namespace servelab {
namespace lora_peft_test {  // named, not anonymous: a unity batch shares one translation unit
namespace fs = std::filesystem;

ModelConfig tiny_config() {
  ModelConfig c;
  c.name = "lora-tiny";
  c.hidden_size = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 48;
  c.vocab_size = 64;
  c.dtype = DType::f32;
  return c;
}

/// A temp path of this test alone: ctest runs the tests as parallel processes, and a folder one
/// test rewrites while another maps its safetensors file ends in SIGBUS.
std::string test_tmp_path(const std::string& stem) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + (t ? t->name() : "none") + "_" + std::to_string(::getpid())))
      .string();
}

std::string folder(const std::string& name) { return test_tmp_path("lora_" + name); }

const std::vector<LoraTarget> kAll = {LoraTarget::q, LoraTarget::k,    LoraTarget::v,   LoraTarget::o,
                                      LoraTarget::gate, LoraTarget::up, LoraTarget::down};

/// Rewrites key `key` of the folder's adapter_config.json.
void edit_config(const std::string& dir, const std::string& key, const nlohmann::json& value) {
  const fs::path p = fs::path(dir) / "adapter_config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(p));
  j[key] = value;
  std::ofstream(p) << j.dump();
}

std::string error_of(const std::string& dir, int max_rank = 64) {
  try {
    read_peft_adapter(dir, "x", tiny_config(), max_rank);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(LoraPeft, RoundTripsEveryTargetInF32AndBf16) {
  const ModelConfig c = tiny_config();
  const LoraAdapter a = random_lora(c, "a", 8, 16.0f, kAll, 7);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string dir = folder(std::string("roundtrip_") + to_string(dtype));
    write_peft_adapter(dir, a, dtype);
    const LoraAdapter b = read_peft_adapter(dir, "a", c, 16);
    EXPECT_EQ(b.rank, 8);
    EXPECT_FLOAT_EQ(b.scale, 2.0f);  // alpha / r
    EXPECT_EQ(b.targets, a.targets);
    for (int l = 0; l < c.n_layers; ++l)
      for (LoraTarget t : kAll) {
        const LoraPair& x = a.layers[size_t(l)][size_t(t)];
        const LoraPair& y = b.layers[size_t(l)][size_t(t)];
        ASSERT_EQ(x.a.size(), y.a.size());
        ASSERT_EQ(x.b.size(), y.b.size());
        for (size_t i = 0; i < x.a.size(); ++i) EXPECT_NEAR(y.a[i], x.a[i], dtype == DType::f32 ? 0.0 : std::abs(x.a[i]) / 128);
        for (size_t i = 0; i < x.b.size(); ++i) EXPECT_NEAR(y.b[i], x.b[i], dtype == DType::f32 ? 0.0 : std::abs(x.b[i]) / 128);
      }
  }
}

TEST(LoraPeft, ReadsPeftTensorNamesAndScalesWithRsLora) {
  const ModelConfig c = tiny_config();
  const std::string dir = folder("rslora");
  write_peft_adapter(dir, random_lora(c, "a", 4, 8.0f, {LoraTarget::q, LoraTarget::v}, 1));
  const SafetensorsFile f((fs::path(dir) / "adapter_model.safetensors").string());
  ASSERT_NE(f.find("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"), nullptr);
  EXPECT_EQ(f.find("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight")->shape,
            (std::vector<int64_t>{c.kv_dim(), 4}));
  EXPECT_FLOAT_EQ(read_peft_adapter(dir, "a", c, 16).scale, 2.0f);
  edit_config(dir, "use_rslora", true);
  EXPECT_FLOAT_EQ(read_peft_adapter(dir, "a", c, 16).scale, 4.0f);  // alpha / sqrt(r)
  edit_config(dir, "target_modules", "all-linear");
  EXPECT_NE(error_of(dir).find("missing tensor"), std::string::npos) << error_of(dir);
}

TEST(LoraPeft, BadFoldersGetErrorsNamingTheProblem) {
  const ModelConfig c = tiny_config();
  const std::string ok = folder("good");
  write_peft_adapter(ok, random_lora(c, "a", 8, 8.0f, {LoraTarget::q, LoraTarget::down}, 2));
  EXPECT_EQ(error_of(ok), "");
  EXPECT_NE(error_of(ok, 4).find("rank r = 8 is outside [1, max_lora_rank = 4]"), std::string::npos) << error_of(ok, 4);
  EXPECT_NE(error_of(folder("nowhere")).find("no such folder"), std::string::npos);

  auto copy = [&](const std::string& name) {
    const std::string d = folder(name);
    fs::remove_all(d);
    fs::copy(ok, d);
    return d;
  };
  std::string d = copy("no_weights");
  fs::remove(fs::path(d) / "adapter_model.safetensors");
  EXPECT_NE(error_of(d).find("no adapter_model.safetensors"), std::string::npos);
  std::ofstream(fs::path(d) / "adapter_model.bin") << "pickle";
  EXPECT_NE(error_of(d).find("adapter_model.bin only"), std::string::npos);
  d = copy("no_config");
  fs::remove(fs::path(d) / "adapter_config.json");
  EXPECT_NE(error_of(d).find("no adapter_config.json"), std::string::npos);

  d = copy("unknown_target");
  edit_config(d, "target_modules", nlohmann::json::array({"q_proj", "embed_tokens"}));
  EXPECT_NE(error_of(d).find("target_modules names \"embed_tokens\""), std::string::npos) << error_of(d);
  edit_config(d, "target_modules", ".*proj");
  EXPECT_NE(error_of(d).find("is a regex"), std::string::npos);
  edit_config(d, "target_modules", nlohmann::json::array({"q_proj"}));  // the file still has down_proj
  EXPECT_NE(error_of(d).find("which target_modules leaves out"), std::string::npos) << error_of(d);
  d = copy("dora");
  edit_config(d, "use_dora", true);
  EXPECT_NE(error_of(d).find("use_dora (DoRA) is not supported"), std::string::npos);

  // An adapter trained for another shape: its tensors name the shape the base model needs.
  ModelConfig wide = c;
  wide.hidden_size = 64;
  d = folder("wrong_shape");
  write_peft_adapter(d, random_lora(wide, "w", 8, 8.0f, {LoraTarget::q}, 3));
  EXPECT_NE(error_of(d).find("has shape [8, 64], the base model and r need [8, 32]"), std::string::npos) << error_of(d);
  ModelConfig deep = c;
  deep.n_layers = 3;
  d = folder("deeper");
  write_peft_adapter(d, random_lora(deep, "d", 8, 8.0f, {LoraTarget::q}, 4));
  EXPECT_NE(error_of(d).find("is for layer 2; the base model has 2"), std::string::npos) << error_of(d);
}

TEST(LoraPeft, RegistryHoldsMaxCpuLorasAndReloadsTheRest) {
  const ModelConfig c = tiny_config();
  LoraConfig cfg;
  cfg.enabled = true;
  cfg.max_loras = 1;
  cfg.max_cpu_loras = 2;
  LoraRegistry reg(c, cfg);
  for (int i = 0; i < 3; ++i) {
    const std::string d = folder("reg" + std::to_string(i));
    write_peft_adapter(d, random_lora(c, "r", 4, 4.0f, {LoraTarget::o}, 10 + i));
    reg.add("r" + std::to_string(i), d);
  }
  EXPECT_THROW(reg.add("r0", folder("reg0")), std::invalid_argument);
  EXPECT_THROW(reg.add("bad", folder("nowhere")), std::runtime_error);
  EXPECT_FALSE(reg.contains("bad"));
  const auto list = reg.list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_FALSE(list[0].in_host_memory);  // the least recent of three, with room for two
  EXPECT_TRUE(list[2].in_host_memory);
  const uint64_t id0 = list[0].id;
  const auto r0 = reg.get("r0");  // read again from its folder, same id
  ASSERT_TRUE(r0);
  EXPECT_EQ(r0->id, id0);
  EXPECT_EQ(reg.n_reloads(), 1);
  EXPECT_EQ(reg.get("nope"), nullptr);
  EXPECT_TRUE(reg.remove("r0"));
  EXPECT_FALSE(reg.remove("r0"));
  reg.add("r0", folder("reg0"));
  EXPECT_NE(reg.get("r0")->id, id0);  // a new registration: its prefix-cache key is new too
}

}  // namespace lora_peft_test
}  // namespace servelab
