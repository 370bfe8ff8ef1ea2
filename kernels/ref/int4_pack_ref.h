#pragma once
// Plain C++ reference of the INT4 fragment layout (kernels/int4_pack.h): the repacking, written
// from the source side (each code goes where int4_pack::nibble_dest says; the GPU packer gathers
// by nibble_source), and quant_gemv's product read straight from the packed layout (what the
// packed kernel computes), each tested against quant_gemv_ref on the row layout.
#include <cstdint>
#include <vector>

namespace servelab::kernels {

/// The packed form of one INT4 matrix.
struct Int4Packed {
  std::vector<uint8_t> codes;    ///< int4_pack::Layout::code_bytes
  std::vector<uint32_t> groups;  ///< Layout::group_bytes / 4: 4 words a record
};

/// codes [n, k/2] (low nibble = even k), scales / zeros fp32 [k / group, n] -> int4_pack.h's
/// layout. Throws std::invalid_argument when the shape is not packable.
Int4Packed pack_int4_fragments_ref(const uint8_t* codes, const float* scales, const float* zeros, int n, int k,
                                   int group_size);

/// y[m, n] (+)= Σ_k x[m, k] · (q(n, k) − zero) · scale, reading q, scale and zero from the packed
/// layout (zero as the record's bf16 128 + zero, less 128). Accumulates in double.
void quant_gemv_int4_packed_ref(const float* x, int64_t x_stride, const Int4Packed& p, int n, int k, int group_size,
                                float* y, int m, bool accumulate);

}  // namespace servelab::kernels
