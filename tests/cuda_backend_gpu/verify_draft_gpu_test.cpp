// Rejection sampling of speculative drafts against q in the GPU sampler (kernels/sampling.h:
// SampleArgs::draft_dist): token for token equal to its plain C++ reference (verify_draft_ref) and
// to the CPU engine's verify_draft (engine/backend/sampler.h: the same rule, keys and arithmetic)
// on the same logits and q, for q near p, far from p and a point mass, with and without top-k /
// top-p; the distributions it writes (probs_out) equal to sampling_distribution_ref; and a
// chi-square goodness of fit of the verified tokens against p over many seeds. Skipped without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/sampler.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/cuda_check.h"
#include "kernels/ref/sampling_ref.h"
#include "kernels/sampling.h"

namespace servelab {
namespace verify_draft_gpu_test {

struct Rows {
  int vocab = 0;
  std::vector<float> logits, q;  // [n, vocab] each (q: draft i's distribution at row i)
  std::vector<kernels::SampleParams> params;
  std::vector<int32_t> drafts;
  int n() const { return int(drafts.size()); }
};

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

/// Runs the sampler with every row verifying its draft; returns the tokens and (probs) the
/// distributions it wrote.
std::vector<int32_t> run_gpu(const Rows& r, std::vector<float>* probs = nullptr) {
  const int n = r.n();
  std::vector<float> temp, top_p;
  std::vector<int32_t> top_k, pos, dist(static_cast<size_t>(n));
  std::vector<uint64_t> seed, key;
  for (int i = 0; i < n; ++i) {
    const kernels::SampleParams& p = r.params[size_t(i)];
    temp.push_back(p.temperature);
    top_k.push_back(p.top_k);
    top_p.push_back(p.top_p);
    seed.push_back(p.seed);
    key.push_back(p.seq_key);
    pos.push_back(p.position);
    dist[size_t(i)] = i;
  }
  kernels::SampleArgs a;
  a.logits = to_device(r.logits);
  a.n_rows = n;
  a.vocab = r.vocab;
  a.temperature = to_device(temp);
  a.top_k = to_device(top_k);
  a.top_p = to_device(top_p);
  a.seed = to_device(seed);
  a.seq_key = to_device(key);
  a.position = to_device(pos);
  int32_t* tokens = to_device(std::vector<int32_t>(size_t(n), -7));
  a.tokens = tokens;
  a.draft_token = to_device(r.drafts);
  a.draft_dist = to_device(dist);
  a.draft_probs = to_device(r.q);
  float* out_probs = nullptr;
  if (probs) {
    out_probs = to_device(std::vector<float>(size_t(n) * r.vocab, NAN));
    a.probs_out = out_probs;
  }
  kernels::sample_tokens(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> out(static_cast<size_t>(n));
  CUDA_CHECK(cudaMemcpy(out.data(), tokens, out.size() * 4, cudaMemcpyDeviceToHost));
  if (probs) {
    probs->resize(size_t(n) * r.vocab);
    CUDA_CHECK(cudaMemcpy(probs->data(), out_probs, probs->size() * 4, cudaMemcpyDeviceToHost));
  }
  for (const void* p : {(const void*)a.logits, (const void*)a.temperature, (const void*)a.top_k, (const void*)a.top_p,
                        (const void*)a.seed, (const void*)a.seq_key, (const void*)a.position, (const void*)a.draft_token,
                        (const void*)a.draft_dist, (const void*)a.draft_probs, (const void*)tokens, (const void*)out_probs})
    if (p) CUDA_CHECK(cudaFree(const_cast<void*>(p)));
  return out;
}

/// n rows over `vocab` tokens: random logits, a q of `kind` (0 near p, 1 far from p, 2 a point
/// mass), a draft drawn from q, random keys.
Rows make_rows(int n, int vocab, std::mt19937_64& rng, bool cuts) {
  Rows r;
  r.vocab = vocab;
  std::normal_distribution<float> z(0.0f, 2.0f);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int i = 0; i < n; ++i) {
    kernels::SampleParams p;
    p.temperature = std::vector<float>{0.6f, 1.0f, 1.3f}[size_t(i % 3)];
    p.top_k = cuts && i % 2 ? 40 : 0;
    p.top_p = cuts && i % 4 >= 2 ? 0.9f : 1.0f;
    p.seed = rng();
    p.seq_key = rng() % 8;
    p.position = int(rng() % 4096);
    std::vector<float> row(static_cast<size_t>(vocab));
    for (float& x : row) x = z(rng);
    std::vector<float> pd;
    kernels::sampling_distribution_ref(row, p, pd);
    std::vector<float> q(static_cast<size_t>(vocab), 0.0f);
    const int kind = i % 3;
    if (kind == 2) {
      q[size_t(rng() % uint64_t(vocab))] = 1.0f;
    } else {
      double sum = 0.0;
      for (int t = 0; t < vocab; ++t) {
        const double w = kind == 0 ? pd[size_t(t)] * std::exp(0.3 * z(rng)) + 1e-6 : u01(rng) * u01(rng);
        q[size_t(t)] = float(w);
        sum += w;
      }
      for (float& x : q) x = float(x / sum);
    }
    r.drafts.push_back(draw_from(q, u01(rng)));
    r.logits.insert(r.logits.end(), row.begin(), row.end());
    r.q.insert(r.q.end(), q.begin(), q.end());
    r.params.push_back(p);
  }
  return r;
}

TEST(VerifyDraftGpu, AgreesWithTheReferenceAndTheCpuDrawForDraw) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(std::random_device{}());
  for (const int vocab : {16, 1000, 32000})
    for (const bool cuts : {false, true}) {
      const Rows r = make_rows(vocab == 32000 ? 96 : 600, vocab, rng, cuts);
      std::vector<float> probs;
      const std::vector<int32_t> gpu = run_gpu(r, &probs);
      int accepted = 0, equal_cpu = 0;
      for (int i = 0; i < r.n(); ++i) {
        const std::span<const float> row(r.logits.data() + size_t(i) * vocab, size_t(vocab));
        const std::span<const float> q(r.q.data() + size_t(i) * vocab, size_t(vocab));
        const kernels::SampleParams& p = r.params[size_t(i)];
        EXPECT_EQ(gpu[size_t(i)], kernels::verify_draft_ref(row, p, r.drafts[size_t(i)], q))
            << "row " << i << " vocab " << vocab << " cuts " << cuts;
        std::vector<float> pd;
        kernels::sampling_distribution_ref(row, p, pd);
        double diff = 0.0;
        for (int t = 0; t < vocab; ++t) diff = std::max(diff, std::abs(double(pd[size_t(t)]) - probs[size_t(i) * vocab + t]));
        EXPECT_LT(diff, 1e-6) << "row " << i << ": probs_out against sampling_distribution_ref";
        SamplingParams sp;
        sp.temperature = p.temperature;
        sp.top_k = p.top_k;
        sp.top_p = p.top_p;
        sp.seed = p.seed;
        const TokenId cpu = verify_draft(row, sp, p.seq_key, p.position, r.drafts[size_t(i)], q);
        equal_cpu += cpu == gpu[size_t(i)];
        accepted += gpu[size_t(i)] == r.drafts[size_t(i)];
      }
      // The CPU's verify_draft: the same rule and keys; its top-k / top-p cut the same tokens
      // here (no ties), so every draw agrees.
      EXPECT_EQ(equal_cpu, r.n()) << "vocab " << vocab << " cuts " << cuts;
      EXPECT_GT(accepted, 0);
      EXPECT_LT(accepted, r.n());
    }
}

// The verified token is distributed as p whatever q is: 20,000 seeds of one row (16 tokens)
// against a far-off q, chi-square goodness of fit (15 degrees of freedom, 0.1% level: 37.7).
TEST(VerifyDraftGpu, VerifiedTokensAreDistributedAsTheTarget) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(17);
  const int vocab = 16, n = 20000;
  Rows one = make_rows(3, vocab, rng, false);  // row 1: a far-off q
  Rows r;
  r.vocab = vocab;
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const std::vector<float> row(one.logits.begin() + vocab, one.logits.begin() + 2 * vocab);
  const std::vector<float> q(one.q.begin() + vocab, one.q.begin() + 2 * vocab);
  kernels::SampleParams p = one.params[1];
  for (int i = 0; i < n; ++i) {
    p.seed = uint64_t(1000 + i);
    r.params.push_back(p);
    r.logits.insert(r.logits.end(), row.begin(), row.end());
    r.q.insert(r.q.end(), q.begin(), q.end());
    r.drafts.push_back(draw_from(q, u01(rng)));
  }
  const std::vector<int32_t> tokens = run_gpu(r);
  std::vector<float> pd;
  kernels::sampling_distribution_ref(row, p, pd);
  std::vector<int> count(static_cast<size_t>(vocab), 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    ++count[size_t(tokens[size_t(i)])];
    accepted += tokens[size_t(i)] == r.drafts[size_t(i)];
  }
  double chi2 = 0.0, overlap = 0.0;
  for (int t = 0; t < vocab; ++t) {
    const double e = n * double(pd[size_t(t)]);
    if (e > 0) chi2 += (count[size_t(t)] - e) * (count[size_t(t)] - e) / e;
    else EXPECT_EQ(count[size_t(t)], 0);
    overlap += std::min(pd[size_t(t)], q[size_t(t)]);
  }
  EXPECT_LT(chi2, 37.7);
  // The acceptance rate is sum_x min(p(x), q(x)) (4 sigma).
  const double rate = double(accepted) / n, sigma = std::sqrt(overlap * (1 - overlap) / n);
  EXPECT_NEAR(rate, overlap, 4 * sigma + 1e-9);
  EXPECT_LT(overlap, 0.9);  // a q that is really off
}

}  // namespace verify_draft_gpu_test
}  // namespace servelab
