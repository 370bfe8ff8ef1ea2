// The cuda backend's LoRA slot image (engine/backend/cuda/lora_pack.h): run through the kernels'
// plain C++ references (shrink over the stacked A, segmented expand), each group of each layer
// gives every adapted linear's delta scale · x · Aᵀ · Bᵀ in its own output columns, zeros for the
// linears the adapter leaves alone, whatever the gap between the adapter's rank and the pool's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <random>
#include <vector>

#include "engine/backend/cuda/lora_pack.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/model/half.h"
#include "kernels/ref/lora_ref.h"
#include "tests/backend/backend_test_util.h"

namespace servelab::cuda {
namespace lora_pack_test {  // named, not anonymous: a unity batch shares one translation unit

TEST(LoraPack, SlotImageThroughTheKernelReferencesGivesEachLinearsDelta) {
  using T = LoraTarget;
  const ModelConfig c = testing::small_config(2);  // q 64 wide, k and v 32, ffn 128, 2 layers
  LoraAdapter a = random_lora(c, "t", 3, 6.0f, {T::q, T::v, T::gate, T::down}, 5);
  const int rank = lora_pool_rank(a.rank);
  ASSERT_EQ(rank, 8);
  std::vector<uint16_t> image(size_t(lora_image_elems(c, rank)), 0xffff);  // poisoned
  pack_lora_image(c, rank, a, false, image.data());
  const auto groups = lora_group_shapes(c);
  ASSERT_EQ(groups[0].out, 64 + 32 + 32);
  ASSERT_EQ(groups[2].seg_end[0], 128);

  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int rows = 2;
  const int32_t slot[rows] = {0, 0};
  int64_t at = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (const LoraGroupShape& g : groups) {
      std::vector<float> ga(size_t(g.a_elems(rank))), gb(size_t(g.b_elems(rank)));
      for (size_t i = 0; i < ga.size(); ++i) ga[i] = bf16_to_f32(image[size_t(at) + i]);
      for (size_t i = 0; i < gb.size(); ++i) gb[i] = bf16_to_f32(image[size_t(at) + ga.size() + i]);
      at += g.a_elems(rank) + g.b_elems(rank);
      std::vector<float> x(size_t(rows) * g.in);
      for (float& v : x) v = normal(rng);
      std::vector<float> xa(size_t(rows) * g.n_seg * rank), y(size_t(rows) * g.out, 0.0f);
      kernels::lora_shrink_ref(x.data(), slot, rows, ga.data(), &a.scale, g.in, g.n_seg * rank, xa.data());
      kernels::lora_expand_segments_ref(xa.data(), slot, rows, gb.data(), g.out, rank, g.n_seg, g.seg_end, y.data(),
                                        g.out, 0);
      for (int m = 0; m < g.n_seg; ++m) {
        const LoraPair& p = a.layers[size_t(l)][size_t(g.targets[m])];
        const int first = m > 0 ? g.seg_end[m - 1] : 0;
        for (int r = 0; r < rows; ++r)
          for (int col = first; col < g.seg_end[m]; ++col) {
            double want = 0.0;  // scale · Σ_k (x · A_kᵀ) · B[col, k], A and B rounded to bf16
            for (int k = 0; p.present() && k < a.rank; ++k) {
              double xak = 0.0;
              for (int i = 0; i < g.in; ++i) xak += double(x[size_t(r) * g.in + i]) * round_bf16(p.a[size_t(k) * g.in + i]);
              want += xak * round_bf16(p.b[size_t(col - first) * a.rank + k]);
            }
            want *= a.scale;
            EXPECT_NEAR(y[size_t(r) * g.out + col], want, 1e-4 * (1 + std::fabs(want)))
                << "layer " << l << ", " << peft_module_name(g.targets[m]) << ", row " << r << ", column " << col;
          }
      }
    }
  EXPECT_EQ(at, lora_image_elems(c, rank));
  EXPECT_THROW(pack_lora_image(c, 2, a, false, image.data()), std::invalid_argument);  // rank 3 > 2
}

TEST(LoraPack, AnFfnOrderPermutesGateUpsBRowsAndDownsAColumns) {
  // An act-order checkpoint's gate|up rows in down's order (quant_pack.h's row_order): the image
  // takes gate's and up's B rows and down's A columns in that order; everything else as without.
  using T = LoraTarget;
  const ModelConfig c = testing::small_config(2);  // ffn 128, 2 layers
  const LoraAdapter a = random_lora(c, "t", 4, 8.0f, {T::q, T::o, T::gate, T::up, T::down}, 7);
  const int rank = lora_pool_rank(a.rank);
  std::vector<int32_t> order(size_t(c.intermediate_size));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  const std::vector<std::vector<int32_t>> orders = {order, {}};  // layer 1 keeps its order
  std::vector<uint16_t> plain(size_t(lora_image_elems(c, rank))), moved(plain.size());
  pack_lora_image(c, rank, a, false, plain.data());
  pack_lora_image(c, rank, a, false, moved.data(), 2, &orders);
  const auto groups = lora_group_shapes(c);
  int64_t at = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (const LoraGroupShape& g : groups) {
      const bool reorders = l == 0 && (g.targets[0] == T::gate || g.targets[0] == T::down);
      const uint16_t *pa = plain.data() + at, *ma = moved.data() + at;
      const uint16_t *pb = pa + g.a_elems(rank), *mb = ma + g.a_elems(rank);
      for (int64_t row = 0; row < int64_t(g.n_seg) * rank; ++row)  // A [n_seg · rank, in]
        for (int i = 0; i < g.in; ++i) {
          const int from = reorders && g.targets[0] == T::down ? order[size_t(i)] : i;
          ASSERT_EQ(ma[row * g.in + i], pa[row * g.in + from]) << "layer " << l << " A row " << row << " column " << i;
        }
      for (int col = 0; col < g.out; ++col) {  // B [out, rank]: gate's rows, then up's
        const int seg = g.targets[0] == T::gate && col >= g.seg_end[0] ? g.seg_end[0] : 0;
        const int from = reorders && g.targets[0] == T::gate ? seg + order[size_t(col - seg)] : col;
        for (int k = 0; k < rank; ++k)
          ASSERT_EQ(mb[int64_t(col) * rank + k], pb[int64_t(from) * rank + k]) << "layer " << l << " B row " << col;
      }
      at += g.a_elems(rank) + g.b_elems(rank);
    }
  EXPECT_NE(moved, plain);
  const std::vector<std::vector<int32_t>> short_orders = {order};  // one layer's for two
  EXPECT_THROW(pack_lora_image(c, rank, a, false, moved.data(), 1, &short_orders), std::invalid_argument);
}

/// A backend with device memory whose gpu_memory_utilization share leaves `budget` KV bytes.
class BudgetBackend : public ForwardingBackend {
 public:
  BudgetBackend(std::unique_ptr<Backend> inner, int64_t budget) : ForwardingBackend(std::move(inner)), budget_(budget) {}
  std::optional<int64_t> kv_bytes_for_memory_share(double, int, int) const override { return budget_; }

