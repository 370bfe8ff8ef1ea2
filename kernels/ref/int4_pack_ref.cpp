#include "kernels/ref/int4_pack_ref.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/model/half.h"
#include "kernels/int4_pack.h"

namespace servelab::kernels {

using namespace int4_pack;

Int4Packed pack_int4_fragments_ref(const uint8_t* codes, const float* scales, const float* zeros, int n, int k,
                                   int group_size) {
  const Layout lay{n, k, group_size};
  if (!lay.packable())
    throw std::invalid_argument("pack_int4_fragments_ref: [" + std::to_string(n) + ", " + std::to_string(k) +
                                "] with group " + std::to_string(group_size) + " is not packable");
  Int4Packed p;
  p.codes.assign(size_t(lay.code_bytes()), 0);
  p.groups.assign(size_t(lay.group_bytes() / 4), 0);
  std::vector<uint32_t> words(p.codes.size() / 4, 0);
  for (int row = 0; row < n; ++row)
    for (int col = 0; col < k; ++col) {
      const uint32_t q = (codes[int64_t(row) * (k / 2) + col / 2] >> (4 * (col & 1))) & 0xF;
      int lane, j, e;
      nibble_dest(row % kTileRows, col % kChunkK, lane, j, e);
      const int64_t chunk_index = int64_t(row / kTileRows) * lay.chunks() + col / kChunkK;
      words[size_t((chunk_index * 32 + lane) * 4 + j)] |= q << (4 * e);
    }
  std::memcpy(p.codes.data(), words.data(), p.codes.size());
  for (int tile = 0; tile < lay.tiles(); ++tile)
    for (int gr = 0; gr < lay.groups(); ++gr)
      for (int g = 0; g < 8; ++g) {
        uint32_t* rec = p.groups.data() + ((int64_t(tile) * lay.groups() + gr) * 8 + g) * 4;
        for (int h = 0; h < 2; ++h) {
          const int row = tile * kTileRows + g + 8 * h;
          const float s = row < n ? scales[int64_t(gr) * n + row] : 0.0f;
          const float z = row < n ? zeros[int64_t(gr) * n + row] : 0.0f;
          std::memcpy(&rec[h], &s, 4);
          const uint32_t zb = f32_to_bf16(128.0f + z);
          rec[2 + h] = zb | (zb << 16);
        }
      }
  return p;
}

void quant_gemv_int4_packed_ref(const float* x, int64_t x_stride, const Int4Packed& p, int n, int k, int group_size,
                                float* y, int m, bool accumulate) {
  const Layout lay{n, k, group_size};
  std::vector<double> acc(size_t(m) * n, 0.0);
  for (int tile = 0; tile < lay.tiles(); ++tile)
    for (int chunk = 0; chunk < lay.chunks(); ++chunk)
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < 4; ++j) {
          uint32_t word;
          std::memcpy(&word, p.codes.data() + ((int64_t(tile) * lay.chunks() + chunk) * 32 + lane) * 16 + 4 * j, 4);
          for (int e = 0; e < 8; ++e) {
            int r, kc;
            nibble_source(lane, j, e, r, kc);
            const int row = tile * kTileRows + r, col = chunk * kChunkK + kc;
            if (row >= n) continue;
            const uint32_t* rec = p.groups.data() + ((int64_t(tile) * lay.groups() + col / group_size) * 8 + r % 8) * 4;
            float scale;
            std::memcpy(&scale, &rec[r / 8], 4);
            const double zero = double(bf16_to_f32(uint16_t(rec[2 + r / 8] & 0xFFFF))) - 128.0;
            const double w = (double((word >> (4 * e)) & 0xF) - zero) * scale;
            for (int mm = 0; mm < m; ++mm) acc[size_t(mm) * n + row] += double(x[int64_t(mm) * x_stride + col]) * w;
          }
        }
  for (size_t i = 0; i < acc.size(); ++i) y[i] = float(accumulate ? y[i] + acc[i] : acc[i]);
}

}  // namespace servelab::kernels
