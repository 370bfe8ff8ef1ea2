// `servelab model synth|info` end to end, when the binary has been built beside the tests.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/model/tensors.h"
#include "engine/model/weights.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string output;
};

CliResult run_cli(const std::string& exe, const std::string& args, const testing_util::TempDir& dir) {
  const std::string out = dir.file("cli_output.txt");
  const int status = std::system((exe + " " + args + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

TEST(ModelCli, SynthThenInfoAndErrors) {
  const std::string exe = std::string(SERVELAB_BINARY_DIR) + "/servelab";
  if (!fs::exists(exe)) GTEST_SKIP() << exe << " not built";
  testing_util::TempDir dir;
  const std::string ckpt = dir.file("tiny");

  CliResult r = run_cli(exe, "model synth --preset tiny --out " + ckpt + " --seed 3 --max-shard-size 3MB", dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(ckpt + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(ckpt + "/model-00003-of-00003.safetensors")) << r.output;
  const ModelWeights w = ModelWeights::load(ckpt);
  EXPECT_EQ(w.layers[2].w_up, ModelWeights::random(preset("tiny"), 3).layers[2].w_up);

  r = run_cli(exe, "model info " + ckpt, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("3868928"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1.00 KiB at bf16"), std::string::npos) << r.output;  // 2*4*64*2 bytes
  EXPECT_NE(r.output.find("model-00001-of-00003.safetensors"), std::string::npos) << r.output;

  r = run_cli(exe, "model info --preset llama2-7b --tensors", dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("512.00 KiB at bf16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.layers.31.mlp.down_proj.weight"), std::string::npos);

  // --quantization: the same random weights written in a quantized checkpoint's layout, which
  // loads back as that format and dequantizes to what quantizing the weights gives.
  for (const std::string fmt : {"awq", "gptq", "compressed-tensors", "fp8", "compressed-tensors-int4"}) {
    const std::string q = dir.file("tiny-" + fmt);
    const bool ct4 = fmt == "compressed-tensors-int4", int4 = fmt == "awq" || fmt == "gptq" || ct4;
    r = run_cli(exe, "model synth --preset tiny --out " + q + " --seed 3 --group-size 64 --quantization " + fmt +
                         (fmt == "gptq" ? " --act-order" : ct4 ? " --asymmetric" : ""), dir);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("its Linears quantized as " + fmt), std::string::npos) << r.output;
    const ModelWeights qw = ModelWeights::load(q, ModelWeights::QuantLinears::dequantize_and_keep);
    EXPECT_EQ(qw.quant.method, fmt == "awq" ? Quantization::int4_awq
                               : fmt == "gptq" || ct4 ? Quantization::int4_gptq
                                                      : Quantization::fp8)
        << fmt;
    EXPECT_EQ(qw.quant.act_order, fmt == "gptq") << fmt;
    EXPECT_EQ(qw.quant.pack_quantized, ct4) << fmt;
    if (ct4) {  // --asymmetric: zero points other than 8 stored and read back
      bool other = false;
      for (uint8_t z : qw.quant_linears[0].zeros) other = other || z != 8;
      EXPECT_TRUE(other);
    }
    if (int4) EXPECT_EQ(qw.quant.group_size, 64) << fmt;
    ASSERT_EQ(qw.quant_linears.size(), size_t(qw.config.n_layers) * 7) << fmt;
    const ModelWeights plain = ModelWeights::random(preset("tiny"), 3);
    const std::vector<float>& src = plain.layers[1].w_down;
    const std::vector<float>& got = qw.layers[1].w_down;
    ASSERT_EQ(got.size(), src.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < src.size(); ++i) err += (got[i] - src[i]) * (got[i] - src[i]), norm += src[i] * src[i];
    EXPECT_LT(std::sqrt(err / norm), int4 ? 0.15 : 0.05) << fmt << ": the weights quantized";
  }
  r = run_cli(exe, "model synth --preset tiny --out " + dir.file("x") + " --quantization int3", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--quantization int3 is not one of compressed-tensors, fp8, awq, gptq, compressed-tensors-int4"),
            std::string::npos)
      << r.output;
  r = run_cli(exe, "model synth --preset tiny --out " + dir.file("x") + " --quantization gptq --asymmetric", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--asymmetric is for --quantization compressed-tensors-int4"), std::string::npos) << r.output;
  r = run_cli(exe, "model synth --preset tiny --out " + dir.file("x") + " --quantization awq --act-order", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--act-order is GPTQ's"), std::string::npos) << r.output;

  r = run_cli(exe, "model synth --preset nope --out " + dir.file("x"), dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown model preset 'nope'"), std::string::npos) << r.output;
  EXPECT_EQ(run_cli(exe, "model synth --preset tiny --out " + dir.file("x") + " --dtype int8", dir).code, 2);
  EXPECT_EQ(run_cli(exe, "model synth --preset tiny --out " + dir.file("x") + " --max-shard-size lots", dir).code, 2);
  EXPECT_EQ(run_cli(exe, "model synth --preset tiny", dir).code, 2);  // --out missing
  EXPECT_EQ(run_cli(exe, "model info", dir).code, 2);
  r = run_cli(exe, "model info " + dir.file("absent"), dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("absent"), std::string::npos) << r.output;
  r = run_cli(exe, "model synth --help", dir);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("Examples:"), std::string::npos);
}

}  // namespace
}  // namespace servelab