 private:
  int64_t budget_;
};

TEST(LoraPack, ThePoolsBytesComeOutOfAGpuMemoryUtilizationBudget) {
  // llama2-7b at rank 16 on all seven linears: 80 MB a slot (docs/lora.md), a float scale each;
  // rank 12 takes the pool rank 16's room.
  const ModelConfig m = preset("llama2-7b");
  const int64_t slot = 2 * lora_image_elems(m, 16);
  EXPECT_EQ(slot, 2 * int64_t(32) * (48 * 4096 + 12288 * 16 + 16 * 4096 + 4096 * 16 + 32 * 4096 + 22016 * 16 +
                                     16 * 11008 + 4096 * 16));
  EXPECT_NEAR(double(slot) / 1e6, 80.0, 0.1);
  EXPECT_EQ(lora_pool_bytes(m, 8, 16), 8 * (slot + 4));
  EXPECT_EQ(lora_pool_bytes(m, 8, 12), lora_pool_bytes(m, 8, 16));
  EXPECT_EQ(lora_pool_bytes(m, 0, 16), 0);
  // The KV budget: the share's bytes, less the pool when LoRA is on; a pool larger than the share
  // is refused naming both.
  const int64_t share = int64_t(10) << 30;
  BudgetBackend b(std::make_unique<SimBackend>(m, SimCostModel::roofline(SimDevice::preset("h100"))), share);
  EXPECT_EQ(kv_bytes_for_gpu_utilization(b, 0.9, 2048, 64), share);
  const LoraConfig lora{.enabled = true, .max_loras = 64, .max_lora_rank = 16};
  EXPECT_EQ(kv_bytes_for_gpu_utilization(b, 0.9, 2048, 64, lora), share - lora_pool_bytes(m, 64, 16));
  const LoraConfig huge{.enabled = true, .max_loras = 200, .max_lora_rank = 64};
  try {
    kv_bytes_for_gpu_utilization(b, 0.9, 2048, 64, huge);
    FAIL() << "a pool over the budget was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("LoRA adapter pool"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_loras 200"), std::string::npos) << e.what();
  }
}

}  // namespace lora_pack_test
}  // namespace servelab::cuda
