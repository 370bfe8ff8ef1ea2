#include "kernels/ref/attention_ref.h"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace servelab::kernels {

void attention_ref(const AttentionRefArgs& a) {
  const int hd = a.shape.head_dim, n_kv = a.shape.n_kv_heads;
  if (n_kv <= 0 || a.n_heads % n_kv != 0) throw std::invalid_argument("attention_ref: n_heads must be a multiple of n_kv_heads");
  const int group = a.n_heads / n_kv;
  const int64_t row = a.shape.row_elems();
  std::vector<double> scores, acc(hd);
  for (int s = 0; s < a.n_seqs; ++s) {
    const int q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
    const int ctx = a.context_lens[s];
    for (int i = 0; i < q_len; ++i) {
      const int pos = ctx - q_len + i;
      for (int h = 0; h < a.n_heads; ++h) {
        const int kvh = h / group;
        const float* q = a.q + (int64_t(q0 + i) * a.n_heads + h) * hd;
        scores.assign(pos + 1, 0.0);
        double m = -INFINITY;
        for (int p = 0; p <= pos; ++p) {
          const float* k = a.k_cache + a.kv.slot(s, p) * row + int64_t(kvh) * hd;
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) dot += double(q[d]) * double(k[d]);
          scores[p] = dot * a.scale;
          m = std::max(m, scores[p]);
        }
        double sum = 0.0;
        for (double& x : scores) sum += (x = std::exp(x - m));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int p = 0; p <= pos; ++p) {
          const float* v = a.v_cache + a.kv.slot(s, p) * row + int64_t(kvh) * hd;
          for (int d = 0; d < hd; ++d) acc[d] += scores[p] * double(v[d]);
        }
        float* o = a.out + (int64_t(q0 + i) * a.n_heads + h) * hd;
        for (int d = 0; d < hd; ++d) o[d] = static_cast<float>(acc[d] / sum);
      }
    }
  }
}

}  // namespace servelab::kernels
