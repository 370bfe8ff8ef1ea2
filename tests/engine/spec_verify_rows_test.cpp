// Verification steps run as decode steps of one-row sequences (engine/backend/cuda/verify_rows.h,
// what lets the cuda backend replay them as decode CUDA graphs): the transform's arrays, the steps
// it refuses, and on the cpu backend a speculative run whose verification steps all go through it
// producing the tokens of the run without drafts, greedy and sampled.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda/verify_rows.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/model/residual_scale.h"
#include "engine/model/weights.h"
#include "engine/spec/draft_weights.h"
#include "engine/spec/model_proposer.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace spec_verify_rows_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

/// Sequence 0 decodes one row at position 9; sequence 1 verifies 2 drafts (positions 4..6).
kernels::StepInput two_sequences(kernels::KvLayoutKind kind) {
  kernels::StepInput in;
  in.kv_kind = kind;
  in.block_size = 4;
  in.token_ids = {11, 21, 22, 23};
  in.positions = {9, 4, 5, 6};
  in.slot_mapping = {41, 8, 9, 10};
  in.query_start = {0, 1, 4};
  in.context_lens = {10, 7};
  in.seq_ids = {100, 200};
  if (kind == kernels::KvLayoutKind::paged) {
    in.block_table_stride = 3;
    in.block_tables = {7, 9, 10, 2, 3, 0};
  } else {
    in.base_slots = {32, 4};
  }
  for (int i = 0; i < 4; ++i) {
    in.sample_rows.push_back(i);
    in.temperature.push_back(0.5f * float(i));
    in.top_k.push_back(0);
    in.top_p.push_back(1.0f);
    in.seed.push_back(5);
    in.seq_key.push_back(uint64_t(i < 1 ? 100 : 200));
    in.sample_position.push_back(in.positions[size_t(i)] + 1);
    in.mask_index.push_back(-1);
    in.draft_token.push_back(i == 1 || i == 2 ? 22 + i : -1);
    in.draft_dist.push_back(-1);
  }
  in.validate();
  return in;
}

TEST(VerifyRows, EveryRowBecomesAOneRowSequenceOfItsOwnContext) {
  for (const auto kind : {kernels::KvLayoutKind::paged, kernels::KvLayoutKind::naive}) {
    const kernels::StepInput in = two_sequences(kind);
    ASSERT_TRUE(cuda::verification_as_decode_ok(in));
    kernels::StepInput out;
    std::vector<int32_t> seq_of_row;
    cuda::verification_as_decode(in, out, &seq_of_row);
    EXPECT_NO_THROW(out.validate());
    EXPECT_TRUE(out.decode_only);
    EXPECT_EQ(out.query_start, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(out.context_lens, (std::vector<int32_t>{10, 5, 6, 7}));
    EXPECT_EQ(out.seq_ids, (std::vector<uint64_t>{100, 200, 200, 200}));
    EXPECT_EQ(seq_of_row, (std::vector<int32_t>{0, 1, 1, 1}));
    // Per-row and per-draw arrays unchanged, in order.
    EXPECT_EQ(out.token_ids, in.token_ids);
    EXPECT_EQ(out.positions, in.positions);
    EXPECT_EQ(out.slot_mapping, in.slot_mapping);
    EXPECT_EQ(out.sample_rows, in.sample_rows);
    EXPECT_EQ(out.temperature, in.temperature);
    EXPECT_EQ(out.draft_token, in.draft_token);
    if (kind == kernels::KvLayoutKind::paged)
      EXPECT_EQ(out.block_tables, (std::vector<int32_t>{7, 9, 10, 2, 3, 0, 2, 3, 0, 2, 3, 0}));
    else
      EXPECT_EQ(out.base_slots, (std::vector<int64_t>{32, 4, 4, 4}));
  }
}

// The row spans decode_attention_rows reads: the last row of each sequence carries its row count,
// the rows before it 0 (sequence 0 decodes one row, sequence 1 verifies 2 drafts in 3 rows).
TEST(VerifyRows, SpansGroupTheRowsIntoTheirSequences) {
  Step step;
  step.in = two_sequences(kernels::KvLayoutKind::paged);
  Step flat;
  std::vector<int32_t> spans;
  ASSERT_TRUE(cuda::plan_verification_as_decode(step, flat, nullptr, &spans));
  EXPECT_EQ(spans, (std::vector<int32_t>{1, 0, 0, 3}));
  EXPECT_EQ(flat.in.context_lens, (std::vector<int32_t>{10, 5, 6, 7}));
}

TEST(VerifyRows, StepsOfOtherShapesAreLeftAlone) {
  kernels::StepInput in = two_sequences(kernels::KvLayoutKind::paged);
  kernels::StepInput out;
  {
    kernels::StepInput gap = in;  // a prefill chunk that does not end the context
    gap.context_lens[1] = 9;
    EXPECT_FALSE(cuda::verification_as_decode_ok(gap));
    EXPECT_THROW(cuda::verification_as_decode(gap, out), std::invalid_argument);
  }
  {
    kernels::StepInput once = in;  // only the last row drawn: a prefill, not a verification
    for (auto* v : {&once.temperature, &once.top_p}) v->erase(v->begin() + 1, v->begin() + 3);
    for (auto* v : {&once.sample_rows, &once.top_k, &once.sample_position, &once.mask_index, &once.draft_token,
                    &once.draft_dist})
      v->erase(v->begin() + 1, v->begin() + 3);
    for (auto* v : {&once.seed, &once.seq_key}) v->erase(v->begin() + 1, v->begin() + 3);
    ASSERT_NO_THROW(once.validate());
    EXPECT_FALSE(cuda::verification_as_decode_ok(once));
  }
  {
    kernels::StepInput skip = in;  // positions that jump
    skip.positions[2] = 6;
    skip.positions[1] = 3;
    EXPECT_FALSE(cuda::verification_as_decode_ok(skip));
  }
  Step step;
  step.in = in;
  cuda::BlockTableStep tables;
  tables.rows = {5, 6};
  Step flat;
  ASSERT_TRUE(cuda::plan_verification_as_decode(step, flat, &tables));
  EXPECT_EQ(tables.rows, (std::vector<int32_t>{5, 6, 6, 6}));
  step.in.decode_only = false;
  Step plain;  // a plain decode step is already one row per sequence
  plain.in = two_sequences(kernels::KvLayoutKind::paged);
  kernels::StepInput one;
  cuda::verification_as_decode(plain.in, one);
  plain.in = one;
  EXPECT_FALSE(cuda::plan_verification_as_decode(plain, flat, nullptr));
}

/// A backend that runs every verification-shaped step as one-row sequences, as the cuda backend
/// does for its graphs, and counts them.
class DecodeRowsBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  StepOutput execute(const Step& step) override {
    Step flat;
    if (!cuda::plan_verification_as_decode(step, flat, nullptr)) return ForwardingBackend::execute(step);
    ++flattened;
    return ForwardingBackend::execute(flat);
  }
  int flattened = 0;
};

