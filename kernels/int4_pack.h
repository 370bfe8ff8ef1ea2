#pragma once
// INT4 weights repacked once, at load, into the order quant_gemv's packed kernel
// (quant_gemv_packed.cu) feeds them to its mma fragments (Marlin's idea: the layout is ours, so a
// lane's 16-byte load is already its A operands for four k16 mmas, nothing permuted in the loop).
// The checkpoint layouts (AWQ, GPTQ) are first converted to quant_gemv's row layout (quant_gemv.h:
// codes [N, K/2], low nibble = even k; scales and integer zeros fp32 [K / group, N]); this is the
// layout the packed kernel reads, built from that one on the GPU (int4_quant.h's
// pack_int4_fragments) or on the CPU (kernels/ref/int4_pack_ref.h, the reference).
//
// Codes: [tiles = ceil(N / 16)][chunks = K / 64][32 lanes][4 words of 32 bits]. A tile is 16 rows
// of w, a chunk 64 K values: 512 bytes, one 16-byte vector a lane (lane = 4g + q), so a warp's load
// of a chunk is 512 contiguous bytes. Word j of lane (g, q) holds the A fragment of the chunk's
// j-th mma (m16n8k16), over K values k0 .. k0 + 3 with k0 = 64 chunk + 16q + 4j; its nibble e (bits
// 4e .. 4e + 3) is row g + 8 (e & 1) of the tile at k = k0 + 2 ((e >> 1) & 1) + (e >> 2). So
// (w >> 4i) & 0x000F000F is the bf16 pair of fragment register a_i (rows g, g + 8, g, g + 8 for i
// = 0..3; PTX's k slots 2q, 2q + 1 / 2q + 8, 2q + 9 stand for K values k0, k0 + 1 / k0 + 2, k0 + 3),
// and x's B fragments are x[k0, k0 + 1] and x[k0 + 2, k0 + 3]: 16 consecutive values of x a lane a
// chunk, two 16-byte loads in natural order. Rows past N are zero codes.
// Groups: [tiles][K / group][8 g][4 words] (16 bytes, one load a lane, the quad's lanes the same
// address): the fp32 scales of rows g and g + 8, then (128 + zero) of row g and of row g + 8, each
// as a bf16 pair (the 0x4300 trick gives 128 + q, so one bf16 subtraction makes q − zero exactly).
// Rows past N: scale 0 and zero 0. The same bytes per row and group as the row layout's fp32
// scale and zero.
// Requirements: K and group_size multiples of 128 (a warp step is 128 values of one group).
#include <cstdint>

#ifndef SERVELAB_HD  // as in step_input.h
#if defined(__CUDACC__)
#define SERVELAB_HD __host__ __device__ __forceinline__
#else
#define SERVELAB_HD inline
#endif
#endif

namespace servelab::kernels::int4_pack {

constexpr int kTileRows = 16;
constexpr int kChunkK = 64;       ///< K values of a tile's chunk
constexpr int kChunkBytes = 512;  ///< 32 lanes x 16 bytes
constexpr int kGroupRecordBytes = 16;
constexpr int kMultiple = 128;    ///< K and group_size must be multiples of this

/// The packed sizes of an [n, k] matrix with groups of group_size.
struct Layout {
  int n = 0, k = 0, group_size = 128;
  SERVELAB_HD int tiles() const { return (n + kTileRows - 1) / kTileRows; }
  SERVELAB_HD int chunks() const { return k / kChunkK; }
  SERVELAB_HD int groups() const { return k / group_size; }
  SERVELAB_HD int64_t code_bytes() const { return int64_t(tiles()) * chunks() * kChunkBytes; }
  SERVELAB_HD int64_t group_bytes() const { return int64_t(tiles()) * groups() * 8 * kGroupRecordBytes; }
  bool packable() const { return n > 0 && k > 0 && k % kMultiple == 0 && group_size % kMultiple == 0 && k % group_size == 0; }
};

/// Source of nibble e (0..7) of word j (0..3) of lane (0..31) in a chunk: row within the tile
/// (0..15) and K offset within the chunk (0..63).
SERVELAB_HD void nibble_source(int lane, int j, int e, int& row, int& k_in_chunk) {
  const int g = lane >> 2, q = lane & 3;
  row = g + 8 * (e & 1);
  k_in_chunk = 16 * q + 4 * j + 2 * ((e >> 1) & 1) + (e >> 2);
}

/// Where tile row r (0..15) at chunk offset kc (0..63) goes: lane, word and nibble (the inverse
/// of nibble_source).
SERVELAB_HD void nibble_dest(int r, int kc, int& lane, int& j, int& e) {
  const int q = kc / 16, within = kc % 16;  // within = 4j + 2 ((e >> 1) & 1) + (e >> 2)
  j = within / 4;
  const int low = within % 4;  // 0: k0, 1: k0 + 1, 2: k0 + 2, 3: k0 + 3
  lane = 4 * (r % 8) + q;
  e = (r / 8) + 2 * (low / 2) + 4 * (low % 2);
}

}  // namespace servelab::kernels::int4_pack