std::unique_ptr<Backend> cpu_of(std::shared_ptr<const ModelWeights> w) {
  CpuBackendOptions o;
  o.n_threads = 1;
  return std::make_unique<CpuBackend>(std::move(w), o);
}

std::map<uint64_t, std::vector<TokenId>> run_outputs(bool speculate, bool as_decode, float temperature, int* flattened,
                                                     int* accepted) {
  ModelWeights w = ModelWeights::random(micro_model(), 11);
  scale_residual_branches(w, 1, 0.3f);
  const auto target = std::make_shared<const ModelWeights>(std::move(w));
  EngineConfig ec = paged_config(continuous_sched(6, 64, true), 1 << 20);
  ec.kv.max_model_len = 128;
  auto backend = std::make_unique<DecodeRowsBackend>(cpu_of(target));
  DecodeRowsBackend* rows = backend.get();
  std::unique_ptr<Backend> used = as_decode ? std::unique_ptr<Backend>(std::move(backend)) : cpu_of(target);
  Engine e(ec, std::move(used));
  if (speculate) {
    ModelProposerOptions o;
    o.kv_cache_bytes = 1 << 20;
    o.max_model_len = 128;
    o.max_num_seqs = 8;
    e.set_proposer(std::make_unique<ModelProposer>("self", cpu_of(std::make_shared<const ModelWeights>(first_layers(*target, 1))),
                                                   target->config.vocab_size, o),
                   3);
  }
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = make_request(i, 5 + 4 * i, 12 + 2 * i);
    r.sampling.temperature = temperature;
    r.sampling.seed = 900 + uint64_t(i);
    reqs.push_back(r);
  }
  const RunResult r = run_virtual(e, at_zero(reqs));
  if (as_decode) *flattened = rows->flattened;
  *accepted = 0;
  for (const StepOutcome& s : r.steps) *accepted += s.spec_accepted_tokens;
  std::map<uint64_t, std::vector<TokenId>> m;
  for (const auto& [id, f] : r.finished) m[id] = f.outputs.at(0);
  return m;
}

TEST(VerifyRows, VerificationAsDecodeRowsGivesTheTokensOfTheRunWithoutDrafts) {
  for (const float temperature : {0.0f, 0.8f}) {
    int flattened = 0, accepted = 0, unused = 0;
    const auto plain = run_outputs(false, false, temperature, &unused, &unused);
    const auto as_decode = run_outputs(true, true, temperature, &flattened, &accepted);
    EXPECT_EQ(as_decode, plain) << "temperature " << temperature;
    EXPECT_GT(flattened, 0) << "verification steps ran as decode rows";
    EXPECT_GT(accepted, 0) << "and drafts were accepted from them";
  }
}

}  // namespace spec_verify_rows_test
}  // namespace servelab
